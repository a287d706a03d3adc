"""Export of :class:`~sparring.envs.core.Episode` records: JSONL files and HF ``datasets``."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sparring import SparringError
from sparring.envs.core import Episode

__all__ = ["episodes_to_dataset", "read_jsonl", "write_jsonl"]


def write_jsonl(episodes: Iterable[Episode], path: str | Path, *, append: bool = False) -> Path:
    """Write one episode per line; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if append else "w", encoding="utf-8") as f:
        for ep in episodes:
            f.write(json.dumps(ep.to_dict(), ensure_ascii=False) + "\n")
    return path


def read_jsonl(path: str | Path) -> list[Episode]:
    """Read episodes written by :func:`write_jsonl`.

    Raises:
        SparringError: The file is missing or a line is not an episode.
    """
    path = Path(path)
    if not path.is_file():
        raise SparringError(f"no episode file at {path}; write one with `sparring demo --out {path}`.")
    episodes = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            episodes.append(Episode.from_dict(json.loads(line)))
        except (json.JSONDecodeError, TypeError) as e:
            raise SparringError(f"line {number} of {path} is not an episode record ({e}).") from e
    return episodes


def episodes_to_dataset(episodes: Iterable[Episode]) -> Any:
    """A ``datasets.Dataset`` with one row per episode (tasks and outcomes as JSON strings).

    Task and outcome dicts differ in shape between envs, so they are stored as JSON text to keep one
    schema for every domain; everything else keeps its type (token lists stay integer lists).
    """
    from datasets import Dataset

    rows = []
    for ep in episodes:
        row = ep.to_dict()
        row["task"] = json.dumps(row["task"], ensure_ascii=False)
        row["outcome"] = json.dumps(row["outcome"], ensure_ascii=False)
        row["timings"] = json.dumps(row["timings"])
        row["turn_rewards"] = ep.turn_rewards
        rows.append(row)
    return Dataset.from_list(rows)
