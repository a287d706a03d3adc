"""The harness's own pytest run: the one test run whose result grading (and validation) may trust.

:func:`harness_run` runs pytest on a list of test files in a sandbox whose ``/repo`` already holds
the state to test, and returns a :class:`~sparring.envs.swe.testing.TestRun`. Nothing of the run is
left to the repository, the artifact or the code under test:

* **Its own configuration.** pytest gets ``-c`` with an ini the harness wrote outside ``/repo``
  (:func:`pytest_ini`: the options of the repository's own configuration file, read from a state
  the caller vouches for, minus ``addopts``, ``required_plugins`` and the other options that load
  code or choose where to write), ``--rootdir=/repo`` and ``--confcutdir=/repo``, so no
  ``pytest.ini``/``pytest.toml``/``pyproject.toml``/``tox.ini``/``setup.cfg`` of the tested tree
  is read by pytest. The ini pins every ``conftest.py`` and each test folder's ``__init__.py``
  of that state by hash; a run whose tree differs there does not start (``crash``).
* **Its own plugins.** ``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1`` (no entry point of any ``dist-info``
  or ``egg-info`` is loaded) and the plugins it needs named with ``-p`` (``pytest_timeout``),
  imported before the repository is on ``sys.path``; ``-p no:cacheprovider``.
* **Its own interpreter setup.** ``python -P -s -S`` under ``env -i``: no ``site`` (so no
  ``.pth`` file and no ``sitecustomize``/``usercustomize``), no user site, no ``PYTHON*`` variable
  of the image but the hash seed, a fixed ``sys.path`` (``/repo``, the image's PYTHONPATH, the
  standard library, site-packages). ``-I`` is not used because it would also drop
  ``PYTHONHASHSEED``, on which stable parametrised test ids depend.
* **Its own user and record.** pytest runs as ``nobody`` (:data:`RUN_UID`), which owns nothing
  in ``/repo`` and cannot write there, with no capabilities. Results come from the harness's
  recorder plugin (``harness_boot.py``), which writes one record to a pipe that only root can
  open, signed (HMAC) with a secret handed over on a descriptor the bootstrap reads and closes
  before pytest imports anything of the repository; no JUnit file is involved, so there is no
  report on disk for anything to rewrite, and a record written by anything but the recorder (a
  descriptor reached by number, a child left behind) does not verify. The process ends with
  ``os._exit`` as captured at start-up, so no exit hook or finalizer runs after the record.
* **What the run cannot read.** Before pytest starts, root (``harness_boot.py hide``) reads the
  test files and takes every group and other permission bit from them, from ``/repo/.git`` and
  from each entry of ``/tmp`` and ``/var/tmp`` but the harness's folder: the tests' expected
  values, the repository's history (the code before the bug) and the bug artifact's folder (its
  diffs) are out of reach of every process of the run, a child with no audit hook included.
  pytest gets the test files' contents on a descriptor the bootstrap reads before the repository
  is on ``sys.path`` and imports the test modules from that copy; the pytest process is made
  non-dumpable, so its children cannot read its memory. The modes come back (``unhide``) once
  every process of the run is gone. Every run hides so but grading's first one (``hidden=False``):
  a refusal the tested code can meet and go on from (a file it cannot open, a process it cannot
  start) is itself a mark of the run, and a fix keyed on a mark both of grading's runs share
  passes both. Grading's first run refuses nothing of the kind and the plain run hides everything,
  so a repair that needs what is hidden fails the plain run, and one keyed on the refusal fails
  the first.
* **Its own guard inside the run** (``harness_guard.py``, copied beside the bootstrap): an audit
  hook refuses the repository's code the frames, gc lists, trace functions, native memory and
  forged code objects that reaching pytest's objects needs, and the recorder checks at every
  report that pytest's and pluggy's modules, classes and hook implementations are unchanged and
  that a test reported passed did return; ``harness_watch.py`` (copied too) checks what can be
  changed in place with no audited operation: the import system, the builtins and the modules
  tests rely on, the collected test functions against their files, the plugin manager's live
  state. Any finding makes the run a crash (``tampering``). pytest does not name the running test
  in the environment (``PYTEST_CURRENT_TEST``: a parametrized test's id may hold its expected value).
* **A second, plain configuration** (``plain=True``, :data:`PLAIN_ARGS`): the same guard,
  recorder and honesty rules, but every artefact of the test runner that code could read without
  a name the AST check refuses is changed: output capture off (``-s``), no logging, warnings,
  faulthandler or unraisable/thread-exception plugin (logging stays where the tests use
  ``caplog``), ``--assert=plain`` (no import hook on ``sys.meta_path``), test folders appended
  to ``sys.path`` rather than put first (``--import-mode=append``), no per-test timer on
  SIGALRM (pytest-timeout only as a thread timer for the tests' own marks), a random user id with
  no name, the sandbox user's home (:data:`PLAIN_HOME`, the run's id's while it runs) as ``HOME``,
  working directory and first entry of ``sys.path``, a random ``TMPDIR`` under ``/var/tmp``, the
  bootstrap under a random name in a random folder outside ``/tmp`` with no argument (its spec
  lies beside it under its name; a folder the run's user cannot list, where every file the run
  reads has a random name, so the harness's own files cannot be found), no ``-s`` or ``-S`` flag
  (``site`` runs), a supplementary group, started by a shell as a login's command is (``_``,
  ``SHLVL`` 1, ``PWD``, ``TERM``), output through a pipe of its own (a root-owned file as
  ``stdout`` is a mark), the file-size cap lowered by a random amount, no descriptor of the record
  held while the tests run (the recorder opens its FIFO to write), an environment shaped like a
  login's (``USER``, ``SHELL``; no ``PYTEST_*`` or ``PYTHONDONTWRITEBYTECODE`` variable once the
  session starts, though ``sys.dont_write_bytecode`` is set as the image's variable sets it in a
  user's process, and SIGINT and SIGQUIT get back the handlers the backgrounding shell ignored).
  Grading re-runs the FAIL_TO_PASS tests this way, so a fix that exists only under the runner's
  configuration fails there.

A run counts only if it **ended honestly**: pytest exited on its own (not killed) with an exit code
equal to the session status in its record and consistent with it (0: every test passed or was
skipped; 1: some failed; 2: collection errors; 5: nothing collected), the record's failure count
equals pytest's own, every collected item reported, exactly one signed record came through the
pipe and nothing else (no refusal of the audit hook), its ``tampered`` list is empty, and no
process of the run user outlived pytest. After pytest exits every process of the run user is
killed before the record is read. Anything else is status ``crash`` and its ``tests`` are empty:
a crash never counts as a pass.

Example (validation or grading, on a fresh container whose ``/repo`` holds the state)::

    ini = pytest_ini(sandbox, artifact.test_files)          # from a state whose config is the repository's own
    ...                                                      # build the state to test
    run = harness_run(sandbox, artifact.test_files, expected=expected, config=ini, timeout=300)
    if run.status in HONEST_STATUSES and not run.missing: ...

``harness_run`` never raises for anything the tested code does; it raises ``ValueError`` for a
test path that is not a plain relative path inside ``/repo`` (callers check artifacts first).
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import re
import secrets
import shlex
import tarfile
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparring import pyast
from sparring.envs.swe.testing import TestRun, parse_pytest_summary

__all__ = ["HONEST_STATUSES", "RUN_UID", "harness_run", "pytest_ini"]

#: The account pytest runs as: ``nobody`` exists in every Debian image, owns no file of ``/repo``
#: and, unlike the sandbox user, has no idle shell of the command server that could be taken for
#: a process the run left behind.
RUN_UID = 65534

#: Plugins named explicitly with ``-p`` (autoloading is off); left out where the image lacks them.
PLUGINS = ("pytest_timeout",)

#: Statuses of a run that ended honestly: its ``tests`` are what pytest reported.
HONEST_STATUSES = ("passed", "failed", "collection_error", "no_tests")

#: Largest record read back (one line of JSON per run; a few hundred bytes per test).
MAX_RECORD_BYTES = 32 << 20

#: Bytes of pytest's terminal output kept in :attr:`TestRun.output` (the end, where the summary is).
OUTPUT_TAIL = 8000

_BOOT = Path(__file__).with_name("harness_boot.py")
_GUARD = Path(__file__).with_name("harness_guard.py")
_CONFIG = Path(__file__).with_name("harness_config.py")
#: The plain run's home and working directory: the sandbox user's, lent to the run's user while it runs.
PLAIN_HOME = "/home/sparring"
#: What the plain configuration adds to pytest's arguments (see the module docstring).
PLAIN_ARGS = ("-s", "--assert=plain", "--import-mode=append", *("-p", "no:warnings", "-p", "no:faulthandler"),
              *("-p", "no:unraisableexception", "-p", "no:threadexception"))  # fmt: skip
#: Arguments of the plain run that the boot drops where the test files name the fixture.
PLAIN_UNLESS_USED = {"caplog": ["-p", "no:logging"]}
#: Arguments of the plain run given only when the plugin is there: its timer never uses a signal.
PLAIN_PLUGIN_ARGS = {"pytest_timeout": ["--timeout=0", "--timeout-method=thread"]}
_WATCH = Path(__file__).with_name("harness_watch.py")
_CHANGED = 97  # harness_boot.CHANGED: the run refused to start (a pinned conftest.py or __init__.py differs)
_ROOT = "/repo"
_STATUS_LINE = re.compile(r"^sparring-harness rc=(\d+) strays=(\d+) alive=(\d+) bytes=(\d+)$", re.M)
_PLAIN_PATH = re.compile(r"^[\w.+@-][\w./+@-]*(::.*)?$")


def _check_paths(test_files: Sequence[str]) -> list[str]:
    paths = [str(f).removeprefix("./") for f in test_files]
    for p in paths:
        file = p.split("::")[0]
        if not _PLAIN_PATH.match(p) or file.startswith("/") or ".." in file.split("/") or "\n" in p or "\0" in p:
            raise ValueError(f"not a plain test path inside {_ROOT}: {p!r}")
    if not paths:
        raise ValueError("no test files given")
    return paths


def _harness_tar(folder: str, files: dict[str, bytes], names: dict[str, str] | None = None) -> bytes:
    """The harness's folder: root's (0755, files 0644), private ``priv/`` (0700, files 0600), the run's ``home/``.

    With ``names`` (the plain run: file -> the random name the run opens it by) the folder is 0711,
    so the run's user cannot list it, each such file goes in under its random name too, and the
    files under their own names are root's alone (0600): what the run reads cannot be found by name.
    """
    buf = io.BytesIO()
    now = int(time.time())
    with tarfile.open(fileobj=buf, mode="w") as tar:
        top = 0o711 if names is not None else 0o755
        for name, mode, uid in ((folder, top, 0), (f"{folder}/priv", 0o700, 0), (f"{folder}/home", 0o700, RUN_UID)):
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.uid, info.gid, info.mtime = tarfile.DIRTYPE, mode, uid, uid, now
            tar.addfile(info)
        entries = [(n, d, 0o600 if n.startswith("priv/") or names is not None else 0o644) for n, d in files.items()]
        renamed = names or {}
        entries += [(renamed[n], d, 0o644) for n, d in files.items() if n in renamed]
        for name, data, mode in entries:
            info = tarfile.TarInfo(f"{folder}/{name}")
            info.size, info.mode, info.mtime = len(data), mode, now
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _put_boot(
    sandbox: Any,
    token: str,
    files: dict[str, bytes] | None = None,
    base: str = "/tmp",
    names: dict[str, str] | None = None,
) -> str:
    """Copy the harness's folder (``boot.py``, its parts, ``files``) into the container's ``base``; returns its path."""
    folder = f"sparring-harness-{token}" if base == "/tmp" else token
    parts = {"boot.py": _BOOT, "config.py": _CONFIG, "guard.py": _GUARD, "watch.py": _WATCH}
    boot = {name: path.read_bytes() for name, path in parts.items()}
    sandbox.put_archive(base, _harness_tar(folder, {**boot, **(files or {})}, names))
    return f"{base}/{folder}"


def pytest_ini(sandbox: Any, test_files: Sequence[str]) -> str:
    """The harness's ini for ``test_files``, from the repository configuration in the container's ``/repo`` now.

    Call it on a state whose configuration files are the repository's own (the image's, with the
    bug applied: validation refuses a bug that changes one), before anything an agent wrote is
    copied in. It runs as root, reading the files as data only.

    Raises:
        RuntimeError: The configuration could not be read.
    """
    paths = _check_paths(test_files)
    folder = _put_boot(sandbox, uuid.uuid4().hex)
    try:
        r = sandbox.exec(
            f"python3 -I {folder}/boot.py ini {_ROOT} " + " ".join(shlex.quote(p) for p in paths),
            workdir="/",
            user="root",
            timeout=60,
        )
    finally:
        sandbox.exec(f"rm -rf {folder}", workdir="/", user="root", timeout=30)
    if not r.ok or "[pytest]" not in r.stdout:
        raise RuntimeError(f"could not read the repository's pytest configuration: {(r.stderr or r.stdout)[-300:]}")
    return r.stdout


@dataclass(frozen=True)
class _Plain:
    """Where and as whom the plain run goes (random each run): see :func:`harness_run`."""

    uid: int
    boot: str
    tmp: str
    spec: str = "run.json"
    pythonpath: str = "pythonpath"
    group: int = 0
    fifo: str = "record.fifo"
    home: str = PLAIN_HOME


def _launch(seed: str, uid: int, plain: _Plain | None) -> str:
    """The lines that start pytest: grading's configuration, or the plain one."""
    groups = "--clear-groups" if plain is None else f"--groups={plain.group}"  # a user has groups; nobody none
    run_as = f"setpriv --reuid={uid} --regid={uid} {groups} --inh-caps=-all --"
    if plain is None:
        return f"""cd {_ROOT}
install -m 600 /dev/null $F/output
env -i PATH="$PATH" LANG="${{LANG:-C.UTF-8}}" HOME=$F/home PYTHONHASHSEED={seed} PYTHONDONTWRITEBYTECODE=1 \\
  PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {run_as} \\
  python -P -s -S $F/boot.py run $F/run.json "${{PYTHONPATH:-}}" < /dev/null > $F/output 2>&1 \\
  3> $F/priv/record.fifo 4< $F/priv/secret 5< $F/priv/sources"""
    user = plain.home.rstrip("/").rpartition("/")[2]
    # The home is the run user's while it runs (a user's working directory is theirs to write); its
    # output goes through a pipe of its own to a file it cannot open (a user's `python x.py | less`),
    # and a shell starts it, which gives it what a login shell gives a command (`_`, SHLVL 1).
    return f"""printf %s "${{PYTHONPATH:-}}" > $F/{plain.pythonpath}
install -d -o {uid} -g {uid} -m 700 {plain.tmp} && install -m 600 /dev/null $F/output
cap=$(ulimit -f); [ "$cap" = unlimited ] || ulimit -f $((cap - 1 - RANDOM % 4096))  # not the container's cap
home_owner=$(stat -c %u:%g {plain.home}) && chown {uid}:{uid} {plain.home}
cd {plain.home}
env -i PATH="$PATH" LANG="${{LANG:-C.UTF-8}}" HOME={plain.home} USER={user} LOGNAME={user} SHELL=/bin/bash \\
  SHLVL=0 PWD={plain.home} TERM=xterm-256color TMPDIR={plain.tmp} PYTHONHASHSEED={seed} {run_as} \\
  bash -c 'set -o pipefail; python -P "$0" 2>&1 | cat 4<&- 5<&- & exec 4<&- 5<&-; wait $!' $F/{plain.boot} \\
  < /dev/null > $F/output 2>&1 4< $F/priv/secret 5< $F/priv/sources"""


