"""Validation of a bug artifact: the seven checks of Self-play SWE-RL, and two of ours.

1. ``test_files`` — the test files exist, are plain paths inside the repository, and cover every
   file ``test_weaken.diff`` touches, and that diff holds file headers and hunks only (no text a
   ``git apply`` would skip: the reversed weakening is shown to every solver);
2. ``parser`` — the artifact's parser yields ``{test_id: status}`` (on every run of its script);
3. ``passing_before`` — on the original code ≥ ``min_passing_tests`` pass;
4. ``changed_files`` — ``bug_inject.diff`` holds file headers and hunks only, applies, changes no
   file grading restores or ignores, and changes ≥ ``min_changed_files`` code files (not tests by
   name or by the catalog's ``test_dir``);
5. ``failing_after_bug`` — ≥ ``min_failing_tests`` tests that passed now fail (a test that fails
   only by the per-test time limit does not count);
6. ``weakening_hides_bug`` — some of those pass again once ``test_weaken.diff`` is applied too,
   and the weakening changes the source of one of them (not only comments or blank lines);
7. ``inverse_mutation`` — reverting each changed file alone makes at least one failing test pass;
8. ``deterministic`` — the failing tests fail again, not by timeout, in ``reruns`` more runs of the
   buggy code, each in a fresh container with its own random hash seed and some time after the
   previous one, and (where the original code was run here) the passing tests pass again in a
   fresh run with another hash seed: a bug on by chance, by the clock or by a timeout is refused;
9. ``harness_agreement`` — the artifact's own ``test_script.sh`` and ``test_parser.py``, run on the
   original and the buggy code with probe tests of random names appended to the test files, report
   exactly what the harness saw (the same ids and verdicts): they run the listed test files, and
   only those, and read the results (skipped when the script is the harness's own default). The
   original code is reached there as a repair reaches it (bug applied, then undone), so a script
   that tells a repaired file from an untouched one cannot hide from this check;
10. ``bug_capabilities`` — the code the bug adds uses no capability a repair's added code may not;
11. ``solver_tree`` — the failing tests fail in the solver's own starting tree too, through the
    harness and in the solver's own ``python -m pytest`` run there, as the sandbox user;
12. ``graded_as_validated`` — grading itself fails them on the unchanged bug state (in grading's
    configuration and in the plain one it repeats them in), and grades the original code,
    submitted as a repair, solved (checks 10-12: :mod:`~sparring.envs.swe.parity`).

Every verdict comes from the harness's own run (:func:`~sparring.envs.swe.harness.harness_run`:
its own configuration, plugins and interpreter setup, a run that counts only if it ended
honestly), never from the artifact's script or parser, which therefore cannot decide a verdict:
checks 2 and 9 only hold them to it. Every run is configured as grading's is (the same per-test
timer), and checks 11-12 run the bug where the solver and grading meet it. Each run starts from a
fresh container of the repository image (the original code), so a run cannot see what another left
behind; the independent runs go in parallel over a :class:`SandboxPool`. A failed check's name is
the verdict's ``reason``.
"""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from sparring.envs.swe.bugs.artifact import BugArtifact, diff_files, diff_problem
from sparring.envs.swe.carry import code_files
from sparring.envs.swe.fresh_imports import TaskImage
from sparring.envs.swe.grading import PER_TEST_TIMEOUT, check_seconds, protected_paths
from sparring.envs.swe.harness import HONEST_STATUSES
from sparring.envs.swe.integrity import (
    Spacing,
    confirmed_failing,
    disagreement,
    flaky_passes,
    harness_script,
    rerun_seed,
)
from sparring.envs.swe.parity import (
    SolverShell,
    SolverView,
    bug_capability_uses,
    graded_problem,
    solver_shell,
    solver_shell_problem,
    solver_tree_problem,
    solver_view,
    unchanged_tests,
)
from sparring.envs.swe.runs import (
    BUGGY,
    MAX_TARGET_IDS,
    REPAIRED,
    WEAKENED,
    RepoState,
    SharedIni,
    StateRun,
    TestRun,
    harness_state,
    not_passed,
)
from sparring.envs.swe.testing import TestRun as HarnessRun

__all__ = [
    "CHECKS",
    "MAX_ARTIFACT_BYTES",
    "ValidationConfig",
    "ValidationResult",
    "code_files",
    "validate_artifact",
]

