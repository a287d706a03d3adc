"""The visible tests of a repair: what the solver (and its judge) can run, measured where nothing can cheat.

Two users, both about the tests the solver's starting tree holds (the bug in, the tests that reveal it
weakened), never the oracle tests grading restores:

* **The SWE turn signal** (``SWERewards.test_turn_reward``, ``swe_test_turn_reward`` in training; 0 = off):
  a turn after which a test the agent ran passes that failed before earns reward. The hacks are guarded
  by class, not by example:

  - *Tests the agent wrote or edited.* Only the visible tests that failed in the starting tree count
    (:func:`visible_statuses` of the unchanged tree; the tracked set), and every measurement runs them
    in a FRESH container on the starting tree plus only the changes grading would carry
    (:func:`~sparring.envs.swe.carry.carry_plan`: no test file, ``conftest.py``, plugin or
    configuration of the agent's), through the harness that grading trusts, refusing what grading
    refuses (:func:`~sparring.envs.swe.grading.harness_tampering`). What the agent's own run printed
    never decides anything.
  - *A test that failed for an unrelated reason* (a typo'd test id that errors, a broken option, then
    fixed). "Failed before" is the env's own run of the starting tree, not the agent's; a selection
    naming no tracked test measures nothing (:func:`selected`).
  - *Flip-flopping* (break, then fix, to farm). Each tracked test's pay is a potential: +w/n when it is
    first measured passing, −w/n when a measurement finds it failing again after it was paid, so an
    episode's turn rewards sum to ``w`` times the share of the tracked tests passing at its last
    measurement, at most ``w``: a break and a fix cancel.

  The env measures only on a ``bash`` turn whose command runs pytest (:func:`pytest_selection`) and that
  selects a tracked test (by file, folder or node id; no path argument selects them all), so the
  signal costs a container only when the agent itself tested.
* **The SWE judge's ``run_tests``** (:mod:`~sparring.envs.swe.judge_env`): the solver's final tree, rebuilt
  in a fresh container (:func:`final_tree`, :func:`rebuild_final_tree`), where the judge runs what the
  solver could run.
"""

from __future__ import annotations

import hashlib
import posixpath
import shlex
import threading
from dataclasses import dataclass, field
from typing import Any

from sparring.envs.swe.bugs.artifact import BugArtifact
from sparring.envs.swe.capabilities import processes_allowed
from sparring.envs.swe.carry import carry_plan
from sparring.envs.swe.fresh_imports import TaskImage
from sparring.envs.swe.grading import (
    PER_TEST_TIMEOUT,
    SolverChanges,
    apply_changes,
    grade_time_limit,
    harness_tampering,
    setup_solver_repo,
)
from sparring.envs.swe.harness import HONEST_STATUSES, harness_run, pytest_ini
from sparring.envs.swe.runs import BUGGY, RepoState, _q, _tar, prepare_state

__all__ = [
    "FINAL_TREE_BYTES",
    "TestTurnSignal",
    "final_tree",
    "pytest_selection",
    "rebuild_final_tree",
    "selected",
    "visible_statuses",
]

#: Bytes of changed files an episode's record keeps of its final tree at most (the judge rebuilds it).
FINAL_TREE_BYTES = 1 << 20

#: pytest options whose value is the next word (so it is no test path).
_VALUED = frozenset(
    {"-k", "-m", "-p", "-c", "-o", "-W", "-n", "-r", "--tb", "--maxfail", "--deselect", "--ignore", "--ignore-glob",
     "--rootdir", "--confcutdir", "--junitxml", "--junit-xml", "--log-level", "--durations", "--basetemp",
     "--import-mode", "--override-ini", "--timeout", "--capture", "--color"}
)  # fmt: skip
_RUNNERS = frozenset({"pytest", "py.test"})
_PYTHONS = frozenset({"python", "python3"})


# ------------------------------------------------------------------------------ the honest measurement