def _listen(uid: int, plain: _Plain | None) -> str:
    """The lines that read the record's FIFO into ``priv/record``: held by pytest, or (plain) opened by it to write."""
    fifo = "$F/priv/record.fifo" if plain is None else f"$F/{plain.fifo}"
    own = "" if plain is None else f" && chown {uid} {fifo} && chmod 200 {fifo}"
    return f"mkfifo -m 600 {fifo}{own}\ncat < {fifo} > $F/priv/record & reader=$!"


def _command(
    folder: str, paths: list[str], config: str | None, hash_seed: int | None, plain: _Plain | None, hidden: bool,
    ini_name: str = "pytest.ini",
) -> str:  # fmt: skip
    uid = plain.uid if plain else RUN_UID
    live = f"ps -o pid=,stat= -u {uid} | awk '$2 !~ /^Z/ {{print $1}}'"
    ini = (
        ""
        if config is not None
        else f"python3 -I {folder}/boot.py ini {_ROOT} {' '.join(shlex.quote(p) for p in paths)} "
        f"> {folder}/{ini_name} 2> {folder}/ini.err || {{ echo 'sparring-harness: no ini'; exit 0; }}\n"
    )
    seed = "${PYTHONHASHSEED:-0}" if hash_seed is None else str(int(hash_seed))
    files = " ".join(shlex.quote(p) for p in paths)
    hide = (
        f"python3 -I $F/boot.py hide $F {_ROOT} {files} || {{ echo 'sparring-harness: hide failed'; exit 0; }}"
        if hidden
        else "printf '{}' > $F/priv/sources"
    )
    return f"""set -u
F={folder}
{ini}{hide}
{_listen(uid, plain)}
{_launch(seed, uid, plain)}
rc=$?
strays=$({live} | wc -l)
for _ in $(seq 400); do pids=$({live}); [ -z "$pids" ] && break; kill -KILL $pids 2>/dev/null; sleep 0.005; done
alive=$({live} | wc -l)
[ "$alive" = 0 ] && python3 -I $F/boot.py unhide $F
{f": 9<> $F/{plain.fifo}  # a reader still waiting for a writer gets none: end of file" if plain else ""}
{f"chown $home_owner {plain.home}" if plain else ""}
if [ "$alive" = 0 ]; then wait $reader; else kill -KILL $reader; fi
echo "sparring-harness rc=$rc strays=$strays alive=$alive bytes=$(stat -c %s $F/priv/record)"
tail -c {OUTPUT_TAIL} $F/output >&2
"""


