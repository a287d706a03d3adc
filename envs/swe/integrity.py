"""Checks 8 and 9 of validation: the bug is on every time, and the artifact's own script agrees with the harness.

An injector's reward depends on how often solvers fix its bug, so an injector gains by a bug
that is on only sometimes (a do-nothing repair is then "solved" sometimes: it sets the solve rate)
and by a script or parser that decides verdicts (a restored file "still fails"). The harness's own
run decides every verdict (:mod:`~sparring.envs.swe.validation`); the helpers here judge the runs
that hold the artifact to it:

* :func:`confirmed_failing` / :func:`flaky_passes` (check 8, ``deterministic``): the buggy code's
  failing tests fail again, not by timeout, in every re-run (fresh processes with random non-zero
  hash seeds, :func:`rerun_seed`, started some time apart, :class:`Spacing`); the original code's
  passing tests pass again.
* :func:`disagreement` (check 9, ``harness_agreement``): the artifact's script and parser report
  exactly the ids and verdicts the harness saw, probe tests of random names included.
"""

from __future__ import annotations

import secrets
import shlex
import threading
import time
from collections.abc import Sequence

from sparring.envs.swe.bugs.artifact import DEFAULT_TEST_SCRIPT, BugArtifact
from sparring.envs.swe.runs import TestRun
from sparring.envs.swe.testing import TestRun as HarnessRun

__all__ = ["Spacing", "confirmed_failing", "disagreement", "flaky_passes", "harness_script", "rerun_seed"]


def harness_script(artifact: BugArtifact) -> bool:
    """Whether the artifact's script is the harness's default over its test files and it has no parser.

    Such a script adds nothing to check: it is the harness's own (procedural bugs use it), so check
    9 does not run it.
    """
    own = (DEFAULT_TEST_SCRIPT.format(files=" ".join(artifact.test_files)),
           DEFAULT_TEST_SCRIPT.format(files=" ".join(shlex.quote(f) for f in artifact.test_files)))  # fmt: skip
    return artifact.test_parser is None and artifact.test_script.strip() in {s.strip() for s in own}


def rerun_seed() -> int:
    """A hash seed for a re-run: never the image's 0, and not one the bug can expect."""
    return 1 + secrets.randbelow(2**32 - 2)


class Spacing:
    """Keeps the starts of the buggy code's runs at least ``gap`` seconds apart (a bug tied to the clock)."""

    def __init__(self, gap: float):
        """No run has started yet."""
        self.gap = gap
        self.last = 0.0
        self.lock = threading.Lock()

    def __call__(self) -> None:
        """Wait until ``gap`` seconds after the previous start, and mark this one."""
        with self.lock:
            delay = self.last + self.gap - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self.last = time.monotonic()


def _passed(run: HarnessRun) -> set[str]:
    return {t for t, s in run.tests.items() if s == "passed"}


def confirmed_failing(
    failing: Sequence[str], reruns: Sequence[HarnessRun], minimum: int
) -> tuple[list[str], str | None, list[str]]:
    """The failing tests that fail in every re-run too, other than by the time limit.

    A failing test that passes in a re-run refuses the bug (it is on only sometimes); one that
    fails there only by the time limit is left out, since a timeout depends on the machine's load.

    Args:
        failing: Tests that passed on the original code and failed in the buggy code's first run.
        reruns: The re-runs of the buggy code (runs that ended honestly).
        minimum: Failing tests needed.

    Returns:
        (confirmed tests, why the bug is refused or None, notes on what was left out).
    """
    confirmed, notes = list(failing), list[str]()
    for run in reruns:
        flipped = sorted(set(confirmed) & _passed(run))
        if flipped:
            return (
                confirmed,
                (
                    f"{len(flipped)} failing test(s) passed when the buggy code ran again in a fresh process "
                    f"(e.g. {flipped[0]}): the bug is on only sometimes (chance, the clock, the hash seed or the "
                    "environment), and a repair that does nothing would be graded solved."
                ),
                notes,
            )
        slow = set(confirmed) & set(run.timed_out_tests)
        if slow:
            notes.append(f"{len(slow)} failing test(s) failed only by the time limit in a re-run, left out")
            confirmed = [t for t in confirmed if t not in slow]
    if len(confirmed) < minimum:
        return (
            confirmed,
            (
                f"{len(confirmed)} test(s) failed with the bug in every run other than by timeout; "
                f"at least {minimum} needed."
            ),
            notes,
        )
    return confirmed, None, notes


def flaky_passes(before: set[str], again: HarnessRun) -> str | None:
    """Why the original code's passing tests are not all passing again (a flaky test), or None.

    Tests absent from the re-run are not held against it: some suites name parameters after a set,
    so their ids change with the hash seed.
    """
    lost = sorted(t for t in before if t in again.tests and again.tests[t] != "passed")
    if not lost:
        return None
    return (
        f"{len(lost)} test(s) passed on the original code once and not when run again (e.g. {lost[0]}): "
        "the test files hold a flaky test, which no repair could be sure to pass."
    )


def _same(a: str, b: str) -> bool:
    """Statuses agree: exactly, or both a failure (a parser may call an error a failure)."""
    bad = ("failed", "error")
    return a == b or (a in bad and b in bad)


def disagreement(name: str, harness: HarnessRun | None, script: TestRun | None, probes: dict[str, str]) -> str | None:
    """Where the artifact's script and parser part from the harness on one state, in one sentence; None if nowhere.

    Args:
        name: The state (``original``, ``buggy``).
        harness: The harness's run of the state.
        script: The artifact's script and parser on the same state, with the probes appended.
        probes: Probe test id -> the status it must get.
    """
    if script is None or harness is None:
        return None
    expected = dict(harness.tests) | probes
    got = script.statuses
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    differ = sorted(t for t in set(got) & set(expected) if not _same(got[t], expected[t]))
    parts = []
    if missing:
        parts.append(f"miss {len(missing)} test(s) the harness ran (e.g. {missing[0]})")
    if extra:
        parts.append(f"report {len(extra)} test(s) the harness did not run (e.g. {extra[0]})")
    if differ:
        t = differ[0]
        parts.append(f"give {len(differ)} test(s) another verdict (e.g. {t}: {got[t]}, the harness: {expected[t]})")
    if not parts:
        return None
    return (
        f"on the {name} code, test_script.sh and test_parser.py {' and '.join(parts)}; they must run exactly "
        "the listed test files and report each test's verdict as pytest gives it."
    )