def visible_statuses(
    pool: Any,
    artifact: BugArtifact,
    changes: SolverChanges,
    *,
    timeout: float = 300.0,
    clean_seconds: float | None = None,
    per_test_timeout: float = PER_TEST_TIMEOUT,
) -> dict[str, str] | None:
    """The visible tests' statuses on the starting tree plus the changes grading would carry, or None.

    Built as grading builds its state (bug, the repository's own pytest options, the carried changes),
    then weakened again as the solver's tree is, and run by the harness in a fresh container of ``pool``.
    None when grading would refuse the changes or the run did not end honestly: nothing counts then.
    """
    plan = carry_plan(artifact, changes)
    if harness_tampering(artifact, changes, plan, TaskImage.of(pool.image, pool.hosts)):
        return None
    sandbox = pool.acquire()
    try:
        if prepare_state(sandbox, artifact, BUGGY):
            return None
        config = pytest_ini(sandbox, artifact.test_files)
        apply_changes(sandbox, artifact, plan)  # restores the oracle test files: weakened again next
        if prepare_state(sandbox, artifact, RepoState(weaken=True)):
            return None
        run = harness_run(
            sandbox,
            artifact.test_files,
            timeout=grade_time_limit(clean_seconds, timeout),
            config=config,
            test_timeout=per_test_timeout,
            processes=processes_allowed(artifact.repo),
        )
    except Exception:  # whatever the agent's files did to the run: no measurement, no reward
        return None
    finally:
        sandbox.close()
    return dict(run.tests) if run.status in HONEST_STATUSES else None


# ------------------------------------------------------------------------------ what the agent ran


def pytest_selection(command: str) -> list[str] | None:
    """The path arguments of the first pytest run in a shell command ([] for none), or None if it runs none.

    Reads ``pytest ...``, ``py.test ...`` and ``python -m pytest ...`` up to the next shell operator;
    options and their values are skipped. A command the shell lexer cannot read runs nothing here.

    Example:
        >>> pytest_selection("cd /repo && python -m pytest -q -k ord tests/test_x.py::test_f 2>&1 | tail")
        ['tests/test_x.py::test_f']
        >>> pytest_selection("ls") is None
        True
    """
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        return None
    start = None
    for i, word in enumerate(words):
        name = posixpath.basename(word)
        if i and not _operator(words[i - 1]) and "=" not in words[i - 1]:
            continue  # an argument (``echo pytest``), not a command
        if name in _RUNNERS:
            start = i + 1
        elif name.rstrip("0123456789.") in _PYTHONS and words[i + 1 : i + 3] == ["-m", "pytest"]:
            start = i + 3
        if start is not None:
            break
    if start is None:
        return None
    paths: list[str] = []
    skip = False
    for i in range(start, len(words)):
        word = words[i]
        if _operator(word):
            break
        if skip or word.startswith("-"):
            skip = not skip and word in _VALUED
            continue
        following = words[i + 1] if i + 1 < len(words) else ""
        if not (word.isdigit() and following[:1] in ("<", ">")):  # the 2 of 2>&1
            paths.append(word)
    return paths


def _operator(word: str) -> bool:
    return bool(word) and set(word) <= set("();<>|&")


def _relative(path: str) -> str:
    path = posixpath.normpath(path)
    if path in ("/repo", "."):
        return ""
    return path.removeprefix("/repo/").removeprefix("./")


def selected(tracked: list[str], paths: list[str]) -> list[str]:
    """The tracked test ids a pytest run with these path arguments selects (all of them for no argument).

    Example:
        >>> selected(["t.py::test_a[1]", "t.py::test_b", "u.py::test_c"], ["./t.py::test_a"])
        ['t.py::test_a[1]']
    """
    if not paths:
        return list(tracked)
    wanted = [_relative(p) for p in paths]
    chosen = []
    for test in tracked:
        file = test.split("::", 1)[0]
        for want in wanted:
            if (
                want in ("", test, file)
                or file.startswith(want.rstrip("/") + "/")
                or test.startswith((want + "::", want + "["))
            ):
                chosen.append(test)
                break
    return chosen


# ------------------------------------------------------------------------------ the turn signal

_BASELINES: dict[str, list[str]] = {}  # task id -> its tracked tests: the starting tree is a task's own
_BASELINES_KEPT = 4096  # tasks remembered at most (the oldest forgotten first): a long run draws new bugs for ever
_BASELINE_LOCK = threading.Lock()


def _changes_key(changes: SolverChanges) -> str:
    digest = hashlib.sha256()
    for path, data in sorted(changes.written.items()):
        digest.update(path.encode() + b"\0" + hashlib.sha256(data).digest())
    digest.update("\0".join(changes.deleted).encode())
    return digest.hexdigest()