def harness_run(
    sandbox: Any,
    test_files: Sequence[str],
    *,
    expected: Iterable[str] = (),
    timeout: float = 300.0,
    config: str | None = None,
    hash_seed: int | None = None,
    test_timeout: float | None = None,
    plain: bool = False,
    processes: bool = False,
    hidden: bool = True,
) -> TestRun:
    """Run pytest on ``test_files`` in ``sandbox``'s ``/repo`` the harness's way, and judge how it ended.

    Args:
        sandbox: A started :class:`~sparring.containers.sandbox.Sandbox` holding the state to test.
        test_files: Test files (or node ids ``file::test``), relative to ``/repo``.
        expected: Test ids that must appear; those absent are listed in ``missing``.
        timeout: Seconds for the whole run; past it the run is killed (status ``timeout``).
        config: The ini from :func:`pytest_ini`, read from a state the caller vouches for; None
            reads it from ``/repo`` as it is now (fine where nothing an agent wrote is there).
        hash_seed: ``PYTHONHASHSEED`` of the run; None keeps the image's (0), which test ids rely on.
        test_timeout: Seconds one test may take (pytest-timeout's ``signal`` method: the test
            fails and is listed in :attr:`TestRun.timed_out_tests`); None sets no per-test limit.
        plain: Run in the plain configuration (the module docstring): no capture, no logging or
            warnings plugin, no assertion rewriting, no signal timer (``test_timeout`` is not used),
            another home, working directory, temporary folder, command line and environment.
        processes: The repository's code may start processes (its ``processes`` capability is
            allowed: :func:`~sparring.envs.swe.capabilities.processes_allowed`); else the guard
            refuses it, and a test whose code under test starts one fails.
        hidden: Hide what the run may not read (the test files, the history, ``/tmp``: the module
            docstring) and refuse the repository's code what it may only be refused without a
            trace (opening a test file, starting a process). False (grading's first run only) lets
            the run read and start what it likes: a refusal the code can catch would tell every
            such run from a user's process, so it belongs to one of grading's two runs, the plain
            one, which is always hidden.

    Returns:
        The :class:`TestRun`. ``status`` is ``crash`` (with ``detail`` saying why, and no
        ``tests``) for any run that did not end honestly (see the module docstring); ``timeout``
        when it ran out of time; else ``passed``, ``failed``, ``collection_error`` or ``no_tests``
        (:data:`HONEST_STATUSES`).

    Raises:
        ValueError: A test path is not a plain relative path inside ``/repo``.
    """
    paths = _check_paths(test_files)
    token = uuid.uuid4().hex
    # the plain run's user, folder, files and TMPDIR are random, nowhere near /tmp or the word "harness";
    # its folder cannot be listed, so what the run reads there cannot be found by name
    names = None
    if plain:
        names = {n: f"{secrets.token_hex(6)}{n[n.rindex('.'):] if '.' in n else '.txt'}"
                 for n in ("run.json", "pytest.ini", "config.py", "guard.py", "watch.py", "pythonpath")}  # fmt: skip
        names["run.json"] = f"{token[16:24]}.json"
    place = (
        # the spec beside the script, under its name: the command line holds the script alone, as a user's would
        _Plain(secrets.randbelow(40000) + 20000, f"{token[16:24]}.py", f"/var/tmp/{token[24:]}", names["run.json"],
               names["pythonpath"], secrets.randbelow(40000) + 60000, f"{secrets.token_hex(6)}")  # fmt: skip
        if names is not None
        else None
    )
    base = "/var/tmp" if plain else "/tmp"
    folder = f"{base}/{token[:16]}" if plain else f"/tmp/sparring-harness-{token}"
    ini_name = names["pytest.ini"] if names else "pytest.ini"
    timer = ("--timeout", f"{test_timeout:g}", "--timeout-method", "signal") if test_timeout and not plain else ()
    args = [
        *("-c", f"{folder}/{ini_name}", f"--rootdir={_ROOT}", f"--confcutdir={_ROOT}"),
        *("-p", "no:cacheprovider", "--color=no", "-o", "console_output_style=classic", "--tb=no"),
        *(PLAIN_ARGS if plain else timer),
        *(f"{_ROOT}/{p}" for p in paths),
    ]
    spec = {"token": token, "root": _ROOT, "plugins": list(PLUGINS), "args": args, "files": paths,
            "ini": f"{folder}/{ini_name}", "plain": plain, "processes": processes,
            "hidden": hidden or plain}  # fmt: skip
    if names is not None and place is not None:
        spec |= {"unless_used": PLAIN_UNLESS_USED, "plugin_args": PLAIN_PLUGIN_ARGS, "pythonpath": names["pythonpath"],
                 "parts": {n: names[n] for n in ("config.py", "guard.py", "watch.py")},
                 "record": f"{folder}/{place.fifo}"}  # fmt: skip
        names["boot.py"] = place.boot  # the script the run starts: boot.py under its random name
    secret = secrets.token_bytes(32)  # signs the record; never on a command line (those are world-readable)
    files = {"run.json": json.dumps(spec).encode(), "priv/secret": secret}
    if config is not None:
        files["pytest.ini"] = config.encode()
    _put_boot(sandbox, token[:16] if plain else token, files, base, names)
    command = _command(folder, paths, config, hash_seed, place, hidden or plain, ini_name)
    result = sandbox.exec(command, workdir="/", user="root", timeout=timeout)
    record: bytes | None = None
    status = _STATUS_LINE.search(result.stdout)
    if status and int(status.group(4)) <= MAX_RECORD_BYTES:
        try:
            record = sandbox.get_file(f"{folder}/priv/record")
        except Exception:  # the container broke meanwhile: judged below as a crash
            record = None
    # After a timeout the command's process group is gone, but a process of the run may have left it.
    uid, gone = (place.uid, f"{folder} {place.tmp}") if place else (RUN_UID, folder)
    sandbox.exec(
        f"pkill -KILL -u {uid}; python3 -I {folder}/boot.py unhide {folder} 2>/dev/null; rm -rf {gone}",
        workdir="/",
        user="root",
        timeout=30,
    )
    run = _judge(result, status, record, token, secret)
    run.missing = sorted(set(expected) - set(run.tests))
    return run