#: The checks, in order; a failing check's name is the verdict's reason.
CHECKS = (
    "test_files",
    "parser",
    "passing_before",
    "changed_files",
    "failing_after_bug",
    "weakening_hides_bug",
    "inverse_mutation",
    "deterministic",
    "harness_agreement",
    "bug_capabilities",
    "solver_tree",
    "graded_as_validated",
)

#: Bytes of one artifact file at most (a real bug's diffs are a few KB; the harness reads no more).
MAX_ARTIFACT_BYTES = 1 << 20
#: Test files an artifact may list at most.
MAX_TEST_FILES = 64

#: A test path the harness runs: plain characters, relative, no ``..`` (the harness's own rule, for files).
_PLAIN_PATH = re.compile(r"^[\w.+@-][\w./+@-]*$")


@dataclass
class ValidationConfig:
    """Parameters of validation (the thresholds are SSR's defaults)."""

    min_passing_tests: int = 1
    """Check 3: tests that must pass on the original code."""
    min_failing_tests: int = 1
    """Check 5: tests that passed before and must fail with the bug (also after check 8's re-runs)."""
    min_changed_files: int = 1
    """Check 4: non-test files the bug must change."""
    test_timeout: float = 300.0
    """Seconds one run of the test files (and of the artifact's script) may take."""
    per_test_timeout: float = PER_TEST_TIMEOUT
    """Seconds one test may take; a test over it fails by timeout, which does not count as failing.

    Grading runs the bug's repairs under the same value (the task records it)."""
    reruns: int = 2
    """Check 8: extra runs of the buggy code's failing tests, each in a fresh container."""
    rerun_gap: float = 0.1
    """Check 8: seconds at least between the starts of two runs of the buggy code."""
    parallel: int = 2
    """Test runs at once (one container each); the independent runs go side by side."""


@dataclass
class ValidationResult:
    """The verdict on an artifact.

    Attributes:
        valid: Whether every check holds.
        reason: Name of the first failed check (one of :data:`CHECKS`), or None when valid.
        detail: One sentence on why it failed.
        checks: Check name -> held (checks not reached are absent).
        fail_to_pass: Tests that pass on the original code and fail with the bug in every run (the oracle).
        pass_to_pass: Tests that pass both before and with the bug.
        seconds: Wall time of the validation.
        runs: Seconds of each test run, by state name (``rerun:N`` for check 8's runs,
            ``solver_tree`` for check 11's harness run, ``graded:unchanged`` and ``graded:original``
            for check 12's).
        notes: What validation left out without refusing the bug (tests that failed only by timeout).
        clean_seconds: How long grading's run of the original code took (check 12): it bounds
            grading's runs (:func:`~sparring.envs.swe.grading.grade_time_limit`); None when not reached.
        per_test_timeout: The per-test time limit the bug was validated under; grading uses it too.
    """

    valid: bool
    reason: str | None = None
    detail: str = ""
    checks: dict[str, bool] = field(default_factory=dict)
    fail_to_pass: list[str] = field(default_factory=list)
    pass_to_pass: list[str] = field(default_factory=list)
    seconds: float = 0.0
    runs: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    clean_seconds: float | None = None
    per_test_timeout: float = PER_TEST_TIMEOUT

    @property
    def expected(self) -> list[str]:
        """Every test a solved repair must pass: FAIL_TO_PASS then PASS_TO_PASS."""
        return self.fail_to_pass + self.pass_to_pass

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (``info["outcome"]`` of the inject env)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ValidationResult:
        """Inverse of :meth:`to_dict`; ValueError (one sentence) for timing fields that are not numbers."""
        check_seconds("clean_seconds", data.get("clean_seconds"), optional=True)
        check_seconds("per_test_timeout", data.get("per_test_timeout", PER_TEST_TIMEOUT), optional=False)
        return cls(**data)


class _Rejected(Exception):
    def __init__(self, check: str, detail: str):
        super().__init__(detail)
        self.check, self.detail = check, detail


# ------------------------------------------------------------------------------ the artifact's text


