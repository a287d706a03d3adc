"""The solver's repository and the grading of a repair (DESIGN §3.3).

:func:`setup_solver_repo` turns a fresh container of the repository image into the solver's
starting point: original + bug + weakening, ``.git`` removed and one fresh commit, bytecode and
the artifact gone, so nothing on disk holds the fix.

:func:`grade_repair` never trusts the solver's container: it reads the final files out of it
(:func:`snapshot`), compares them with the starting point, and in a FRESH container rebuilds the
buggy state, copies over the solver's changes to non-test files only, restores every oracle test
file from the original, runs the artifact's script and parses it. The repair is solved only if
every expected test id is present and passes.
"""

from __future__ import annotations

import io
import posixpath
import re
import tarfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from sparring.envs.swe.bugs.artifact import BugArtifact, diff_files, split_diff
from sparring.envs.swe.runs import BUG_DIR, GIT, WEAKENED, _q, _tar, prepare_state, run_script

__all__ = [
    "GradeResult",
    "SolverChanges",
    "changes_between",
    "grade_repair",
    "harness_tampering",
    "higher_order_artifact",
    "setup_solver_repo",
    "snapshot",
]

#: Files whose changes grading drops: pytest's configuration and conftest files, interpreter start-up
#: hooks, and top-level modules that would shadow the test runner (``python -m pytest`` puts /repo
#: first on ``sys.path``).
PROTECTED = re.compile(
    r"(^|/)(conftest\.py|pytest\.ini|tox\.ini|setup\.cfg|pyproject\.toml|sitecustomize\.py|usercustomize\.py)$"
    r"|\.pth$|^([^/]+/)?(pytest|_pytest|pluggy|py|iniconfig|packaging|xdist)(\.py|/)"
)

#: Bytes of the solver's tree read back at most (larger files are ignored, not graded).
MAX_FILE_BYTES = 2 << 20

SOLVER_COMMIT = "Initial commit"


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


def snapshot(sandbox: Any, root: str = "/repo") -> dict[str, bytes]:
    """The regular files under ``root`` (no ``.git``, no bytecode), path -> bytes, read from the container."""
    data = sandbox.get_archive(root, max_file_bytes=MAX_FILE_BYTES)
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
            if ".." in parts or path.startswith("/") or ".git" in parts or "__pycache__" in parts:
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
    """

    written: dict[str, bytes] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)
    replaced: dict[str, bytes] = field(default_factory=dict)

    @property
    def paths(self) -> list[str]:
        """Every path touched."""
        return sorted([*self.written, *self.deleted])


def changes_between(before: dict[str, bytes], after: dict[str, bytes]) -> SolverChanges:
    """The file-level changes from ``before`` to ``after`` (two :func:`snapshot` results)."""
    written = {p: d for p, d in after.items() if before.get(p) != d}
    deleted = sorted(p for p in before if p not in after)
    return SolverChanges(written, deleted, {p: before[p] for p in written if p in before})


@dataclass
class GradeResult:
    """The grade of one repair.

    Attributes:
        solved: Every expected test is present and passes.
        passed: Expected tests that passed.
        failing: Expected tests present but not passing (test id -> status).
        missing: Expected tests absent from the run (collection errors land here).
        ignored: Paths whose changes grading dropped (test files and pytest configuration).
        tampering: Lines the solver added that reach for the test machinery (``path: line``); any
            makes the repair unsolved without running it (:func:`harness_tampering`).
        error: Why the run produced no results (parser error, timeout, tampering), or None.
        seconds: Wall time of grading.
    """

    solved: bool
    passed: int = 0
    failing: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    tampering: list[str] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (``info["outcome"]`` of the repair env)."""
        return asdict(self)


def protected_paths(artifact: BugArtifact, paths: list[str]) -> list[str]:
    """Which of ``paths`` grading ignores: oracle test files, files the weakening touched, pytest config."""
    oracle = set(artifact.test_files) | set(diff_files(artifact.test_weaken_diff))
    return [p for p in paths if p in oracle or PROTECTED.search(p)]


#: What a repair has no business adding to a repository's code: the test runner and its report,
#: exit hooks and hard exits, tracing, builtins, and dynamic code that would hide any of these.
TAMPERING = re.compile(
    r"\b_?pytest\b|\bpluggy\b|junit|SPARRING_|\batexit\b|\bos\._exit\b|\bsys\.(settrace|setprofile|excepthook)\b"
    r"|\bbuiltins\b|__builtins__|__import__|\bimportlib\b|(?<![\w.])(exec|eval|compile)\s*\("
)