def _crash(run: TestRun, why: str) -> TestRun:
    run.status, run.detail, run.tests, run.collection_errors, run.timed_out_tests = "crash", why, {}, [], []
    return run


def _judge(result: Any, status: re.Match[str] | None, record_bytes: bytes | None, token: str, secret: bytes) -> TestRun:
    """The :class:`TestRun` of a finished command: the record if the run ended honestly, else ``crash``."""
    output = result.stderr
    run = TestRun(status="crash", seconds=float(result.seconds), output=output, reported=parse_pytest_summary(output))
    if result.timed_out:
        run.status = "timeout"
        run.detail = f"the test run did not finish within the time limit ({result.seconds:.0f} s)"
        return run
    if status is None:
        why = (result.stdout + result.stderr).strip()[-300:]
        return _crash(run, f"the harness's run did not complete (exit {result.exit_code}): {why}")
    rc, strays, alive, size = (int(g) for g in status.groups())
    run.exit_code = rc
    if size > MAX_RECORD_BYTES:
        return _crash(run, f"the run's record holds {size} bytes, over the {MAX_RECORD_BYTES} read back")
    if rc >= 128:
        return _crash(run, f"pytest was killed by signal {rc - 128}")
    if rc == _CHANGED:
        pinned = re.search(r"sparring-harness: (.*)", output)
        return _crash(run, pinned.group(1) if pinned else "files pytest loads on its own differ from the repository's")
    if strays or alive:
        return _crash(run, f"{strays} process(es) of the test run were still running after pytest exited (killed)")
    record, why = _parse_record(record_bytes, token, secret)
    if record is None:
        return _crash(run, why)
    if record["exitstatus"] != rc:
        return _crash(run, f"pytest exited with {rc}, but its session ended with status {record['exitstatus']}")
    if record["failed_reports"] != record["testsfailed"]:
        return _crash(
            run, f"the recorder saw {record['failed_reports']} failure(s), pytest counted {record['testsfailed']}"
        )
    tests: dict[str, str] = record["tests"]
    bad = sum(s in ("failed", "error") for s in tests.values())
    unreported = [i for i in record["items"] if i not in tests]
    if rc in (0, 1) and unreported:
        return _crash(run, f"{len(unreported)} collected test(s) never reported, e.g. {unreported[0]}")
    run.tests, run.collection_errors, run.timed_out_tests = tests, record["collection_errors"], record["timeouts"]
    if rc == 0 and (bad or not tests or record["collection_errors"]):
        return _crash(run, f"pytest exited with 0 although {bad} test(s) failed or nothing ran")
    if rc == 1 and not bad:
        return _crash(run, "pytest exited with 1 (tests failed) but no test failed")
    if rc == 2:
        if not record["collection_errors"]:
            return _crash(run, "pytest was interrupted")
        run.status = "collection_error"
        run.detail = f"{len(run.collection_errors)} test module(s) could not be collected"
        return run
    if rc == 5:
        run.status, run.detail = "no_tests", "pytest collected no tests"
        return run
    if rc not in (0, 1):
        return _crash(run, f"pytest ended with exit code {rc} (internal or usage error)")
    run.status = "passed" if rc == 0 else "failed"
    run.detail = "" if rc == 0 else f"{bad} test(s) failed or errored"
    return run


