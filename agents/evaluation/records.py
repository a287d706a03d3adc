"""Playing an instance set through the runner, one fsync'd record per finished instance, resumable.

An evaluation's folder (``--out``) holds ``run.json`` (what is evaluated: domain, model, split,
settings, the instance ids in order) and ``records.jsonl``, one JSON line per finished instance,
appended and flushed to disk the moment its episode ends. Run again with the same command, the
evaluation reads the records back and plays only the instances that have none, so Ctrl-C, SIGTERM
or a killed process loses at most the episodes in flight. An instance whose episode failed
(container, timeout, server error) has a record too: its ``error`` says why, and it counts as
unsolved.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparring import SparringError
from sparring.agents.episodes import Episode
from sparring.agents.runner import EpisodeRunner, EpisodeSpec, RunnerConfig
from sparring.envs.core import json_line, storable

__all__ = ["EvalInterrupted", "Instance", "RecordLog", "check_run", "episode_fields", "play"]

RUN_FILE = "run.json"
RECORDS_FILE = "records.jsonl"
#: Characters of each action a record keeps (enough to see what the policy tried).
ACTION_CHARS = 300


@dataclass
class Instance:
    """One item of an evaluation set."""

    id: str
    """Stable id (a bug id, a question id): what resumes and comparisons match on."""
    spec: EpisodeSpec
    """The episode that plays it."""
    group: str
    """Where it comes from: the repository, the question's source."""
    kind: str
    """What it is: the bug's origin (``procedural:off_by_one``), the question's kind."""


class EvalInterrupted(Exception):
    """The run was stopped (Ctrl-C, SIGTERM); every finished instance is on disk."""

    def __init__(self, message: str, signum: int):
        """Remember how it was stopped (the CLI exits with 128 + the signal's number)."""
        super().__init__(message)
        self.signum = signum