def _static_checks(artifact: BugArtifact, config: ValidationConfig) -> list[str]:
    """Checks 1 (paths and coverage) and 4 on the artifact's text; returns the bug's changed files."""
    for name, text in artifact.files().items():
        if len(text.encode("utf-8", "surrogatepass")) > MAX_ARTIFACT_BYTES:
            raise _Rejected("test_files", f"{name} is over {MAX_ARTIFACT_BYTES} bytes; a bug artifact is a few KB.")
    if not artifact.test_files:
        raise _Rejected("test_files", "test_files.txt lists no test file.")
    if len(artifact.test_files) > MAX_TEST_FILES:
        raise _Rejected(
            "test_files", f"test_files.txt lists {len(artifact.test_files)} files; at most {MAX_TEST_FILES}."
        )
    outside = [p for p in artifact.test_files if p.startswith("/") or ".." in p.split("/")]
    if outside:
        raise _Rejected("test_files", f"test_files.txt names {outside}; list paths relative to /repo, inside it.")
    odd = [p for p in artifact.test_files if not _PLAIN_PATH.match(p)]
    if odd:
        raise _Rejected("test_files", f"test_files.txt names {odd[:3]}; list plain file paths (no spaces, no ::).")
    _only_hunks("test_weaken.diff", artifact.test_weaken_diff, "test_files")
    uncovered = [p for p in diff_files(artifact.test_weaken_diff) if p not in artifact.test_files]
    if uncovered:
        raise _Rejected("test_files", f"test_weaken.diff changes {uncovered}, which test_files.txt does not list.")
    if not diff_files(artifact.test_weaken_diff):
        raise _Rejected("test_files", "test_weaken.diff changes no file.")
    _only_hunks("bug_inject.diff", artifact.bug_inject_diff, "changed_files")
    changed = diff_files(artifact.bug_inject_diff)
    # grading drops a solver's edits to these and restores the oracle tests: a bug there cannot be repaired
    unfixable = protected_paths(artifact, changed)
    if unfixable:
        raise _Rejected(
            "changed_files",
            f"bug_inject.diff changes test files or pytest configuration {unfixable}, whose repair grading "
            "discards; it must change code only.",
        )
    code = code_files(artifact, changed)
    if len(code) < config.min_changed_files:
        tests = sorted(set(changed) - set(code))
        raise _Rejected(
            "changed_files",
            f"bug_inject.diff changes {len(code)} non-test file(s){f' (and tests {tests})' if tests else ''}; "
            f"at least {config.min_changed_files} needed.",
        )
    return changed


def _only_hunks(name: str, diff: str, check: str) -> None:
    """Refuse a diff that holds more than file headers and hunks.

    ``git apply`` skips text around a file's part, and the reversed weakening is the repair prompt's
    diff: words there would reach every solver (and the export) outside of any file.
    """
    problem = diff_problem(diff)
    if problem:
        raise _Rejected(check, f"{name}: {problem}; write it with git diff, with nothing around the diff.")


# --------------------------------------------------------------------------------- the runs


def _passed(run: HarnessRun | None) -> set[str]:
    return {t for t, s in run.tests.items() if s == "passed"} if run else set()


def _baseline_run(baseline: TestRun | HarnessRun) -> StateRun:
    """The original code's known results as a state run (the image's clean runs: two, so check 8 has them)."""
    statuses = baseline.statuses if isinstance(baseline, TestRun) else baseline.tests
    return StateRun(harness=HarnessRun(status="passed", tests=dict(statuses), seconds=baseline.seconds))


