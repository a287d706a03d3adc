"""Episodes as the agents record them, and their export: JSONL files and HF ``datasets``.

The env's :class:`~sparring.envs.core.Episode` holds what happened (turns, tokens, outcome). What
training also needs is how it was sampled, and the env knows nothing of that: which group of
attempts the episode belongs to (for a group-relative advantage), the sampling settings, and which
weights sampled it (how stale it is). :class:`Episode` adds those, and a format version, so files
written before these fields existed still load.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparring import SparringError
from sparring.envs import core

__all__ = ["SCHEMA_VERSION", "Episode", "episodes_to_dataset", "read_jsonl", "write_jsonl"]

#: Version of the episode record format. 1: the env's record alone (lines carry no version);
#: 2: with ``group_id``, ``sampling``, ``weights_version`` and ``schema_version``.
SCHEMA_VERSION = 2


@dataclass
class Episode(core.Episode):
    """The env's episode record plus how the agent side sampled it (what a trainer needs).

    Fields a record of an older format lacked load as unknown: ``group_id`` and
    ``weights_version`` None, ``sampling`` empty; ``schema_version`` says which format it was.
    """

    group_id: str | None = None
    """Group of episodes compared with each other (e.g. the G attempts at one task), or None."""
    sampling: dict[str, Any] = field(default_factory=dict)
    """The sampling settings of its turns: ``temperature``, ``top_p``, ``max_new_tokens``, ``stop``
    and ``seed`` (the run's base seed, from which each turn's own seed derives). Empty when nothing
    was sampled (scripted agents) or the record predates the field."""
    weights_version: int | None = None
    """The generator's ``weights_version`` when its turns were sampled (the oldest one if the
    weights changed during the episode); None without a token generator."""
    schema_version: int = SCHEMA_VERSION
    """Format version of the record (see :data:`SCHEMA_VERSION`)."""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Episode:
        """Inverse of :meth:`to_dict`; also reads records of older formats.

        Raises:
            SparringError: The record was written by a newer Sparring (a format this one cannot read).
        """
        data = dict(data)
        data.setdefault("schema_version", 1)  # format 1 carried no version
        if data["schema_version"] > SCHEMA_VERSION:
            raise SparringError(
                f"the episode record has format {data['schema_version']}, newer than this Sparring reads "
                f"({SCHEMA_VERSION}); upgrade sparring to read it."
            )
        episode = super().from_dict(data)
        assert isinstance(episode, Episode)
        return episode


def write_jsonl(episodes: Iterable[core.Episode], path: str | Path, *, append: bool = False) -> Path:
    """Write one episode per line; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if append else "w", encoding="utf-8") as f:
        for ep in episodes:
            f.write(json.dumps(ep.to_dict(), ensure_ascii=False) + "\n")
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
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            episodes.append(Episode.from_dict(json.loads(line)))
        except (json.JSONDecodeError, TypeError) as e:
            raise SparringError(f"line {number} of {path} is not an episode record ({e}).") from e
        except SparringError as e:
            raise SparringError(f"line {number} of {path}: {e}") from e
    return episodes


def episodes_to_dataset(episodes: Iterable[core.Episode]) -> Any:
    """A ``datasets.Dataset`` with one row per episode (tasks, outcomes and sampling as JSON strings).

    Task, outcome and sampling dicts differ in shape between envs and agents, so they are stored as
    JSON text to keep one schema for every domain; everything else keeps its type (token lists
    stay integer lists).
    """
    from datasets import Dataset

    rows = []
    for ep in episodes:
        row = ep.to_dict()
        for key in ("task", "outcome", "sampling"):
            if key in row:  # an env record without the agents' fields has no sampling
                row[key] = json.dumps(row[key], ensure_ascii=False)
        row["timings"] = json.dumps(row["timings"])
        row["turn_rewards"] = ep.turn_rewards
        rows.append(row)
    return Dataset.from_list(rows)