class RecordLog:
    """The append-only ``records.jsonl`` of an evaluation folder.

    Args:
        path: The file (created on the first record).
    """

    def __init__(self, path: Path):
        """Open nothing yet; :meth:`load` reads what earlier runs wrote."""
        self.path = path

    def load(self) -> dict[str, dict[str, Any]]:
        """The records on disk, by instance id (a later line wins).

        A last line without its newline is what a killed process leaves mid-write: it is cut
        off, so the next record starts on a line of its own.
        """
        if not self.path.is_file():
            return {}
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            data = data[: data.rfind(b"\n") + 1]
            with self.path.open("r+b") as fh:
                fh.truncate(len(data))
        records = {}
        for number, line in enumerate(data.decode("utf-8").split("\n"), 1):  # not splitlines: see read_jsonl
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                records[str(record["id"])] = record
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise SparringError(f"line {number} of {self.path} is not an instance record ({e}).") from None
        return records

    def append(self, record: dict[str, Any]) -> None:
        """Add one record and make it durable before returning."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json_line(record) + "\n")  # valid UTF-8 whatever the episode's strings held
            fh.flush()
            os.fsync(fh.fileno())


def check_run(out: Path, run: dict[str, Any]) -> None:
    """Write ``run.json``, or check that the folder's earlier run evaluated the same thing.

    A run of the same thing on more instances (a larger ``--limit``) extends the earlier one: its
    records stand and only the new instances are played.

    Raises:
        SparringError: ``out`` holds a run of another model, instance set or setting.
    """
    path = out / RUN_FILE
    if path.is_file():
        try:
            earlier = json.loads(path.read_text())
        except json.JSONDecodeError:
            earlier = None
        if not isinstance(earlier, dict):
            raise SparringError(f"{path} is not an evaluation's run file; pick another --out.")
        changed = sorted(k for k in set(run) | set(earlier) if run.get(k) != earlier.get(k))
        if changed == ["instances"] and set(earlier.get("instances") or []) <= set(run.get("instances") or []):
            changed = []  # the same evaluation on a superset of its instances: extended below
            print(f"extending {out} to {len(run['instances'])} instances", file=sys.stderr)
        if changed:
            raise SparringError(
                f"{out} holds an evaluation with other {', '.join(changed)}; resume it with the same options, "
                "or pass another --out."
            )
        if run == earlier:
            return
    out.mkdir(parents=True, exist_ok=True)
    work = path.with_suffix(".tmp")
    work.write_text(json.dumps(run, indent=1))
    work.replace(path)


@contextmanager
def _sigterm_as_interrupt() -> Iterator[list[int]]:
    """Within the block, SIGTERM stops the run like Ctrl-C (the runner closes its envs on the way out).

    Yields a list that holds the number of the signal that stopped the run, if one did. A handler
    installed later (the sandbox's container cleanup) calls this one after its own work.
    """
    caught: list[int] = []
    active = True

    def on_sigterm(signum: int, frame: Any) -> None:
        if active:
            caught.append(signum)
            raise KeyboardInterrupt
        signal.signal(signum, signal.SIG_DFL)  # after the run: terminate as usual
        os.kill(os.getpid(), signum)

    previous = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, on_sigterm)
    except ValueError:  # not the main thread: Ctrl-C only
        yield caught
        return
    try:
        yield caught
    finally:
        active = False
        if signal.getsignal(signal.SIGTERM) is on_sigterm:
            signal.signal(signal.SIGTERM, previous)


def episode_fields(episode: Episode) -> dict[str, Any]:
    """What every record holds about its episode, whatever the domain."""
    tools = Counter(t.tool for t in episode.turns if t.tool)
    return {
        "reward": episode.reward,
        "turns": len(episode.turns),
        "tokens": sum(episode.action_mask) if episode.token_ids else None,
        "seconds": round(float(episode.timings.get("wall", 0.0)), 3),
        "tools": dict(tools),
        "actions": [t.action[:ACTION_CHARS] for t in episode.turns],
        "error": episode.error,
    }


def play(
    instances: Sequence[Instance],
    policy: Any,
    config: RunnerConfig,
    out: Path,
    run: dict[str, Any],
    record_of: Callable[[Instance, Episode], dict[str, Any]],
) -> list[dict[str, Any]]:
    """Play the instances that ``out`` has no record of; every record, in instance order.

    Args:
        instances: The instance set (ids unique).
        policy: The runner policy (a generator, or a factory of scripted agents).
        config: Runner settings.
        out: The evaluation folder.
        run: What is evaluated (``run.json``); a resumed run must match it.
        record_of: The domain's fields of a finished instance's record (outcome, score, reason).

    Raises:
        EvalInterrupted: Ctrl-C or SIGTERM stopped the run; the finished instances are recorded.
    """
    ids = [i.id for i in instances]
    if len(set(ids)) != len(ids):
        twice = sorted(k for k, n in Counter(ids).items() if n > 1)
        raise SparringError(f"the instance set names {', '.join(twice[:3])} more than once; remove the duplicates.")
    check_run(out, run | {"instances": ids})
    log = RecordLog(out / RECORDS_FILE)
    records = log.load()
    todo = [i for i in instances if i.id not in records]
    if records and todo:
        print(f"resuming {out}: {len(instances) - len(todo)} of {len(instances)} instances done", file=sys.stderr)

    def on_episode(index: int, episode: Episode) -> None:
        instance = todo[index]
        record = {"id": instance.id, "group": instance.group, "kind": instance.kind}
        record |= episode_fields(episode) | record_of(instance, episode)
        record = storable(record)  # kept for the report too, which is written as UTF-8 as well
        log.append(record)
        records[instance.id] = record

    if todo:
        runner = EpisodeRunner(policy, config, on_episode=on_episode)
        with _sigterm_as_interrupt() as caught:
            try:
                runner.run([i.spec for i in todo])
            except SparringError as e:  # a server gone after its retries: the run stops, what is done stays
                done = sum(1 for i in instances if i.id in records)
                raise SparringError(
                    f"{str(e).rstrip('.')}; {done} of {len(instances)} instances are recorded in {log.path}, "
                    "and the same command resumes the rest."
                ) from None
            except KeyboardInterrupt:
                signum = caught[0] if caught else signal.SIGINT
                done = sum(1 for i in instances if i.id in records)
                raise EvalInterrupted(
                    f"interrupted: {done} of {len(instances)} instances are recorded in {log.path}; "
                    "run the same command again to finish the rest.",
                    int(signum),
                ) from None
    return [records[i] for i in ids]