def validate_artifact(
    artifact: BugArtifact,
    image: str,
    pool: Any = None,
    config: ValidationConfig | None = None,
    baseline: TestRun | HarnessRun | None = None,
) -> ValidationResult:
    """Run the checks on ``artifact`` against the repository in ``image``.

    Args:
        artifact: The injector's five files.
        image: The repository image (original code at /repo).
        pool: A :class:`SandboxPool` of ``image`` to draw fresh containers from; one is made
            (and closed) when None.
        config: Thresholds and limits.
        baseline: The harness's results on the original code for these test files, if known (the
            image's clean runs, recorded when it was built: two runs, so no re-run is needed).

    Returns:
        The verdict; never raises for anything in the artifact (an engine that starts no
        container raises ``SparringError``, the transient kind).
    """
    config = config or ValidationConfig()
    t0 = time.perf_counter()
    checks: dict[str, bool] = {}
    result = ValidationResult(valid=False, checks=checks, per_test_timeout=config.per_test_timeout)
    own_pool = pool is None
    if own_pool:
        from sparring.containers.sandbox import SandboxPool

        pool = SandboxPool(image, size=config.parallel)
    shells: list[SolverShell] = []  # check 11's second tree, closed whatever happens

    def solver_trees() -> SolverView:
        view = solver_view(pool, artifact, **limits)
        shells.append(solver_shell(pool, artifact))
        return view

    limits = {"timeout": config.test_timeout, "per_test_timeout": config.per_test_timeout}
    try:
        changed = _static_checks(artifact, config)
        with ThreadPoolExecutor(max_workers=1) as side:  # the solver's trees are built beside the runs
            seen = side.submit(solver_trees)
            with pool.quiet():  # the runs go side by side: container starts would take their CPU
                runs = _run_states(pool, artifact, config, changed, baseline)
            view = seen.result()
        result.runs = {name: round(r.harness.seconds, 3) if r.harness else 0.0 for name, r in runs.items()}
        if view.run is not None:
            result.runs["solver_tree"] = round(view.run.seconds, 3)
        _judge(artifact, config, changed, runs, checks, result, view, TaskImage.of(image, pool.hosts))
        with ThreadPoolExecutor(max_workers=1) as side:  # the solver's own run goes beside grading's two
            shown = side.submit(solver_shell_problem, shells[0], result.fail_to_pass, timeout=config.test_timeout)
            problem, grades = graded_problem(pool, artifact, view, result.fail_to_pass, result.pass_to_pass, **limits)
            unseen = shown.result()
        if unseen:
            raise _Rejected("solver_tree", unseen)
        checks["solver_tree"] = True
        result.runs |= {f"graded:{name}": grade.test_seconds for name, grade in grades.items()}
        if problem:
            raise _Rejected("graded_as_validated", problem)
        checks["graded_as_validated"] = True
        result.clean_seconds = grades["original"].test_seconds
        result.valid = True
    except _Rejected as rejected:
        result.reason, result.detail = rejected.check, rejected.detail
        checks[rejected.check] = False
    finally:
        for shell in shells:
            shell.close()
        if own_pool:
            pool.close()
    result.seconds = round(time.perf_counter() - t0, 3)
    return result


