"""The solver's repository and the grading of a repair (the threat model is in docs/swe.md).

:func:`setup_solver_repo` turns a fresh container of the repository image into the solver's
starting point: original + bug + weakening, ``.git`` removed and one fresh commit, bytecode and
the artifact gone, so nothing on disk holds the fix.

:func:`grade_repair` treats the solver as an adversary and never runs its repository. In layers,
each of which stops its class of attack on its own:

1. **Grade only a fix** (:mod:`~sparring.envs.swe.carry`): only changes to existing non-test
   Python sources, and plain new modules inside existing packages, are carried; everything else
   is dropped and listed (``ignored``, ``ignored_reasons``), not punished.
2. **Source checks on an AST** (:mod:`~sparring.envs.swe.capabilities`): the carried code must be
   UTF-8 and may not add uses of capabilities a fix does not need (the test framework, the garbage
   collector, frames and the module table, exit hooks, signals, processes, raw descriptors,
   dynamic code); a refused repair is unsolved without running anything (``tampering``).
3. In a FRESH container: the bug state is rebuilt, the harness reads the repository's pytest
   options from it, the carried changes are applied and the oracle test files restored; then
   **the harness owns the test run** and **a run counts only if it ended honestly**
   (:func:`~sparring.envs.swe.harness.harness_run`). The run is configured exactly as
   validation's runs are (the same per-test timer, :data:`PER_TEST_TIMEOUT` unless the task
   recorded another), so no code can behave one way under validation and another under grading;
   validation also grades the bug state and the original code through this very function before
   it accepts a bug (:mod:`~sparring.envs.swe.parity`).
4. **The fix outside the test runner's configuration**: a repair whose run passed has its
   FAIL_TO_PASS tests run again in another fresh container in the harness's plain configuration
   (``harness_run(plain=True)``: no capture, no logging or warnings plugin, no assertion
   rewriting, no signal timer, another home, working directory, temporary folder, command line and
   environment), and is solved only if they pass there too. A fix that exists only where it
   detects the runner (through anything: a denylist of reads cannot be complete) fails there.
5. **Bounded by the clean suite's time**: the run may take :func:`grade_time_limit` of the time
   the original code's run took when validation graded it (a multiple plus a constant), so a
   repair that hangs costs a container for seconds, not the whole test timeout; past it the grade
   is ``status == "timeout"``.

Solved only if the run ended honestly and every expected test id is present and passes, and the
plain run ended honestly with every FAIL_TO_PASS test passing. Nothing
the solver left behind makes grading raise: a failure while applying or running its changes is an
unsolved grade with ``error`` set.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from sparring.envs.swe.bugs.artifact import BugArtifact, diff_files, split_diff
from sparring.envs.swe.capabilities import added_uses, load_capabilities, processes_allowed
from sparring.envs.swe.carry import CarryPlan, carry_plan, protected_paths
from sparring.envs.swe.fresh_imports import TaskImage
from sparring.envs.swe.harness import HONEST_STATUSES, harness_run, pytest_ini
from sparring.envs.swe.runs import BUG_DIR, BUGGY, GIT, MAX_TARGET_IDS, WEAKENED, _q, _tar, prepare_state

__all__ = [
    "PER_TEST_TIMEOUT",
    "GradeResult",
    "SolverChanges",
    "apply_changes",
    "changes_between",
    "grade_repair",
    "grade_time_limit",
    "harness_tampering",
    "higher_order_artifact",
    "protected_paths",
    "setup_solver_repo",
    "snapshot",
]

#: Bytes of the solver's tree read back at most (larger files are ignored, not graded).
MAX_FILE_BYTES = 2 << 20
#: Folders of tool state, never the solver's change: git, bytecode, and what a test run writes
#: (``python -m pytest`` leaves ``.pytest_cache``; it was reported as a changed file).
_TOOL_STATE = frozenset({".git", "__pycache__", ".pytest_cache", ".hypothesis"})

SOLVER_COMMIT = "Initial commit"

#: Seconds one test may take in validation's and grading's runs (pytest-timeout's signal method: a
#: test over it fails). One value for both, since code can see the timer (a signal handler, an
#: interval timer) and must not see a difference between the two.
PER_TEST_TIMEOUT = 30.0

#: The grading run's time limit: this many times the clean suite's measured run time, plus
#: :data:`GRADE_TIME_MARGIN` seconds (for a loaded machine and the harness's own start). The bound is
#: measured under validation's load and applied under grading's: at 5 × plus 30 s a correct repair was
#: graded as a hang at a load of 12 on 2 cores (schema's oracle fix, 69 s against 65 s). Twice that
#: is one run with room for such a load; a second run after a timeout would give the same room at
#: more cost, and a second random draw to any repair that can time itself out on a bad one.
GRADE_TIME_FACTOR = 10.0
GRADE_TIME_MARGIN = 60.0


def check_seconds(name: str, value: object, *, optional: bool) -> None:
    """Raise ValueError (one sentence) unless ``value`` is a number of seconds (or None where ``optional``).

    A task's ``clean_seconds`` and ``per_test_timeout`` bound its grading runs; they come from
    validation, but a task file or ``options["task"]`` can be edited by hand.
    """
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(
            f"{name} must be a number of seconds{' or null' if optional else ''}, not {value!r}; "
            "regenerate the bug with `sparring bugs generate` or correct the value."
        )


def grade_time_limit(clean_seconds: float | None, ceiling: float) -> float:
    """Seconds a grading run may take: ``GRADE_TIME_FACTOR × clean_seconds + GRADE_TIME_MARGIN``, at most ``ceiling``.

    Args:
        clean_seconds: The original code's graded run time (validation measures it); None when
            unknown (a task stored before it was measured): the ceiling.
        ceiling: The configured test timeout.
    """
    if clean_seconds is None or not clean_seconds >= 0:
        return ceiling
    return min(ceiling, GRADE_TIME_FACTOR * clean_seconds + GRADE_TIME_MARGIN)


def setup_solver_repo(sandbox: Any, artifact: BugArtifact) -> None:
    """Make the container's /repo the solver's buggy, weakened repository with one fresh commit.

    Raises:
        RuntimeError: If a diff does not apply (the artifact was not validated against this image).
    """
    failed = prepare_state(sandbox, artifact, WEAKENED)
    if failed:
        raise RuntimeError(failed[1])
    script = " && ".join(
        [
            f"rm -rf {BUG_DIR} /tmp/sparring-* /repo/.git",
            "find /repo -name __pycache__ -prune -exec rm -rf {} + ; find /repo -name '*.py[co]' -delete",
            "cd /repo",
            "git init -q -b main",
            "git add -A",
            f'git -c user.name=sparring -c user.email=sparring@sparring.invalid commit -q -m "{SOLVER_COMMIT}"',
            "chown -R sparring /repo",
        ]
    )
    r = sandbox.exec(script, user="root", timeout=120)
    if not r.ok:
        raise RuntimeError(f"could not set up the solver repository: {(r.stderr or r.stdout).strip()[:300]}")


def snapshot(sandbox: Any, root: str = "/repo", left_out: list[str] | None = None) -> dict[str, bytes]:
    """The regular files under ``root`` (no ``.git``, bytecode or test-run caches), path -> bytes, from the container.

    Read within the sandbox's read-back caps (``containers/readback.py``); what they kept out
    (huge, too many or too deep files) is absent, and said in sentences appended to ``left_out``.
    A hard link is read as the regular file it is (the read-back archives each link with its own
    contents); a symbolic link is no regular file, so it is absent: never followed, never carried,
    and a file replaced by one reads as deleted.
    """
    from sparring.containers.readback import ReadCaps

    read = sandbox.read_tree(root, ReadCaps(file_bytes=MAX_FILE_BYTES, exclude=tuple(sorted(_TOOL_STATE))))
    if left_out is not None:
        left_out.extend(read.notes())
    data = read.data
    files: dict[str, bytes] = {}
    base = posixpath.basename(root.rstrip("/"))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar:
            if not member.isfile() or member.size > MAX_FILE_BYTES:
                continue
            path = posixpath.normpath(member.name)
            if path.startswith(base + "/"):
                path = path[len(base) + 1 :]
            parts = path.split("/")
            if ".." in parts or path.startswith("/") or not _TOOL_STATE.isdisjoint(parts):
                continue
            if path.endswith((".pyc", ".pyo")):
                continue
            f = tar.extractfile(member)
            if f is not None:
                files[path] = f.read()
    return files


@dataclass
class SolverChanges:
    """What a solver changed relative to its starting point.

    Attributes:
        written: Path -> new contents (changed or added files).
        deleted: Paths the solver removed.
        replaced: Path -> contents before the change, for the changed files of ``written`` that existed.
        package_dirs: Folders that held an ``__init__.py`` at the starting point (where a new
            module may be carried).
    """

    written: dict[str, bytes] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)
    replaced: dict[str, bytes] = field(default_factory=dict)
    package_dirs: list[str] = field(default_factory=list)

    @property
    def paths(self) -> list[str]:
        """Every path touched."""
        return sorted([*self.written, *self.deleted])


def changes_between(before: dict[str, bytes], after: dict[str, bytes]) -> SolverChanges:
    """The file-level changes from ``before`` to ``after`` (two :func:`snapshot` results)."""
    written = {p: d for p, d in after.items() if before.get(p) != d}
    deleted = sorted(p for p in before if p not in after)
    packages = sorted({p.rpartition("/")[0] for p in before if p.endswith("/__init__.py")})
    return SolverChanges(written, deleted, {p: before[p] for p in written if p in before}, packages)


@dataclass
class GradeResult:
    """The grade of one repair.

    Attributes:
        solved: The run ended honestly and every expected test is present and passes.
        passed: Expected tests that passed.
        failing: Expected tests present but not passing (test id -> status); for a repair whose
            grading run passed, the FAIL_TO_PASS tests the plain run did not pass (``STATUS when
            run plainly``).
        missing: Expected tests absent from the run (collection errors land here).
        ignored: Paths whose changes grading dropped (:mod:`~sparring.envs.swe.carry`).
        ignored_reasons: Path -> why it was dropped.
        tampering: Capability uses the repair added (``path:line: what (capability): line``);
            any makes the repair unsolved without running it (:func:`harness_tampering`).
        status: The harness run's status (:data:`~sparring.envs.swe.testing.RUN_STATUSES`), or
            ``refused`` (tampering) or ``error`` (the changes could not be applied or run);
            ``timeout`` when the run outlasted ``time_limit``.
        error: Why the repair produced no trustworthy results, or None.
        seconds: Wall time of grading.
        test_seconds: Seconds the test run took (0 when nothing ran).
        time_limit: Seconds the test run was allowed (:func:`grade_time_limit`).
        plain_status: Status of the plain run of the FAIL_TO_PASS tests (module docstring, layer
            4); empty when it did not run (the grading run did not pass).
        plain_failing: FAIL_TO_PASS tests that did not pass in the plain run (test id -> status,
            ``missing`` when absent, the run's status when it did not end honestly).
        plain_seconds: Seconds the plain run took (0 when it did not run).
    """

    solved: bool
    passed: int = 0
    failing: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    ignored_reasons: dict[str, str] = field(default_factory=dict)
    tampering: list[str] = field(default_factory=list)
    status: str = ""
    error: str | None = None
    seconds: float = 0.0
    test_seconds: float = 0.0
    time_limit: float = 0.0
    plain_status: str = ""
    plain_failing: dict[str, str] = field(default_factory=dict)
    plain_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (``info["outcome"]`` of the repair env)."""
        return asdict(self)


def harness_tampering(
    artifact: BugArtifact, changes: SolverChanges, plan: CarryPlan | None = None, image: TaskImage | None = None
) -> list[str]:
    """The capability uses the repair adds in the files grading carries (empty: nothing refused).

    Each carried file is checked against the file the solver started from; a use on a line the
    bug removed is allowed, since restoring it is the fix (:func:`~sparring.envs.swe.capabilities.added_uses`).
    What a fresh import leaves is measured in ``image``, the task's (``TaskImage.of(pool.image, pool.hosts)``);
    None measures it in this process, for checks with no image (the AST check's unit tests).
    """
    plan = plan or carry_plan(artifact, changes)
    removed: dict[str, set[str]] = {}
    for path, part in split_diff(artifact.bug_inject_diff).items():
        removed[path] = {
            # a diff's lines end at \n alone (splitlines would also break inside one, at U+2028)
            line[1:].strip() for line in part.split("\n") if line.startswith("-") and not line.startswith("---")
        }
    capabilities = load_capabilities(artifact.repo)
    found: list[str] = []
    for path, data in sorted(plan.written.items()):
        found += added_uses(
            path, data, changes.replaced.get(path), removed.get(path, ()), capabilities, artifact.test_files, image
        )
    return found


def apply_changes(sandbox: Any, artifact: BugArtifact, plan: CarryPlan) -> None:
    """Write the carried changes into the container's bug state, then restore the oracle test files.

    Raises:
        Exception: Anything the solver's files make fail (a path that is a folder in the clean
            state, ...); :func:`grade_repair` turns it into an unsolved grade.
    """
    if plan.written:
        sandbox.put_archive("/repo", _tar(plan.written))
    if plan.deleted:
        r = sandbox.exec("rm -f -- " + " ".join(_q(p) for p in plan.deleted), workdir="/repo", user="root", timeout=60)
        if not r.ok:
            raise RuntimeError(f"could not delete the files the repair deleted: {r.stderr.strip()[:300]}")
    restore = " ".join(_q(p) for p in artifact.test_files)
    r = sandbox.exec(f"{GIT} checkout HEAD -- {restore}", workdir="/repo", user="root", timeout=60)
    if not r.ok:
        raise RuntimeError(f"could not restore the oracle test files: {r.stderr.strip()[:300]}")


def clear_answers(sandbox: Any) -> None:
    """Remove what holds the answer from a graded state: the repository's history and the artifact's folder.

    ``/repo/.git`` holds the code before the bug and the unweakened tests, the artifact's folder its
    diffs. Grading needs neither once the changes are in, and removed (not only unreadable, as the
    harness's hidden runs make them) neither is a mark of the run: an installed package has no
    history either.

    Raises:
        RuntimeError: They could not be removed.
    """
    r = sandbox.exec(f"rm -rf /repo/.git {BUG_DIR}", workdir="/", user="root", timeout=60)
    if not r.ok:
        raise RuntimeError(f"could not clear the graded state: {r.stderr.strip()[:300]}")


def _bug_state(sandbox: Any, artifact: BugArtifact) -> None:
    """Build the graded bug state in a fresh container: original + bug, the oracle tests unweakened.

    (The solver started from the weakened state, but the weakening touches only oracle test files,
    which grading restores anyway; pinning the harness's files on this state pins the graded one.)

    Raises:
        RuntimeError: The artifact does not fit the image (it was validated against another one).
    """
    failed = prepare_state(sandbox, artifact, BUGGY)
    if failed:
        raise RuntimeError(failed[1])


def grade_repair(
    pool: Any,
    artifact: BugArtifact,
    expected: list[str],
    changes: SolverChanges,
    timeout: float = 300.0,
    *,
    clean_seconds: float | None = None,
    per_test_timeout: float = PER_TEST_TIMEOUT,
    fail_to_pass: list[str] | None = None,
    plain_always: bool = False,
) -> GradeResult:
    """Grade a repair in a fresh container of ``pool`` (never the solver's own); see the module docstring.

    Args:
        pool: A :class:`SandboxPool` of the repository image.
        artifact: The validated bug.
        expected: Test ids that must be present and pass (FAIL_TO_PASS + PASS_TO_PASS).
        changes: The solver's changes (from :func:`changes_between`).
        timeout: Seconds the test run may take at most.
        clean_seconds: The original code's graded run time, which bounds the run
            (:func:`grade_time_limit`); the task records it (``task["clean_seconds"]``).
        per_test_timeout: Seconds one test may take: the value validation ran the bug with
            (``task["per_test_timeout"]``).
        fail_to_pass: The tests the plain run repeats (those the bug makes fail); None: all of
            ``expected``.
        plain_always: Run the plain configuration even when the grading run did not pass
            (validation's check 12 asks whether the bug state fails there too).

    Raises:
        SparringError: No container could be started (the engine, not the solver).
        RuntimeError: The artifact does not fit the image.
    """
    t0 = time.perf_counter()
    plan = carry_plan(artifact, changes)
    result = GradeResult(solved=False, ignored=sorted(plan.dropped), ignored_reasons=dict(plan.dropped))
    result.time_limit = limit = grade_time_limit(clean_seconds, timeout)
    result.tampering = harness_tampering(artifact, changes, plan, TaskImage.of(pool.image, pool.hosts))
    if result.tampering:
        result.status = "refused"
        result.error = (
            "the repair reaches for what a fix does not need, so its test results could not be trusted: "
            f"{result.tampering[0]}"
        )
        result.missing = list(expected)
        result.seconds = round(time.perf_counter() - t0, 3)
        return result
    sandbox = pool.acquire()
    try:
        _bug_state(sandbox, artifact)
        # read before anything of the solver's is in: the options are the repository's own
        config = pytest_ini(sandbox, artifact.test_files)
        try:
            apply_changes(sandbox, artifact, plan)
            clear_answers(sandbox)
            run = harness_run(
                sandbox,
                artifact.test_files,
                expected=expected,
                timeout=limit,
                config=config,
                test_timeout=per_test_timeout,
                processes=processes_allowed(artifact.repo),
                hidden=False,  # the plain run hides: a refusal shared by both would mark them (harness_run)
            )
        except Exception as e:  # whatever the solver's files did to the grading, it is their failure
            result.status, result.error = "error", f"the repair could not be applied or run: {e}"[:500]
            result.missing = list(expected)
            result.seconds = round(time.perf_counter() - t0, 3)
            return result
    finally:
        sandbox.close()
    honest = run.status in HONEST_STATUSES
    result.status, result.test_seconds = run.status, round(run.seconds, 3)
    result.error = None if honest else run.detail
    result.missing = [t for t in expected if t not in run.tests]
    result.failing = {t: s for t in expected if (s := run.tests.get(t, "passed")) != "passed"}
    result.passed = sum(1 for t in expected if run.tests.get(t) == "passed")
    result.solved = bool(expected) and honest and not result.missing and not result.failing
    targets = list(expected if fail_to_pass is None else fail_to_pass)
    if targets and (result.solved or plain_always):
        _plain_grade(pool, artifact, plan, config, targets, limit, result)
        if result.solved and result.plain_failing:  # a test failure, as the grading run's would be
            result.solved, result.passed = False, result.passed - len(result.plain_failing)
            result.failing = {t: f"{s} when run plainly" for t, s in result.plain_failing.items()}
    result.seconds = round(time.perf_counter() - t0, 3)
    return result


def _plain_grade(
    pool: Any, artifact: BugArtifact, plan: CarryPlan, config: str, targets: list[str], limit: float, out: GradeResult
) -> None:
    """Run ``targets`` in the plain configuration in a fresh container (nothing the first run left is there).

    Fills ``out.plain_*``; a failure to apply or run the changes counts as every target failing.
    """
    sandbox = pool.acquire()
    try:
        try:
            _bug_state(sandbox, artifact)
            apply_changes(sandbox, artifact, plan)
            clear_answers(sandbox)
            what = targets if len(targets) <= MAX_TARGET_IDS else artifact.test_files
            run = harness_run(
                sandbox, what, expected=targets, timeout=limit, config=config, plain=True,
                processes=processes_allowed(artifact.repo),
            )  # fmt: skip
        except Exception as e:  # as for the first run: the solver's files failed the grading
            out.plain_status, out.plain_failing = "error", {t: f"error: {e}"[:300] for t in targets}
            return
    finally:
        sandbox.close()
    out.plain_status, out.plain_seconds = run.status, round(run.seconds, 3)
    if run.status not in HONEST_STATUSES:
        out.plain_failing = {t: f"{run.status}: {run.detail}"[:300] for t in targets}
    else:
        out.plain_failing = {t: s for t in targets if (s := run.tests.get(t, "missing")) != "passed"}


def higher_order_artifact(pool: Any, artifact: BugArtifact, changes: SolverChanges) -> BugArtifact | None:
    """The bug state a failed repair leaves, as a new artifact of order ``artifact.order + 1``.

    Its ``bug_inject.diff`` goes from the original code to the bug plus the changes grading carries
    (:mod:`~sparring.envs.swe.carry`; of new files, only those the bug removed); the script,
    parser, test files and weakening are the parent's. None when the solver's changes undo the bug entirely or change
    nothing. The result must be validated like any artifact (:func:`higher_order_task` does both).
    """
    sandbox = pool.acquire()
    try:
        _bug_state(sandbox, artifact)
        apply_changes(sandbox, artifact, carry_plan(artifact, changes))
        r = sandbox.exec(f"{GIT} add -A && {GIT} diff --cached HEAD", workdir="/repo", user="root", timeout=60)
    finally:
        sandbox.close()
    if not r.ok:
        raise RuntimeError(f"could not diff the solver's state: {r.stderr.strip()[:300]}")
    bug_files = set(diff_files(artifact.bug_inject_diff))
    parts = split_diff(r.stdout)
    diff = "".join(d for p, d in parts.items() if p in bug_files or "\n--- /dev/null" not in "\n" + d)
    if not diff.strip() or diff == artifact.bug_inject_diff:
        return None
    return BugArtifact(
        test_script=artifact.test_script,
        test_files=list(artifact.test_files),
        bug_inject_diff=diff,
        test_weaken_diff=artifact.test_weaken_diff,
        test_parser=artifact.test_parser,
        repo=artifact.repo,
        version=artifact.version,
        order=artifact.order + 1,
        origin=f"order{artifact.order + 1}",
        meta={"parent": artifact.bug_id, "parent_origin": artifact.origin},
    )