def harness_tampering(artifact: BugArtifact, changes: SolverChanges) -> list[str]:
    """Lines the solver added to files grading keeps that reach for the test machinery.

    The graded tests import the solver's code into the pytest process that writes the report, so
    code run at import or at exit could rewrite the report or patch pytest and claim passes (no
    in-process result can be trusted then). A repair needs none of that: a kept file's added line
    that matches :data:`TAMPERING` fails the repair, unless the bug removed that very line (the
    fix restores it). A static check: it stops the direct forms, which are what a policy finds
    first; code obfuscated past these names is the limit that remains (docs/swe.md).
    """
    restored = {
        line[1:].strip()
        for line in artifact.bug_inject_diff.splitlines()
        if line.startswith("-") and not line.startswith("---")
    }
    ignored = set(protected_paths(artifact, list(changes.written)))
    found = []
    for path, data in sorted(changes.written.items()):
        if path in ignored:
            continue
        before = set(changes.replaced.get(path, b"").decode("utf-8", "replace").splitlines())
        for line in data.decode("utf-8", "replace").splitlines():
            text = line.strip()
            if line not in before and text not in restored and TAMPERING.search(text):
                found.append(f"{path}: {text[:120]}")
    return found


def apply_changes(sandbox: Any, artifact: BugArtifact, changes: SolverChanges) -> list[str]:
    """Build the buggy state, then the solver's changes to non-test files, then the original oracle tests.

    Returns:
        The paths whose changes were dropped.
    """
    failed = prepare_state(sandbox, artifact, WEAKENED)
    if failed:
        raise RuntimeError(failed[1])
    ignored = protected_paths(artifact, changes.paths)
    written = {p: d for p, d in changes.written.items() if p not in ignored}
    deleted = [p for p in changes.deleted if p not in ignored]
    if written:
        sandbox.put_archive("/repo", _tar(written))
    if deleted:
        sandbox.exec("rm -f -- " + " ".join(_q(p) for p in deleted), workdir="/repo", user="root", timeout=60)
    restore = " ".join(_q(p) for p in artifact.test_files)
    r = sandbox.exec(f"{GIT} checkout HEAD -- {restore}", workdir="/repo", user="root", timeout=60)
    if not r.ok:
        raise RuntimeError(f"could not restore the oracle test files: {r.stderr.strip()[:300]}")
    return ignored


def grade_repair(
    pool: Any, artifact: BugArtifact, expected: list[str], changes: SolverChanges, timeout: float = 300.0
) -> GradeResult:
    """Grade a repair in a fresh container of ``pool`` (never the solver's own).

    Args:
        pool: A :class:`SandboxPool` of the repository image.
        artifact: The validated bug.
        expected: Test ids that must be present and pass (FAIL_TO_PASS + PASS_TO_PASS).
        changes: The solver's changes (from :func:`changes_between`).
        timeout: Seconds the test script may run.
    """
    t0 = time.perf_counter()
    tampering = harness_tampering(artifact, changes)
    if tampering:
        error = f"the repair reaches for the test machinery, so its test results cannot be trusted: {tampering[0]}"
        seconds = round(time.perf_counter() - t0, 3)
        return GradeResult(solved=False, tampering=tampering, error=error, seconds=seconds)
    sandbox = pool.acquire()
    try:
        ignored = apply_changes(sandbox, artifact, changes)
        run = run_script(sandbox, artifact, timeout)
    finally:
        sandbox.close()
    statuses = run.statuses
    result = GradeResult(solved=False, ignored=ignored, error=run.parse_error)
    result.missing = [t for t in expected if t not in statuses]
    result.failing = {t: statuses[t] for t in expected if t in statuses and statuses[t] != "passed"}
    result.passed = sum(1 for t in expected if statuses.get(t) == "passed")
    result.solved = bool(expected) and run.parse_error is None and not result.missing and not result.failing
    result.seconds = round(time.perf_counter() - t0, 3)
    return result


def higher_order_artifact(pool: Any, artifact: BugArtifact, changes: SolverChanges) -> BugArtifact | None:
    """The bug state a failed repair leaves, as a new artifact of order ``artifact.order + 1``.

    Its ``bug_inject.diff`` goes from the original code to the bug plus the solver's changes to
    non-test files (scratch files the solver added are left out); the script, parser, test files
    and weakening are the parent's. None when the solver's changes undo the bug entirely or change
    nothing. The result must be validated like any artifact (:func:`higher_order_task` does both).
    """
    sandbox = pool.acquire()
    try:
        apply_changes(sandbox, artifact, changes)
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