def _run_states(
    pool: Any, artifact: BugArtifact, config: ValidationConfig, changed: list[str], baseline: Any
) -> dict[str, StateRun]:
    """Every run the checks need, in as few containers as they allow.

    The states go at once; the weakened code's container reads the harness's configuration (the
    others build their state meanwhile) and, when the original code's results are known, runs the
    test files beside the buggy code's first run (else just the tests that fail there, once known).
    The buggy code's failing tests run again right after its first run in the same container (a
    fresh process, another hash seed: chance, the seed, the clock), and the further re-runs each in
    a fresh container (the environment of one container), built beside the first run and started as
    soon as it shows what fails; every run of the buggy code starts at
    least ``rerun_gap`` after the previous one. The original code's tests run again in their
    container. The artifact's script runs last in a container, after every harness run there.
    """
    ini = SharedIni(artifact)
    spacing = Spacing(config.rerun_gap)
    # the weakened code's container reads the configuration, so the buggy code's builds its state meanwhile
    common: dict[str, Any] = {
        "ini": ini,
        "timeout": config.test_timeout,
        "test_timeout": config.per_test_timeout,
        "reads_ini": False,
    }
    script = not harness_script(artifact)
    seeds = [rerun_seed() for _ in range(config.reruns)]
    futures: dict[str, Future[StateRun]] = {}
    lock = threading.Lock()
    # the runs that wait for the buggy code's first run hold a worker each while they wait
    deferred = 1 + max(0, config.reruns - 1)
    with ThreadPoolExecutor(max_workers=max(1, config.parallel) + deferred) as ex:

        def by_id(ids: list[str]) -> list[str]:
            """What a re-run runs: those node ids, or ``[]`` (the test files) when there are too many."""
            return ids if len(ids) <= MAX_TARGET_IDS else []

        def rerun(k: int, targets: list[str] | None) -> None:
            kw: dict[str, Any] = {"targets": by_id(targets or []), "wait": spacing}
            with lock:
                seed = seeds[k - 1]
                futures[f"rerun:{k}"] = ex.submit(harness_state, pool, artifact, BUGGY, hash_seed=seed, **kw, **common)

        known = threading.Event()
        first_run: list[HarnessRun | None] = [None]

        def first_done(first: HarnessRun) -> None:
            first_run[0] = first
            known.set()

        def failing() -> list[str] | None:
            """What the buggy code's first run did not pass, once it ended; None when it did not count."""
            known.wait()
            first = first_run[0]
            return not_passed(first) if first is not None and first.status in HONEST_STATUSES else None

        def rerun_targets() -> list[str] | None:
            """The failing tests (or the test files) to run again; None: the first run shows none to re-run."""
            bad = failing()
            return by_id(bad) if bad else None

        def weakened_targets() -> list[str] | None:
            """Check 6 asks only whether failing tests pass once weakened: those (or the test files).

            None: the first run did not count, so check 5 refuses before check 6 reads this run.
            """
            bad = failing()
            return None if bad is None else by_id(bad)

        # then the longest chains: each of these runs again in its container, and may run the script there
        buggy: dict[str, Any] = {"again": seeds[:1], "again_failing": True, "wait": spacing, "with_script": script}
        states: dict[str, tuple[RepoState, dict[str, Any]]] = {
            # first, so it has a worker: every other state waits for the configuration it reads. With the
            # original code's results known it runs the test files beside the buggy code's first run (two
            # runs for two cores); else it waits for what fails there, like the re-runs
            "weakened": (
                WEAKENED,
                {"reads_ini": True} | ({} if baseline is not None else {"targets_later": weakened_targets}),
            ),
            "buggy": (BUGGY, buggy | {"on_first": first_done}),
        }
        if baseline is None:  # reached as a repair reaches it, so a script that tells the two apart is caught
            states["original"] = (REPAIRED, {"again": [rerun_seed()], "with_script": script})
        if len(changed) > 1:  # with one changed file, reverting it gives the original code
            for path in changed:
                states[f"revert:{path}"] = (RepoState(bug=True, revert=(path,)), {})
        # the fresh-container re-runs build their state beside the first run and start the moment it shows
        # what fails, running just those tests beside the same-container re-run: on the generator's path
        # the critical path is one full run and one short one, with two runs at a time on two cores
        for k in range(2, config.reruns + 1):
            states[f"rerun:{k}"] = (BUGGY, {"targets_later": rerun_targets, "wait": spacing, "hash_seed": seeds[k - 1]})
        with lock:
            for name, (st, kw) in states.items():
                futures[name] = ex.submit(harness_state, pool, artifact, st, **(common | kw))
        try:
            futures["buggy"].result()
        finally:
            known.set()  # a first run that never ended (its state failed to build) re-runs nothing
        with lock:
            pending = dict(futures)
        runs = {name: f.result() for name, f in pending.items()}
        # a re-run that did not start (nothing to re-run); the weakened code's is read only past check 5
        runs = {name: r for name, r in runs.items() if not (name.startswith("rerun:") and r.harness is None)}
        first = runs["buggy"].harness
        before = _passed((_baseline_run(baseline) if baseline is not None else runs["original"]).harness)
        if first is not None and first.status in HONEST_STATUSES and before - _passed(first):
            # re-runs its first run could not start: every test that fails was absent from it, none errored
            for k in range(len(runs["buggy"].again) + 1, config.reruns + 1):
                if f"rerun:{k}" not in runs:
                    rerun(k, None)
            with lock:
                late = {name: f for name, f in futures.items() if name not in runs}
            runs.update({name: f.result() for name, f in late.items()})
    for k, again in enumerate(runs["buggy"].again, 1):
        runs[f"rerun:{k}"] = StateRun(harness=again)
    if baseline is not None:
        runs["original"] = _baseline_run(baseline)
    elif runs["original"].again:
        runs["rerun:original"] = StateRun(harness=runs["original"].again[0])
    return runs


# ------------------------------------------------------------------------------------ judging


def _honest(run: StateRun, what: str, check: str) -> HarnessRun:
    """The harness's run of a state, refusing with ``check`` when it did not end honestly."""
    h = run.harness
    assert h is not None  # states that could not be built were refused under check 1 or 4 already
    if h.status not in HONEST_STATUSES:
        raise _Rejected(check, f"the run on the {what} did not count ({h.status}): {h.detail}")
    return h


