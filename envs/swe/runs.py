"""Running a bug artifact's tests on one state of the repository, in a fresh container.

A :class:`RepoState` says which of the artifact's diffs are applied on top of the original code
(the image's ``/repo``); :func:`run_state` takes a fresh container from a pool, builds the state,
runs ``test_script.sh`` and parses its result with ``test_parser.py`` or the built-in JUnit
parser. Validation and grading both go through here, so they see the tests the same way.
"""

from __future__ import annotations

import io
import json
import shlex
import tarfile
import time
from dataclasses import dataclass, field
from typing import Any

from sparring.envs.swe.bugs.artifact import JUNIT_PATH, BugArtifact, split_diff
from sparring.envs.swe.testing import parse_junit_xml

__all__ = [
    "BUGGY",
    "ORIGINAL",
    "WEAKENED",
    "BUG_DIR",
    "RepoState",
    "TestRun",
    "prepare_state",
    "run_script",
    "run_state",
]

#: Where the artifact's files are put in a container (root-owned; the agent never sees them).
BUG_DIR = "/tmp/sparring-bug"

#: ``git`` as root over a repository another user owns.
GIT = "git -c safe.directory='*' -c user.name=sparring -c user.email=sparring@sparring.invalid"

#: Shell quoting of a path; grading quotes the paths it restores or deletes with it too.
_q = shlex.quote

_STATUSES = {"passed", "failed", "error", "skipped"}


@dataclass(frozen=True)
class RepoState:
    """Which diffs are applied to the original code.

    Attributes:
        bug: Apply ``bug_inject.diff``.
        weaken: Apply ``test_weaken.diff``.
        revert: Files whose part of the bug diff is left out (check 7, inverse mutation).
    """

    bug: bool = False
    weaken: bool = False
    revert: tuple[str, ...] = ()


ORIGINAL = RepoState()
BUGGY = RepoState(bug=True)
WEAKENED = RepoState(bug=True, weaken=True)


@dataclass
class TestRun:
    """The parsed result of one run of the test script.

    Attributes:
        statuses: Test id -> ``passed`` | ``failed`` | ``error`` | ``skipped``.
        parse_error: Why no ``{test_id: status}`` came out of the run, or None.
        setup_error: Why the state could not be built (a diff that does not apply), or None.
        setup_check: The validation check a setup error belongs to.
        exit_code: Exit status of the script (None when it timed out).
        output: The tail of the script's output, for logs.
        seconds: Wall time of the script.
    """

    statuses: dict[str, str] = field(default_factory=dict)
    parse_error: str | None = None
    setup_error: str | None = None
    setup_check: str = ""
    exit_code: int | None = None
    output: str = ""
    seconds: float = 0.0


def _tar(files: dict[str, bytes], mode: int = 0o644) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def put_artifact(sandbox: Any, artifact: BugArtifact) -> None:
    """Copy the artifact's files into :data:`BUG_DIR` of the container (as root, readable by all)."""
    sandbox.exec(f"rm -rf {BUG_DIR} && mkdir -p {BUG_DIR}", user="root", timeout=30)
    sandbox.put_archive(BUG_DIR, _tar({n: t.encode() for n, t in artifact.files().items()}))


def prepare_state(sandbox: Any, artifact: BugArtifact, state: RepoState) -> tuple[str, str] | None:
    """Build ``state`` in the container's /repo; returns (check, error) when a part does not apply."""
    put_artifact(sandbox, artifact)
    missing = sandbox.exec(
        "for f in " + " ".join(_q(p) for p in artifact.test_files) + '; do test -f "/repo/$f" || echo "$f"; done',
        user="root",
        timeout=30,
    )
    if missing.stdout.strip():
        return "test_files", f"missing test file(s): {', '.join(missing.stdout.split())}"
    steps: list[tuple[str, str, str]] = []
    if state.bug:
        parts = split_diff(artifact.bug_inject_diff)
        kept = "".join(d for p, d in parts.items() if p not in state.revert)
        if kept:
            steps.append(("changed_files", "bug_inject.diff", kept))
    if state.weaken:
        steps.append(("weakening_hides_bug", "test_weaken.diff", artifact.test_weaken_diff))
    for check, name, diff in steps:
        sandbox.put_archive("/tmp", _tar({f"sparring-{name}": diff.encode()}))
        r = sandbox.exec(
            f"{GIT} apply --whitespace=nowarn /tmp/sparring-{name}", workdir="/repo", user="root", timeout=60
        )
        if not r.ok:
            return check, f"{name} does not apply: {(r.stderr or r.stdout).strip()[:300]}"
    return None


def run_script(sandbox: Any, artifact: BugArtifact, timeout: float) -> TestRun:
    """Run the artifact's test script in /repo and parse the result (the state must be built)."""
    sandbox.exec(f"rm -f {JUNIT_PATH} /tmp/sparring-out.txt", user="root", timeout=30)
    t0 = time.perf_counter()
    r = sandbox.exec(
        f"export SPARRING_JUNIT={JUNIT_PATH} PYTHONDONTWRITEBYTECODE=1; "
        f"bash {BUG_DIR}/test_script.sh > /tmp/sparring-out.txt 2>&1",
        workdir="/repo",
        timeout=timeout,
    )
    run = TestRun(exit_code=r.exit_code, seconds=time.perf_counter() - t0)
    tail = sandbox.exec("tail -c 4000 /tmp/sparring-out.txt", timeout=30)
    run.output = tail.stdout
    if r.timed_out:
        run.parse_error = f"the test script timed out after {timeout:.0f} s"
        return run
    if artifact.test_parser is not None:
        p = sandbox.exec(f"python3 {BUG_DIR}/test_parser.py < /tmp/sparring-out.txt", workdir="/repo", timeout=60)
        try:
            data = json.loads(p.stdout)
        except json.JSONDecodeError:
            run.parse_error = (
                f"test_parser.py did not print a JSON object (exit {p.exit_code}): {p.stderr.strip()[-200:]}"
            )
            return run
    else:
        try:
            xml = sandbox.get_file(JUNIT_PATH)
        except Exception:
            run.parse_error = f"the script wrote no JUnit report to $SPARRING_JUNIT ({JUNIT_PATH})"
            return run
        listing = sandbox.exec("find . -name '*.py' -not -path './.git/*' | cut -c3-", workdir="/repo", timeout=60)
        try:
            data, _ = parse_junit_xml(xml, listing.stdout.splitlines())
        except ValueError as e:
            run.parse_error = str(e)
            return run
    if not isinstance(data, dict) or not all(isinstance(k, str) and v in _STATUSES for k, v in data.items()):
        run.parse_error = "the parser's output is not a {test_id: passed|failed|error|skipped} object"
        return run
    if not data:
        run.parse_error = "the parser found no test results"
        return run
    run.statuses = dict(data)
    return run


def run_state(pool: Any, artifact: BugArtifact, state: RepoState, timeout: float) -> TestRun:
    """Build ``state`` in a fresh container of ``pool``, run and parse the tests, discard the container."""
    sandbox = pool.acquire()
    try:
        failed = prepare_state(sandbox, artifact, state)
        if failed:
            return TestRun(setup_check=failed[0], setup_error=failed[1])
        return run_script(sandbox, artifact, timeout)
    finally:
        sandbox.close()