def _text(value: Any) -> str:
    """``value`` as one line of at most 300 characters (bytes decoded leniently)."""
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return text.replace("\n", " ")[:300]


def _parse_record(data: bytes | None, token: str, secret: bytes) -> tuple[dict[str, Any] | None, str]:
    """The run's record if the pipe carried exactly one record signed by this run's recorder, else (None, why)."""
    if not data:
        return None, "pytest ended without writing its record (killed, exited early, or its descriptor was closed)"
    refused = [line for line in data.split(b"\n") if line.startswith(b"refused ")]
    if refused:  # written by the audit hook (harness_guard.py) the moment the tested code tried
        return None, f"tampering: the tested code reached for the test run's internals: {_text(refused[0])}"
    lines = data.split(b"\n")
    if len(lines) != 2 or lines[1]:
        return None, "the record's pipe carried more than one record, or data besides it"
    mac, _, payload = lines[0].partition(b" ")
    expected_mac = hmac.new(secret, payload, hashlib.sha256).hexdigest().encode()
    if not hmac.compare_digest(mac, expected_mac):
        return None, "the record is not signed by the harness's recorder"
    try:
        record = pyast.literal_eval(payload.decode("utf-8"))
    except (ValueError, SyntaxError, UnicodeDecodeError, MemoryError, RecursionError):
        return None, "the record is not a literal"
    fields = {"token": str, "exitstatus": int, "testsfailed": int, "failed_reports": int, "items": list,
              "tests": dict, "collection_errors": list, "timeouts": list, "tampered": list}  # fmt: skip
    if not isinstance(record, dict) or any(not isinstance(record.get(k), t) for k, t in fields.items()):
        return None, "the record lacks a field or has one of the wrong type"
    if record["token"] != token:
        return None, "the record belongs to another run"
    if record["tampered"]:
        return None, f"tampering: the run's checks found a change: {_text(record['tampered'][0])}"
    statuses = ("passed", "failed", "error", "skipped")
    if not all(isinstance(k, str) and v in statuses for k, v in record["tests"].items()):
        return None, "the record holds a status that is not passed/failed/error/skipped"
    return record, ""