def _judge(
    artifact: BugArtifact,
    config: ValidationConfig,
    changed: list[str],
    runs: dict[str, StateRun],
    checks: dict[str, bool],
    result: ValidationResult,
    view: SolverView,
    image: TaskImage,
) -> None:
    """Checks 1-11 on the runs' results, in order; raises :class:`_Rejected` at the first failure.

    Of check 11 only the harness's run: the solver's own run needs the FAIL_TO_PASS tests known here. Check 10
    measures fresh imports in ``image``.
    """
    for run in runs.values():
        if run.setup_error:
            check = "test_files" if run.setup_error.startswith("missing test file") else run.setup_check
            raise _Rejected(check, run.setup_error)
    checks["test_files"] = True
    for name, run in runs.items():
        if run.script is not None and run.script.parse_error:
            raise _Rejected("parser", f"on the {name} code: {run.script.parse_error}")
    checks["parser"] = True
    before = _passed(_honest(runs["original"], "original code", "passing_before"))
    if len(before) < config.min_passing_tests:
        raise _Rejected(
            "passing_before",
            f"{len(before)} test(s) pass on the original code; at least {config.min_passing_tests} needed.",
        )
    checks["passing_before"] = True
    checks["changed_files"] = True
    buggy = _honest(runs["buggy"], "buggy code", "failing_after_bug")
    timed_out = set(buggy.timed_out_tests)
    failing = sorted(before - _passed(buggy) - timed_out)
    if len(failing) < config.min_failing_tests:
        slow = len(before & timed_out)
        why = f" ({slow} more failed only by the {config.per_test_timeout:g} s time limit, which does not count)"
        raise _Rejected(
            "failing_after_bug",
            f"{len(failing)} passing test(s) fail with the bug{why if slow else ''}; "
            f"at least {config.min_failing_tests} needed.",
        )
    checks["failing_after_bug"] = True
    weakened = _honest(runs["weakened"], "weakened code", "weakening_hides_bug")
    hidden = sorted(set(failing) & _passed(weakened))
    if not hidden:
        raise _Rejected("weakening_hides_bug", "none of the failing tests passes once test_weaken.diff is applied.")
    # a bug that reads the test files can take any edit for its off switch: the edit must change a test
    problem = unchanged_tests(view.oracle, view.start, hidden) if view.start else view.error
    if problem:
        raise _Rejected("weakening_hides_bug", problem)
    checks["weakening_hides_bug"] = True
    for path in changed if len(changed) > 1 else []:
        if not set(failing) & _passed(runs[f"revert:{path}"].harness):
            raise _Rejected("inverse_mutation", f"reverting {path} alone makes none of the failing tests pass.")
    checks["inverse_mutation"] = True
    confirmed = _deterministic(config, runs, before, failing, result)
    checks["deterministic"] = True
    for name in ("original", "buggy"):
        problem = disagreement(name, runs[name].harness, runs[name].script, runs[name].probes)
        if problem:
            raise _Rejected("harness_agreement", problem)
    checks["harness_agreement"] = True
    result.fail_to_pass = confirmed
    result.pass_to_pass = sorted(before & _passed(buggy))
    uses = bug_capability_uses(artifact, view, image)
    if uses:
        raise _Rejected(
            "bug_capabilities",
            f"the bug adds code that reaches for what a repair may not ({len(uses)} use(s)), so it could decide "
            f"its own test results: {uses[0]}",
        )
    checks["bug_capabilities"] = True
    problem = solver_tree_problem(view, confirmed)
    if problem:
        raise _Rejected("solver_tree", problem)


def _deterministic(
    config: ValidationConfig, runs: dict[str, StateRun], before: set[str], failing: list[str], result: ValidationResult
) -> list[str]:
    """Check 8: the failing tests that failed, not by timeout, in every run of the buggy code."""
    reruns = [
        _honest(runs[f"rerun:{k}"], f"buggy code (re-run {k} of the failing tests)", "deterministic")
        for k in range(1, config.reruns + 1)
    ]
    confirmed, problem, notes = confirmed_failing(failing, reruns, config.min_failing_tests)
    result.notes.extend(notes)
    if problem:
        raise _Rejected("deterministic", problem)
    again = runs.get("rerun:original")
    if again is not None:
        problem = flaky_passes(before, _honest(again, "original code (re-run)", "deterministic"))
        if problem:
            raise _Rejected("deterministic", problem)
    return confirmed