@dataclass
class TestTurnSignal:
    """One repair episode's turn signal: the tracked tests and what each has been paid (see the module docstring).

    Attributes:
        weight: ``w``: an episode earns at most this much in all.
        task: The repair task (``id``, ``artifact``, ``clean_seconds``, ``per_test_timeout``).
        pool: A :class:`~sparring.containers.pools.SandboxPool` of the task's image.
        timeout: Seconds a measurement's test run may take at most.
        paid: Tracked test id -> whether its pass has been paid (and not taken back since).
    """

    __test__ = False  # not a pytest test class, despite the name

    weight: float
    task: dict[str, Any]
    pool: Any
    timeout: float = 300.0
    paid: dict[str, bool] = field(default_factory=dict)
    _last: tuple[str, dict[str, str] | None] | None = None

    def _measure(self, changes: SolverChanges) -> dict[str, str] | None:
        key = _changes_key(changes)
        if self._last is None or self._last[0] != key:  # the same tree measures the same: no container
            artifact = BugArtifact.from_dict(self.task["artifact"])
            statuses = visible_statuses(
                self.pool,
                artifact,
                changes,
                timeout=self.timeout,
                clean_seconds=self.task.get("clean_seconds"),
                per_test_timeout=self.task.get("per_test_timeout") or PER_TEST_TIMEOUT,
            )
            self._last = key, statuses
        return self._last[1]

    def tracked(self) -> list[str]:
        """The visible tests that fail in the starting tree (measured once per task, then remembered)."""
        task_id = str(self.task["id"])
        with _BASELINE_LOCK:
            known = _BASELINES.get(task_id)
        if known is None:
            start = self._measure(SolverChanges())
            known = sorted(t for t, s in (start or {}).items() if s in ("failed", "error"))
            if start is not None:  # an infrastructure hiccup is not remembered as "nothing fails"
                with _BASELINE_LOCK:
                    _BASELINES[task_id] = known
                    while len(_BASELINES) > _BASELINES_KEPT:
                        _BASELINES.pop(next(iter(_BASELINES)))
        return known

    def reward(self, paths: list[str], changes: SolverChanges) -> float:
        """The turn reward of a pytest run with these path arguments, the agent's tree holding ``changes``."""
        tracked = self.tracked()
        chosen = selected(tracked, paths)
        if not self.weight or not chosen:
            return 0.0
        statuses = self._measure(changes)
        if statuses is None:
            return 0.0
        delta = 0
        for test in chosen:
            passing = statuses.get(test) == "passed"
            delta += int(passing) - int(self.paid.get(test, False))
            self.paid[test] = passing
        return self.weight * delta / len(tracked)


# ------------------------------------------------------------------------------ the final tree, for the judge


def final_tree(changes: SolverChanges) -> dict[str, Any]:
    """What an episode's record keeps of the solver's final tree: its changed text files and deletions.

    ``{"written": {path: text}, "deleted": [path], "left_out": [path]}``: files that are not UTF-8 text,
    or past :data:`FINAL_TREE_BYTES` in all, are left out (listed), so a record stays small.
    """
    written: dict[str, str] = {}
    left_out: list[str] = []
    budget = FINAL_TREE_BYTES
    for path, data in sorted(changes.written.items()):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            left_out.append(path)
            continue
        if len(data) > budget:
            left_out.append(path)
            continue
        budget -= len(data)
        written[path] = text
    return {"written": written, "deleted": list(changes.deleted), "left_out": left_out}


def rebuild_final_tree(sandbox: Any, artifact: BugArtifact, final: dict[str, Any]) -> None:
    """Make a fresh container's /repo the solver's starting tree with its final changes on top.

    Raises:
        RuntimeError: The tree could not be built (the artifact does not fit the image, a path is in the way).
    """
    setup_solver_repo(sandbox, artifact)  # no history, no artifact, oracle tests weakened: nothing hidden
    written = {
        p: str(t).encode() for p, t in (final.get("written") or {}).items() if _relative(p) and ".." not in p.split("/")
    }
    if written:
        sandbox.put_archive("/repo", _tar(written))
    deleted = [_q(p) for p in final.get("deleted") or [] if _relative(p) and ".." not in p.split("/")]
    script = (f"rm -f -- {' '.join(deleted)} && " if deleted else "") + "chown -R sparring /repo"
    r = sandbox.exec(script, workdir="/repo", user="root", timeout=60)
    if not r.ok:
        raise RuntimeError(f"could not rebuild the attempt's files: {(r.stderr or r.stdout).strip()[:300]}")
