"""Export of :class:`~sparring.envs.core.Episode` records: JSONL files and HF ``datasets``.

The record (defined with the env contract) holds what happened and, filled by the runner, how it
was sampled: the group of attempts, the sampling settings, the weights version, a format version
(records of format 1 still load).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sparring import SparringError
from sparring.envs.core import EPISODE_SCHEMA_VERSION, Episode, json_line, storable

__all__ = ["SCHEMA_VERSION", "Episode", "episodes_to_dataset", "read_jsonl", "write_jsonl"]

SCHEMA_VERSION = EPISODE_SCHEMA_VERSION


def write_jsonl(episodes: Iterable[Episode], path: str | Path, *, append: bool = False) -> Path:
    """Write one episode per line; returns the path.

    Lines are :func:`~sparring.envs.core.json_line`: an action or outcome holding a lone surrogate
    (or a value JSON has no form for) is written with it replaced, never failing the write.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if append else "w", encoding="utf-8") as f:
        for ep in episodes:
            f.write(json_line(ep.to_dict()) + "\n")
    return path


def read_jsonl(path: str | Path) -> list[Episode]:
    """Read episodes written by :func:`write_jsonl` (any format version up to :data:`SCHEMA_VERSION`).

    Raises:
        SparringError: The file is missing, a line is not an episode, or its format is newer.
    """
    path = Path(path)
    if not path.is_file():
        raise SparringError(f"no episode file at {path}; check the path (`sparring eval ... --out` writes one).")
    episodes = []
    # Lines end at "\n" only: str.splitlines also splits at \x85, \u2028 and the like, which a
    # record written with ensure_ascii=False holds as themselves inside its strings.
    for number, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):
        if not line.strip():
            continue
        try:
            episodes.append(Episode.from_dict(json.loads(line)))
        except (json.JSONDecodeError, TypeError) as e:
            raise SparringError(f"line {number} of {path} is not an episode record ({e}).") from e
        except SparringError as e:
            raise SparringError(f"line {number} of {path}: {e}") from e
    return episodes


def episodes_to_dataset(episodes: Iterable[Episode]) -> Any:
    """A ``datasets.Dataset`` with one row per episode (tasks, outcomes and sampling as JSON strings).

    Task, outcome and sampling dicts differ in shape between envs and agents, so they are stored as
    JSON text to keep one schema for every domain; everything else keeps its type (token lists
    stay integer lists).
    """
    from datasets import Dataset

    rows = []
    for ep in episodes:
        row = storable(ep.to_dict())
        for key in ("task", "outcome", "sampling"):
            if key in row:  # an env record without the agents' fields has no sampling
                row[key] = json_line(row[key])
        row["timings"] = json.dumps(row["timings"])
        row["turn_rewards"] = ep.turn_rewards
        rows.append(row)
    return Dataset.from_list(rows)
