"""Running a bug artifact's tests on one state of the repository, in a fresh container.

A :class:`RepoState` says which of the artifact's diffs are applied on top of the original code
(the image's ``/repo``). :func:`harness_state` takes a fresh container from a pool, builds the
state and runs the listed test files the harness's way (:func:`~sparring.envs.swe.harness.harness_run`):
that run is the verdict. Asked to, it then runs the artifact's own ``test_script.sh`` and parses
it with ``test_parser.py`` or the built-in JUnit parser (:func:`run_script`) on the same state
with probe tests appended (:func:`probe_tests`), so validation can hold the artifact's script and
parser to what the harness saw. :func:`run_state` (script only) is kept for callers that want the
artifact's own view.
"""

from __future__ import annotations

import fnmatch
import io
import json
import re
import secrets
import shlex
import tarfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sparring import SparringError
from sparring.envs.swe.bugs.artifact import JUNIT_PATH, BugArtifact, reverse_diff, split_diff
from sparring.envs.swe.capabilities import processes_allowed
from sparring.envs.swe.testing import TestRun as HarnessRun
from sparring.envs.swe.testing import parse_junit_xml

__all__ = [
    "BUGGY",
    "ORIGINAL",
    "WEAKENED",
    "BUG_DIR",
    "REPAIRED",
    "RepoState",
    "SharedIni",
    "StateRun",
    "TestRun",
    "harness_state",
    "not_passed",
    "prepare_state",
    "probe_tests",
    "repo_ini",
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

#: Failing tests run again by node id at most; with more, the test files run again (pytest resolves
#: node ids one by one: 98 ids of inflection took longer than its whole 455-test file).
MAX_TARGET_IDS = 40

#: Where the artifact's parser writes its verdicts, and the most of them (or of a JUnit report) read back.
PARSED_PATH = "/tmp/sparring-parsed.json"
MAX_PARSED_BYTES = 16 << 20


@dataclass(frozen=True)
class RepoState:
    """Which diffs are applied to the original code.

    Attributes:
        bug: Apply ``bug_inject.diff``.
        weaken: Apply ``test_weaken.diff``.
        revert: Files whose part of the bug diff is left out (check 7, inverse mutation).
        fixed: Undo the bug again after applying it, as a repair lands: the original code, in
            files rewritten since the image was built (what a solver's perfect fix leaves).
    """

    bug: bool = False
    weaken: bool = False
    revert: tuple[str, ...] = ()
    fixed: bool = False


ORIGINAL = RepoState()
BUGGY = RepoState(bug=True)
WEAKENED = RepoState(bug=True, weaken=True)
#: The original code reached the way a repair reaches it (validation runs the artifact's script here).
REPAIRED = RepoState(bug=True, fixed=True)


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


def prepare_state(sandbox: Any, artifact: BugArtifact, state: RepoState) -> tuple[str, str] | None:
    """Build ``state`` in the container's /repo; returns (check, error) when a part does not apply.

    Two round trips to the container whatever the state (copy to a fresh folder; move, check and
    apply), since validation builds several states per artifact.
    """
    steps: list[tuple[str, str, str]] = []
    if state.bug:
        parts = split_diff(artifact.bug_inject_diff)
        kept = "".join(d for p, d in parts.items() if p not in state.revert)
        if kept:
            steps.append(("changed_files", "bug_inject.diff", kept))
            if state.fixed:
                steps.append(("changed_files", "bug_fix.diff", reverse_diff(kept)))
    if state.weaken:
        steps.append(("weakening_hides_bug", "test_weaken.diff", artifact.test_weaken_diff))
    stage = f"/tmp/sparring-stage-{secrets.token_hex(8)}"
    files = {f"{stage[5:]}/bug/{n}": t.encode() for n, t in artifact.files().items()}
    files.update({f"{stage[5:]}/{name}": diff.encode() for _, name, diff in steps})
    sandbox.put_archive("/tmp", _tar(files))
    script = [
        f"rm -rf {BUG_DIR} /tmp/sparring-*.diff && mv {stage}/bug {BUG_DIR} || exit 5",
        "for f in " + " ".join(_q(p) for p in artifact.test_files) + '; do test -f "/repo/$f" || echo "$f"; done'
        " | grep . && exit 3",
    ]
    script += [
        f"{{ {GIT} apply --whitespace=nowarn {stage}/{name} || {{ echo 'sparring-step {i}' >&2; exit 4; }}; }}"
        for i, (_, name, _) in enumerate(steps)
    ]
    script.append(f"rm -rf {stage}; exit 0")
    r = sandbox.exec("\n".join(script), workdir="/repo", user="root", timeout=60)
    if r.exit_code == 3:
        return "test_files", f"missing test file(s): {', '.join(r.stdout.split())}"
    if not r.ok:
        err, _, step = r.stderr.rpartition("sparring-step ")
        check, name = (steps[int(step)][:2]) if step.strip().isdigit() else ("changed_files", "a diff")
        return check, f"{name} does not apply: {(err or r.stdout).strip()[:300]}"
    return None


def run_script(sandbox: Any, artifact: BugArtifact, timeout: float) -> TestRun:
    """Run the artifact's test script in /repo and parse the result (the state must be built)."""
    sandbox.exec(f"rm -f {JUNIT_PATH} /tmp/sparring-out.txt {PARSED_PATH}", user="root", timeout=30)
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
        # to a file: a suite's verdicts are longer than the output a command keeps
        p = sandbox.exec(
            f"python3 {BUG_DIR}/test_parser.py < /tmp/sparring-out.txt > {PARSED_PATH}", workdir="/repo", timeout=60
        )
        try:
            data = json.loads(sandbox.get_file(PARSED_PATH, max_bytes=MAX_PARSED_BYTES))
        except (OSError, ValueError):
            run.parse_error = (
                f"test_parser.py did not print a JSON object of at most {MAX_PARSED_BYTES} bytes "
                f"(exit {p.exit_code}): {p.stderr.strip()[-200:]}"
            )
            return run
    else:
        try:
            xml = sandbox.get_file(JUNIT_PATH, max_bytes=MAX_PARSED_BYTES)
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


# ------------------------------------------------------------------------------ the harness's runs


def not_passed(run: HarnessRun) -> list[str]:
    """The ids of a run that did not pass (failed, errored, skipped; a module that failed to import)."""
    return sorted(t for t, s in run.tests.items() if s != "passed")


def repo_ini(sandbox: Any, artifact: BugArtifact) -> str:
    """The harness's pytest configuration for the artifact's test files, read from the image's own /repo.

    Call it on a fresh container, before any diff is applied: the options then come from the
    repository's own configuration files, whatever the artifact's diffs would do to them.

    Raises:
        RuntimeError: The configuration could not be read.
        ValueError: A test path is not a plain relative path (the static checks refuse those first).
    """
    from sparring.envs.swe.harness import pytest_ini

    return pytest_ini(sandbox, artifact.test_files)


class SharedIni:
    """The harness's configuration for one artifact, read once from a fresh container.

    By default whichever state's container asks first reads it, before its diffs are applied, and
    the others wait for that answer instead of reading it again. A caller can name one state the
    reader instead (:meth:`get`), so the others build their state meanwhile and only then wait
    (:meth:`wait`): the read is then off the path of the state that matters most.
    """

    def __init__(self, artifact: BugArtifact):
        """Nothing is read until :meth:`get`."""
        self._artifact = artifact
        self._lock = threading.Lock()
        self._known = threading.Event()
        self._value: str | None = None
        self._error: str | None = None

    def get(self, sandbox: Any) -> str:
        """The configuration; ``sandbox`` must be a fresh container (used only by the first caller).

        Raises:
            RuntimeError: It could not be read (the same error for every caller).
        """
        with self._lock:
            if not self._known.is_set():
                try:
                    self._value = repo_ini(sandbox, self._artifact)
                except (RuntimeError, ValueError) as e:
                    self._error = str(e)
                finally:  # anything else (the engine's trouble) reaches the reader's caller; waiters wake
                    self._error = self._error or (None if self._value else "the configuration read was cut off")
                    self._known.set()
        return self.wait()

    def fail(self, error: str) -> None:
        """The reader got no container: every waiter gets ``error`` (unless it was read meanwhile)."""
        with self._lock:
            if not self._known.is_set():
                self._error = error
                self._known.set()

    def wait(self) -> str:
        """The configuration once :meth:`get` (or :meth:`fail`) has run in another thread.

        Raises:
            RuntimeError: It could not be read.
        """
        self._known.wait()
        if self._value is None:
            raise RuntimeError(self._error)
        return self._value


def _probe_name(ini: str) -> str | None:
    """A fresh test function name pytest collects under the repository's ``python_functions``; None if none fits."""
    match = re.search(r"^python_functions\s*=\s*(\S+)", ini, re.M)
    pattern = match.group(1) if match else "test"
    token = f"sparring_probe_{secrets.token_hex(6)}"
    name = pattern.replace("*", token, 1) if "*" in pattern else f"{pattern}_{token}"
    ok = name.isidentifier() and (fnmatch.fnmatchcase(name, pattern) or name.startswith(pattern))
    return name if ok else None


def probe_tests(artifact: BugArtifact, ini: str = "") -> tuple[dict[str, str], dict[str, str]]:
    """Probe tests to append to the artifact's Python test files, and the verdict each must get.

    Each probe file gets two tests with fresh random names, one that passes and one that fails,
    in a random order. An honest script and parser report them like any other test; a script that
    runs no tests, runs other ones, or writes its own report, and a parser that reads the
    repository instead of the results, cannot know their names or verdicts in advance.

    Args:
        artifact: The artifact whose test files get the probes.
        ini: The harness's configuration: the names follow its ``python_functions``.

    Returns:
        (path -> text to append, test id -> expected status); empty where no name would be collected.
    """
    appendix: dict[str, str] = {}
    expected: dict[str, str] = {}
    for path in artifact.test_files:
        if not path.endswith(".py"):
            continue
        text = "\n\n"
        for fails in secrets.SystemRandom().sample([False, True], 2):
            name = _probe_name(ini)
            if name is None:
                return {}, {}
            a, b = secrets.randbelow(1000), secrets.randbelow(1000)
            text += f"\n\ndef {name}():\n    assert {a} + {b} == {a + b + (1 if fails else 0)}\n"
            expected[f"{path}::{name}"] = "failed" if fails else "passed"
        appendix[path] = text
    return appendix, expected


@dataclass
class StateRun:
    """One state built in a fresh container and run the harness's way (and the artifact's way, when asked).

    Attributes:
        harness: The harness's run; None when the state could not be built.
        again: Further harness runs of the same state in the same container (``again`` seeds).
        script: The artifact's script and parser on the same state with :func:`probe_tests`
            appended, run after the harness's run; None when not asked for.
        probes: Test id -> the status each probe must get.
        setup_error: Why the state could not be built, or None.
        setup_check: The validation check a setup error belongs to.
        started: ``time.monotonic()`` when the harness's run started.
    """

    harness: HarnessRun | None = None
    again: list[HarnessRun] = field(default_factory=list)
    script: TestRun | None = None
    probes: dict[str, str] = field(default_factory=dict)
    setup_error: str | None = None
    setup_check: str = ""
    started: float = 0.0


def _without_ini(error: RuntimeError) -> StateRun:
    """A state the harness cannot run: its configuration could not be read."""
    return StateRun(setup_check="test_files", setup_error=f"the harness cannot run these test files: {error}")


def harness_state(
    pool: Any,
    artifact: BugArtifact,
    state: RepoState,
    *,
    ini: SharedIni,
    timeout: float,
    test_timeout: float | None = None,
    targets: list[str] | None = None,
    hash_seed: int | None = None,
    again: Sequence[int] = (),
    again_failing: bool = False,
    with_script: bool = False,
    wait: Callable[[], None] | None = None,
    on_first: Callable[[HarnessRun], None] | None = None,
    targets_later: Callable[[], list[str] | None] | None = None,
    reads_ini: bool | None = None,
) -> StateRun:
    """Build ``state`` in a fresh container of ``pool`` and run the harness on it; discard the container.

    Args:
        pool: A :class:`SandboxPool` of the repository image.
        artifact: The bug artifact.
        state: Which diffs to apply.
        ini: The harness's configuration, shared by the states of one validation.
        timeout: Seconds the harness's run (and the artifact's script) may take.
        test_timeout: Seconds one test may take (a test over it fails and is listed as timed out).
        targets: What pytest runs: node ids or files; the artifact's test files when None.
        hash_seed: ``PYTHONHASHSEED`` of the run; the image's when None.
        again: Hash seeds of further harness runs in the same container, each a fresh process,
            after the first and before anything of the artifact's runs (:attr:`StateRun.again`).
        again_failing: Those runs take only the first run's tests that did not pass (none: no runs).
        with_script: Also run the artifact's script and parser, with probe tests appended.
        wait: Called right before each harness run starts (keeps re-runs some time apart).
        on_first: Called with the first harness run as soon as it ends (to start re-runs elsewhere).
        targets_later: Called once the state is built, in place of ``targets``: blocks until the
            targets are known (another container's first run), and returns them (``[]``: the test
            files), or None when there is nothing to run (a run with no harness result is returned).
        reads_ini: True: this state's container reads ``ini`` (before its diffs); False: another
            state's does, so this one builds its state first and then waits for it; None: whichever
            container asks first reads it.

    Raises:
        SparringError: No container could be had (the engine's trouble, not the artifact's).
    """
    from sparring.envs.swe.harness import harness_run

    try:
        sandbox = pool.acquire()
    except BaseException:
        if reads_ini:
            ini.fail("no fresh container to read the repository's configuration from")
        raise
    try:
        try:
            config = ini.get(sandbox) if reads_ini is not False else None
        except RuntimeError as e:
            return _without_ini(e)
        failed = prepare_state(sandbox, artifact, state)
        if failed:
            return StateRun(setup_check=failed[0], setup_error=failed[1])
        if config is None:
            try:
                config = ini.wait()
            except RuntimeError as e:
                return _without_ini(e)

        def harness(what: Sequence[str] | None, seed: int | None) -> HarnessRun:
            if wait is not None:
                wait()
            kw: dict[str, Any] = {"config": config, "timeout": timeout, "test_timeout": test_timeout, "hash_seed": seed,
                                  "processes": processes_allowed(artifact.repo)}  # fmt: skip
            done = harness_run(sandbox, what or artifact.test_files, **kw)
            if what and done.status == "crash" and done.exit_code == 4:
                # a usage error: pytest knows some ids not under this hash seed (parameter ids built from sets)
                done = harness_run(sandbox, artifact.test_files, **kw)
            return done

        if targets_later is not None:
            later = targets_later()
            if later is None:
                return StateRun()
            targets = later
        run = StateRun(started=time.monotonic())
        run.harness = harness(targets, hash_seed)
        if on_first is not None:
            on_first(run.harness)
        bad = not_passed(run.harness)
        for seed in again if bad or not again_failing else ():
            what = (bad if len(bad) <= MAX_TARGET_IDS else None) if again_failing else targets
            run.again.append(harness(what, seed))
        if with_script:
            appendix, run.probes = probe_tests(artifact, config)
            for path, text in appendix.items():
                q = _q(path)
                add = sandbox.exec(
                    f"test -f {q} && ! test -L {q} && printf %s {_q(text)} >> {q}",
                    workdir="/repo",
                    user="root",
                    timeout=30,
                )
                if not add.ok:  # not a plain file: no probe there
                    run.probes = {k: v for k, v in run.probes.items() if not k.startswith(path + "::")}
            # an honest script runs what the harness ran: it gets that time again, and a minute
            run.script = run_script(sandbox, artifact, min(timeout, 2 * run.harness.seconds + 60))
        return run
    except ValueError as e:  # a test path the harness refuses (the static checks refuse those first)
        return StateRun(setup_check="test_files", setup_error=str(e))
    except (OSError, SparringError) as e:  # the container broke while the state was built or tested
        return StateRun(harness=HarnessRun(status="crash", detail=f"the container stopped answering ({e})"))
    finally:
        sandbox.close()
