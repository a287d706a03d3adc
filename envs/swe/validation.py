"""Validation of a bug artifact: the seven checks of Self-play SWE-RL (DESIGN §3.3).

1. ``test_files`` — the test files exist and cover every file ``test_weaken.diff`` touches;
2. ``parser`` — the parser yields ``{test_id: status}`` (on every run);
3. ``passing_before`` — on the original code the script runs and ≥ ``min_passing_tests`` pass;
4. ``changed_files`` — ``bug_inject.diff`` applies, changes no file grading restores or ignores, and
   changes ≥ ``min_changed_files`` code files (not tests by name or by the catalog's ``test_dir``);
5. ``failing_after_bug`` — ≥ ``min_failing_tests`` tests that passed now fail;
6. ``weakening_hides_bug`` — some of those pass again once ``test_weaken.diff`` is applied too;
7. ``inverse_mutation`` — reverting each changed file alone makes at least one failing test pass.

Each run starts from a fresh container of the repository image (the original code), so a run
cannot see what another left behind; the independent runs go in parallel over a
:class:`SandboxPool`. A failed check's name is the verdict's ``reason``.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from sparring.envs.swe.bugs.artifact import BugArtifact, diff_files
from sparring.envs.swe.grading import protected_paths
from sparring.envs.swe.repos.sdists import TEST_FILE  # the catalog's own notion of a test file
from sparring.envs.swe.runs import BUGGY, ORIGINAL, WEAKENED, RepoState, TestRun, run_state

__all__ = ["CHECKS", "ValidationConfig", "ValidationResult", "code_files", "validate_artifact"]

#: The seven checks, in order; a failing check's name is the verdict's reason.
CHECKS = (
    "test_files",
    "parser",
    "passing_before",
    "changed_files",
    "failing_after_bug",
    "weakening_hides_bug",
    "inverse_mutation",
)


@dataclass
class ValidationConfig:
    """Parameters of validation (defaults: SSR's)."""

    min_passing_tests: int = 1
    """Check 3: tests that must pass on the original code."""
    min_failing_tests: int = 1
    """Check 5: tests that passed before and must fail with the bug."""
    min_changed_files: int = 1
    """Check 4: non-test files the bug must change."""
    test_timeout: float = 300.0
    """Seconds one run of the test script may take."""
    parallel: int = 2
    """Test runs at once (one container each); the independent runs go side by side."""


@dataclass
class ValidationResult:
    """The verdict on an artifact.

    Attributes:
        valid: Whether all seven checks hold.
        reason: Name of the first failed check (one of :data:`CHECKS`), or None when valid.
        detail: One sentence on why it failed.
        checks: Check name -> held (checks not reached are absent).
        fail_to_pass: Tests that pass on the original code and fail with the bug (the oracle).
        pass_to_pass: Tests that pass both before and with the bug.
        seconds: Wall time of the validation.
        runs: Seconds of each test run, by state name.
    """

    valid: bool
    reason: str | None = None
    detail: str = ""
    checks: dict[str, bool] = field(default_factory=dict)
    fail_to_pass: list[str] = field(default_factory=list)
    pass_to_pass: list[str] = field(default_factory=list)
    seconds: float = 0.0
    runs: dict[str, float] = field(default_factory=dict)

    @property
    def expected(self) -> list[str]:
        """Every test a solved repair must pass: FAIL_TO_PASS then PASS_TO_PASS."""
        return self.fail_to_pass + self.pass_to_pass

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (``info["outcome"]`` of the inject env)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ValidationResult:
        """Inverse of :meth:`to_dict`."""
        return cls(**data)


class _Rejected(Exception):
    def __init__(self, check: str, detail: str):
        super().__init__(detail)
        self.check, self.detail = check, detail


def _static_checks(artifact: BugArtifact, config: ValidationConfig, checks: dict[str, bool]) -> list[str]:
    """Checks 1 (coverage part) and 4 on the artifact's text; returns the bug's changed files."""
    if not artifact.test_files:
        raise _Rejected("test_files", "test_files.txt lists no test file.")
    outside = [p for p in artifact.test_files if p.startswith("/") or ".." in p.split("/")]
    if outside:
        raise _Rejected("test_files", f"test_files.txt names {outside}; list paths relative to /repo, inside it.")
    uncovered = [p for p in diff_files(artifact.test_weaken_diff) if p not in artifact.test_files]
    if uncovered:
        raise _Rejected("test_files", f"test_weaken.diff changes {uncovered}, which test_files.txt does not list.")
    if not diff_files(artifact.test_weaken_diff):
        raise _Rejected("test_files", "test_weaken.diff changes no file.")
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


def code_files(artifact: BugArtifact, paths: list[str]) -> list[str]:
    """Which of ``paths`` are code, not tests: not named like a test file nor under the repository's ``test_dir``.

    Test files are recognised as the catalog recognises them in an sdist (``test_*.py``, ``*_test.py``,
    ``tests/*.py``), plus everything under the catalog's ``test_dir`` of ``artifact.repo`` when it is known.
    """
    from sparring import SparringError
    from sparring.envs.swe.repos.catalog import get_repo

    test_dir = ""
    if artifact.repo:
        try:
            test_dir = get_repo(artifact.repo).test_dir.strip("/").removeprefix("./")
        except SparringError:
            pass  # an artifact of a repository outside the catalog: names alone decide
    if test_dir in ("", "."):
        return [p for p in paths if not TEST_FILE.search(p)]
    return [p for p in paths if not TEST_FILE.search(p) and p != test_dir and not p.startswith(test_dir + "/")]


def _passed(run: TestRun) -> set[str]:
    return {t for t, s in run.statuses.items() if s == "passed"}


def validate_artifact(
    artifact: BugArtifact,
    image: str,
    pool: Any = None,
    config: ValidationConfig | None = None,
    baseline: TestRun | None = None,
) -> ValidationResult:
    """Run the seven checks on ``artifact`` against the repository in ``image``.

    Args:
        artifact: The injector's five files.
        image: The repository image (original code at /repo).
        pool: A :class:`SandboxPool` of ``image`` to draw fresh containers from; one is made
            (and closed) when None.
        config: Thresholds and limits.
        baseline: A run of this artifact's script on the original code, if one is known (the
            original code never changes, so a caller validating many artifacts with the same
            script and test files can reuse it).

    Returns:
        The verdict; never raises for a bad artifact.
    """
    config = config or ValidationConfig()
    t0 = time.perf_counter()
    checks: dict[str, bool] = {}
    result = ValidationResult(valid=False, checks=checks)
    own_pool = pool is None
    if own_pool:
        from sparring.containers.sandbox import SandboxPool

        pool = SandboxPool(image, size=config.parallel)
    try:
        changed = _static_checks(artifact, config, checks)
        states: dict[str, RepoState] = {"buggy": BUGGY, "weakened": WEAKENED}
        if baseline is None:
            states["original"] = ORIGINAL
        if len(changed) > 1:  # with one changed file, reverting it gives the original code
            for path in changed:
                states[f"revert:{path}"] = RepoState(bug=True, revert=(path,))
        with ThreadPoolExecutor(max_workers=max(1, config.parallel)) as ex:
            futures = {
                name: ex.submit(run_state, pool, artifact, st, config.test_timeout) for name, st in states.items()
            }
            runs = {name: f.result() for name, f in futures.items()}
        if baseline is not None:
            runs["original"] = baseline
        result.runs = {name: round(r.seconds, 3) for name, r in runs.items()}
        _judge(artifact, config, changed, runs, checks, result)
        result.valid = True
    except _Rejected as rejected:
        result.reason, result.detail = rejected.check, rejected.detail
        checks[rejected.check] = False
    finally:
        if own_pool:
            pool.close()
    result.seconds = round(time.perf_counter() - t0, 3)
    return result


def _judge(
    artifact: BugArtifact,
    config: ValidationConfig,
    changed: list[str],
    runs: dict[str, TestRun],
    checks: dict[str, bool],
    result: ValidationResult,
) -> None:
    """Checks 1-7 on the runs' results, in order; raises :class:`_Rejected` at the first failure."""
    original, buggy, weakened = runs["original"], runs["buggy"], runs["weakened"]
    for run in runs.values():
        if run.setup_error:
            check = "test_files" if run.setup_error.startswith("missing test file") else run.setup_check
            raise _Rejected(check, run.setup_error)
    checks["test_files"] = True
    for name, run in runs.items():
        if run.parse_error:
            raise _Rejected("parser", f"on the {name.split(':')[0]} code: {run.parse_error}")
    checks["parser"] = True
    before = _passed(original)
    if len(before) < config.min_passing_tests:
        raise _Rejected(
            "passing_before",
            f"{len(before)} test(s) pass on the original code; at least {config.min_passing_tests} needed.",
        )
    checks["passing_before"] = True
    checks["changed_files"] = True
    failing = sorted(before - _passed(buggy))
    if len(failing) < config.min_failing_tests:
        raise _Rejected(
            "failing_after_bug",
            f"{len(failing)} passing test(s) fail with the bug; at least {config.min_failing_tests} needed.",
        )
    checks["failing_after_bug"] = True
    if not set(failing) & _passed(weakened):
        raise _Rejected("weakening_hides_bug", "none of the failing tests passes once test_weaken.diff is applied.")
    checks["weakening_hides_bug"] = True
    for path in changed if len(changed) > 1 else []:
        if not set(failing) & _passed(runs[f"revert:{path}"]):
            raise _Rejected("inverse_mutation", f"reverting {path} alone makes none of the failing tests pass.")
    checks["inverse_mutation"] = True
    result.fail_to_pass = failing
    result.pass_to_pass = sorted(before & _passed(buggy))
