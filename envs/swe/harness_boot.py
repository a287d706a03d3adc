"""The harness's half of a test run, inside the container (see :mod:`sparring.envs.swe.harness`).

The host never imports this file: :func:`~sparring.envs.swe.harness.harness_run` copies it into a
root-owned folder of the container and runs it. It needs the standard library, and pytest where it
runs the tests. Two commands:

``python3 -I harness_boot.py ini ROOT FILE...`` (as root, on a state whose pytest configuration is
    the repository's own) prints the harness's ``pytest.ini``: the options of the configuration
    file pytest would pick for FILE... (searched from their common folder up to ROOT), without the
    ones that load code or write files (``harness_config.DROPPED_OPTIONS``), relative ``pythonpath`` entries
    made absolute. The repository's file is read as data and never used by pytest itself. The ini
    also pins (by hash) every ``conftest.py`` and the test folders' ``__init__.py``: a run whose
    tree differs there refuses to start (exit :data:`CHANGED`). This half is ``config.py``
    (``harness_config.py``), beside this file and loaded by path.

``python -P harness_boot.py SPEC`` runs the same in the plain configuration the SPEC describes
    (``harness.PLAIN_ARGS``; the image's PYTHONPATH in the file beside SPEC that SPEC names): see
    :func:`plain_args`.

``python -P -s -S harness_boot.py run SPEC IMAGE_PYTHONPATH`` (as the run user) runs pytest with
    ``site`` off (no ``.pth`` file, no ``sitecustomize``/``usercustomize``), no user site and no
    script folder on ``sys.path``; it adds the interpreter's site-packages without processing its
    ``.pth`` files, imports pytest and the plugins SPEC names *before* the repository is on
    ``sys.path`` (so no module of the repository can shadow them), then puts ROOT and the image's
    PYTHONPATH entries first, as ``python -m pytest`` would, and runs ``pytest.main`` with those
    plugins and the recorder below as plugin objects (none is imported by name once the
    repository is on the path).

Before the repository is on ``sys.path`` the bootstrap loads ``guard.py`` (``harness_guard.py``)
and installs its audit hook, and loads ``watch.py`` (``harness_watch.py``), whose snapshot of the
builtins and the loaded modules is taken then; the recorder checks the guard's integrity snapshot
at every report, and the watch at collection's end, before each test's call, after its teardown
and at unconfigure.

The recorder keeps every report pytest gives (collection and test phases) and, when pytest
unconfigures, writes ONE line to file descriptor 3 (the plain run holds none while the tests run:
it opens its FIFO, whose random name only the spec holds, to write): an HMAC and a Python literal
holding the token of the run, pytest's exit status and failure count, the collected items and each
test's status. The harness reads it through a FIFO only root can read, so no other process can
rewrite what was written, only add to it, which the harness refuses; the HMAC's key came through
descriptor 4, read and closed before pytest imported anything of the repository, so a record
written by anything but the recorder does not verify.
"""

import json
import os
import sys

#: Modules imported before the repository is on ``sys.path``, when present: pytest's own
#: dependencies, which pytest imports lazily by name, and ``unittest``, whose assertion methods
#: tests rely on (held by ``harness_watch`` from before any repository code runs).
PRELOAD = ("pluggy", "iniconfig", "packaging", "packaging.version", "_pytest._py.path", "pygments", "unittest")


# ------------------------------------------------------------------------------------------ running

_SEVERITY = {"skipped": 0, "passed": 1, "failed": 2, "error": 3}


def _status(report):
    """A test phase's report as one of passed / failed / error / skipped, or None when it says nothing."""
    if report.when == "call":
        if report.passed:
            return "passed"  # a non-strict xpass too, as pytest's JUnit report has it
        return "failed" if report.failed else "skipped"  # an xfail counts as skipped
    if report.failed:
        return "error"  # setup or teardown failed
    return "skipped" if report.skipped else None


def sign(secret, payload, sha256):
    """HMAC-SHA256 of ``payload`` under ``secret`` (both bytes), hex; ``sha256`` is hashlib's, captured early."""
    key = sha256(secret).digest() if len(secret) > 64 else secret.ljust(64, b"\0")
    inner = sha256(bytes(b ^ 0x36 for b in key) + payload).digest()
    return sha256(bytes(b ^ 0x5C for b in key) + inner).hexdigest()


def make_recorder(pytest, fd, token, secret, write, close, sha256, guards):
    """The plugin object that records every report and writes the signed record to ``fd`` at unconfigure.

    ``write``, ``close`` and ``sha256`` are the functions as they were before the tested code could
    replace module attributes, and so are the builtins and helpers the hooks use (bound here, not
    looked up in modules the tested code could change); the record is a Python literal made by
    ``repr`` of builtin types. The secret was read from a descriptor that is closed before any
    tested code runs. The state lives in this function's closure, not in attributes of the plugin
    object pytest holds. ``guards`` is (:class:`harness_guard.Integrity`, :class:`harness_watch.Watch`):
    the first is checked at every report and at unconfigure, the second as the module docstring
    says; what they find goes into the record's ``tampered`` list, and the harness does not count
    such a run. A call phase reported passed must have been seen to return by the recorder's own
    innermost ``pytest_runtest_call`` wrapper.
    """
    integrity, watch = guards
    _repr, _int, _sorted, _set, _hasattr, _len = repr, int, sorted, set, hasattr, len
    status_of, severity, signer = _status, dict(_SEVERITY), sign
    base_exception, outcome_exceptions = BaseException, _outcome_exceptions(pytest)
    state = {"session": None, "pm": None, "items": [], "failed_reports": 0}
    tests, collection_errors, timeouts, tampered, observed = {}, [], _set(), [], {}

    def note(problems):
        for p in problems:
            if p not in tampered and _len(tampered) < 50:
                tampered.append(p)

    def set_status(nodeid, status):
        previous = tests.get(nodeid)
        if previous is None or severity[status] > severity[previous]:
            tests[nodeid] = status

    def count(report):
        # exactly how pytest's Session counts ``testsfailed``: the record must agree with it
        if report.failed and not _hasattr(report, "wasxfail"):
            state["failed_reports"] += 1

    class Recorder:
        def pytest_sessionstart(self, session):
            state["session"], state["pm"] = session, session.config.pluginmanager

        def pytest_collectreport(self, report):
            note(integrity.check(state["pm"], report, full=False))
            count(report)
            if report.failed:
                nodeid = report.nodeid or "."
                collection_errors.append(nodeid)
                set_status(nodeid, "error")
            elif report.skipped and report.nodeid:
                set_status(report.nodeid, "skipped")  # a module skipped as a whole

        def pytest_collection_finish(self, session):
            state["items"] = [item.nodeid for item in session.items]
            note(integrity.snapshot(state["pm"]))
            note(watch.check())  # before compiling the test files: the builtins and ast are still the ones held
            note(watch.collected(session.items, session.config))

        @pytest.hookimpl(wrapper=True, trylast=True)
        def pytest_runtest_call(self, item):
            # innermost wrapper: what the test itself did, before any other hook sees it
            note(watch.before_call(item))
            try:
                result = yield
            except outcome_exceptions:
                observed[item.nodeid] = observed.get(item.nodeid) or "skipped"
                raise
            except base_exception:
                observed[item.nodeid] = "raised"
                raise
            observed.setdefault(item.nodeid, "returned")
            return result

        def pytest_runtest_logreport(self, report):
            note(integrity.check(state["pm"], report, full=report.when == "call"))
            if report.when == "teardown":  # after the test's fixtures (monkeypatch) undid what the test did
                note(watch.check(classes=False))  # classes: at each garbage collection (harness_watch.py)
            count(report)
            status = status_of(report)
            if status == "passed" and observed.get(report.nodeid) != "returned":
                note([f"{report.nodeid} reported passed, but its test {observed.get(report.nodeid, 'never ran')}"])
            if status is not None:
                set_status(report.nodeid, status)
            if report.failed and "from pytest-timeout" in (report.longreprtext or ""):
                timeouts.add(report.nodeid)

        @pytest.hookimpl(trylast=True)
        def pytest_unconfigure(self, config):
            note(integrity.check(state["pm"]) + watch.check())
            session = state["session"]
            record = {
                "token": token,
                "exitstatus": None if session is None else _int(session.exitstatus),
                "testsfailed": None if session is None else session.testsfailed,
                "testscollected": None if session is None else session.testscollected,
                "failed_reports": state["failed_reports"],
                "items": state["items"],
                "tests": tests,
                "collection_errors": _sorted(_set(collection_errors)),
                "timeouts": _sorted(timeouts),
                "tampered": tampered,
            }
            payload = _repr(record).encode()
            view = memoryview(signer(secret, payload, sha256).encode() + b" " + payload + b"\n")
            while view:
                view = view[write(fd, view) :]
            close(fd)

    return Recorder()


def _outcome_exceptions(pytest):
    """pytest's skip and xfail exceptions: a test that raises one did not fail (nor pass)."""
    from _pytest.outcomes import Skipped, XFailed

    return (Skipped, XFailed)


#: Exit status of a run that refused to start because a pinned file differs (pytest never uses it).
CHANGED = 97

#: Descriptors the harness opens for the run: the record's pipe, the secret that signs it, and the
#: test files' contents (``hide`` below).
RECORD_FD, SECRET_FD, SOURCES_FD = 3, 4, 5

# ------------------------------------------------------------------- what the run's user cannot read

#: Folders each of whose entries (but the harness's own folder) the run's user cannot read during the
#: run: what root or the sandbox user left there (the bug artifact's folder with its diffs).
PRIVATE_FOLDERS = ("/tmp", "/var/tmp")
#: The repository's history under ROOT (it holds the code before the bug and the tests unweakened).
HISTORY = ".git"
#: Largest test file whose contents go to the run.
MAX_SOURCE_BYTES = 16 << 20


def _open_nofollow(path):
    """A descriptor of the file or folder ``path``, opened without following a link at any step, or None."""
    parts = [p for p in path.split("/") if p]
    try:
        fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    for i, part in enumerate(parts):
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        try:
            step = os.open(part, flags if i == len(parts) - 1 else flags | os.O_DIRECTORY, dir_fd=fd)
        except OSError:
            step = None
        os.close(fd)
        if step is None:
            return None
        fd = step
    return fd


def _read_all(fd):
    data = b""
    while len(data) <= MAX_SOURCE_BYTES and (chunk := os.read(fd, 1 << 16)):
        data += chunk
    return data


def hide(folder, root, files):
    """As root before the run: take the test files' contents, then make them and the private places unreadable.

    The run's user (and any process it starts) cannot then read the test files (their expected
    values), the repository's history (:data:`HISTORY`) or what lies in :data:`PRIVATE_FOLDERS`: group
    and other lose every permission bit. The files' contents go to ``FOLDER/priv/sources``, which
    the run gets on descriptor :data:`SOURCES_FD` (read before any of the repository's code runs);
    the modes taken away go to ``FOLDER/priv/hidden``, which :func:`unhide` gives back. Every path
    is opened without following links (a link is left alone), and changed through its descriptor.
    """
    import stat

    held, sources, seen = [], {}, set()

    def take(path, read):
        fd = _open_nofollow(path)
        if fd is None:
            return
        try:
            found = os.fstat(fd)
            regular, folder_ = stat.S_ISREG(found.st_mode), stat.S_ISDIR(found.st_mode)
            if not (regular or folder_ and not read):
                return
            if (found.st_dev, found.st_ino) in seen:
                return  # one file under two names (``././x``, a hard link): its mode is taken once
            seen.add((found.st_dev, found.st_ino))
            if read:
                data = _read_all(fd)
                if len(data) <= MAX_SOURCE_BYTES:  # a larger one is hidden all the same, and not imported
                    sources[path] = [found.st_dev, found.st_ino, data.decode("latin-1")]
            mode = stat.S_IMODE(found.st_mode)
            held.append([path, found.st_dev, found.st_ino, mode])
            os.fchmod(fd, mode & ~0o077)
        finally:
            os.close(fd)

    own = os.path.abspath(folder)
    try:
        for rel in dict.fromkeys(f.split("::")[0] for f in files):
            take(os.path.normpath(os.path.join(root, rel)), True)
        take(os.path.join(root, HISTORY), False)
        for place in PRIVATE_FOLDERS:
            try:
                names = sorted(os.listdir(place))
            except OSError:
                continue
            for name in names:
                if os.path.join(place, name) != own:
                    take(os.path.join(place, name), False)
    finally:
        _write_private(os.path.join(folder, "priv", "hidden"), json.dumps(held))
    _write_private(os.path.join(folder, "priv", "sources"), json.dumps(sources))
    return 0


def unhide(folder):
    """As root after the run (its processes killed): give back the modes :func:`hide` took away."""
    try:
        with open(os.path.join(folder, "priv", "hidden"), encoding="utf-8") as f:
            held = json.load(f)
    except (OSError, ValueError):
        return 0
    for path, dev, ino, mode in reversed(held):
        fd = _open_nofollow(path)
        if fd is None:
            continue
        try:
            found = os.fstat(fd)
            if (found.st_dev, found.st_ino) == (dev, ino):
                os.fchmod(fd, mode)
        finally:
            os.close(fd)
    return 0


def _write_private(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def read_sources(fd):
    """The test files' contents handed over on ``fd`` by :func:`hide`: path -> (device, inode, bytes); {} if none."""
    try:
        data = _read_all(fd)
        os.close(fd)
    except OSError:  # not open: a run started without it imports no test module (they are unreadable)
        return {}
    try:
        return {p: (dev, ino, text.encode("latin-1")) for p, (dev, ino, text) in json.loads(data or b"{}").items()}
    except (ValueError, TypeError):
        return {}


def make_test_importer(sources, rewrite, compile_test, hookimpl=None):
    """The finder and loader of the run's test modules, from ``sources`` (their files cannot be read).

    It answers for a module whose file (found as the path-based finder finds it) is one of the test
    files by its identity, and compiles it from the contents read before the run: with pytest's
    assertion rewriting for the run's configuration where ``rewrite`` (as pytest's own import hook
    does for a test file named on the command line), else plainly. It is put first on
    ``sys.meta_path`` when pytest configures (after pytest has put its own hook there); it offers
    no source to ``linecache``, so a failure's report shows no line of the test file. It is also a
    plugin (``hookimpl``: ``pytest.hookimpl``): first among ``pytest_load_initial_conftests`` (so a
    ``conftest.py`` that imports a test module finds it) and at ``pytest_configure`` it takes the
    configuration and puts the finder first.
    """
    import importlib.machinery
    import importlib.util

    find, located = importlib.machinery.PathFinder.find_spec, importlib.util.spec_from_file_location
    stat_of, meta_path, run_code = os.stat, sys.meta_path, exec  # bound before any of the repository's code runs
    by_file = {(dev, ino): data for dev, ino, data in sources.values()}
    stems = {os.path.basename(p).rpartition(".")[0] or os.path.basename(p) for p in sources}
    configured = []

    def source_of(origin):
        try:
            found = stat_of(origin)
        except (OSError, ValueError, TypeError):
            return None
        return by_file.get((found.st_dev, found.st_ino))

    class TestModules:
        def find_spec(self, name, path=None, target=None):
            if name.rpartition(".")[2] not in stems:
                return None
            spec = find(name, path, target)
            origin = getattr(spec, "origin", None)
            if not isinstance(origin, str) or source_of(origin) is None:
                return None
            return located(name, origin, loader=self)

        def create_module(self, spec):
            return None

        def exec_module(self, module):
            origin = module.__spec__.origin
            source = source_of(origin)
            if source is None:
                raise ImportError(f"{origin} is not one of the run's test files", path=origin)
            code = compile_test(origin, source, configured[0] if rewrite and configured else None)
            run_code(code, module.__dict__)

        def pytest_configure(self, config):
            first(config)

        def pytest_load_initial_conftests(self, early_config):
            first(early_config)

    def first(config):
        configured[:] = [config]
        while importer in meta_path:
            meta_path.remove(importer)
        meta_path.insert(0, importer)

    if hookimpl is not None:
        TestModules.pytest_load_initial_conftests = hookimpl(tryfirst=True)(TestModules.pytest_load_initial_conftests)
    importer = TestModules()
    return importer


def _load_part(file, name):
    """A part of the harness beside this file (``config.py``, ``guard.py``, ``watch.py``), loaded by path.

    Called before the repository is on the path.
    """
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), file)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def plain_args(spec, loaded, sources):
    """The plain configuration's extra pytest arguments beyond ``spec["args"]``.

    ``spec["unless_used"]`` maps a fixture to arguments given only where no test file names it
    (the logging plugin provides ``caplog``); ``spec["plugin_args"]`` a plugin to arguments given
    only where it was imported (``loaded``: names of the imported plugins). ``sources``: the test
    files' contents (:func:`read_sources`).
    """
    text = ""
    for rel in spec["files"]:
        found = sources.get(os.path.normpath(os.path.join(spec["root"], rel.split("::")[0])))
        if found is not None:
            text += found[2].decode("utf-8", "replace")
    extra = [a for fixture, args in spec.get("unless_used", {}).items() if fixture not in text for a in args]
    return extra + [a for name, args in spec.get("plugin_args", {}).items() if name in loaded for a in args]


def _plain_plugin():
    """In the plain run, what the session's start left unlike a user's process is reset before any test runs.

    The variables pytest sets are gone; bytecode is not written, as the image's ``PYTHONDONTWRITEBYTECODE`` and
    grading's first run say (the plain environment, a login's, lacks it); SIGINT and SIGQUIT have a user's handlers
    (the shell that starts the run in the background left them ignored).
    """
    import signal

    class Plain:
        def pytest_sessionstart(self, session):
            for name in ("PYTEST_VERSION", "PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTEST_ADDOPTS"):
                os.environ.pop(name, None)
            sys.dont_write_bytecode = True
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGQUIT, signal.SIG_DFL)

    return Plain()


def run(spec_path, image_pythonpath):
    """Run pytest as the module docstring says, and end the process with its exit status.

    ``image_pythonpath`` None: the plain run's, read from the file beside the spec that it names.

    The process ends with ``os._exit`` as captured here, after flushing the standard streams: no
    exit hook, finalizer or replaced ``sys.exit`` of the tested code runs after the record.
    """
    import hashlib

    _exit, write, close, sha256 = os._exit, os.write, os.close, hashlib.sha256
    if image_pythonpath is None:
        with open(spec_path, encoding="utf-8") as f:
            name = json.load(f).get("pythonpath", "pythonpath")
        with open(os.path.join(os.path.dirname(spec_path), name), encoding="utf-8") as f:
            image_pythonpath = f.read().strip()
    secret = b""
    while chunk := os.read(SECRET_FD, 4096):
        secret += chunk
    os.close(SECRET_FD)
    sources = read_sources(SOURCES_FD)
    try:
        code = _run(spec_path, image_pythonpath, secret, write, close, sha256, sources)
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
    _exit(code)


def _not_dumpable():
    """Make this process non-dumpable: a process it starts (no audit hook there) cannot read its memory.

    Through ``/proc/PID/mem``, ``process_vm_readv`` or ``ptrace`` a child of the same user could
    otherwise read this process's memory (the record's key, the test files' copy) or patch it, or
    reopen its descriptors through ``/proc/PID/fd``. Wherever a program can be started: grading's
    first run, and a repository allowed ``processes``. Elsewhere no child runs a program
    (``_no_exec``) and the process stays dumpable, so that the mark a non-dumpable process leaves
    (its ``/proc`` files are root's) is not one both of grading's runs share.
    """
    import ctypes

    if ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE, SUID_DUMP_DISABLE
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE) failed")


def _channel(path, open_, write, close, set_blocking):
    """``write(_, data)`` that opens the record's FIFO at ``path``, writes all of ``data`` and closes it.

    The plain run's way to the record: an inherited descriptor would be there for the tested code
    to find (``os.fstat(3)``) in both of grading's runs. Opened without blocking (no reader: the
    harness stopped listening, and the data is lost, which the harness takes for no record), then
    written in blocking mode. The functions are the ones captured before any tested code ran.
    """

    def send(_, data):
        fd = open_(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            set_blocking(fd, True)
            view = memoryview(data)
            while view:
                view = view[write(fd, view) :]
        finally:
            close(fd)
        return len(data)

    return send


def _no_close(_):
    return None


#: Per machine: the audit architecture and the numbers of ``execve`` and ``execveat`` (``_no_exec``).
EXEC_SYSCALLS = {"x86_64": (0xC000003E, 59, 322), "aarch64": (0xC00000B7, 221, 281)}


def _no_exec():
    """No process of the run executes a program from here on: a seccomp filter, which every child inherits.

    ``execve`` and ``execveat`` fail with EACCES (and every system call of another architecture,
    or of x86's x32 numbering, which could reach them by another number); ``no_new_privs`` is set
    too, so no set-user-id program gains anything. A process can only be forked, and a forked copy
    of this process carries the audit hook. A child started any way at all (the standard library's
    ``_posixsubprocess.fork_exec`` raises no audit event) cannot run a program that has no hook.
    """
    import ctypes
    import struct

    machine = os.uname().machine
    if machine not in EXEC_SYSCALLS:
        raise OSError(f"the harness has no seccomp filter for {machine}")
    arch, execve, execveat = EXEC_SYSCALLS[machine]
    load, equal, at_least, give = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, JGE|K, BPF_RET|K
    refuse = 0x00050000 | 13  # SECCOMP_RET_ERRNO | EACCES
    program = [
        (load, 0, 0, 4),  # the architecture
        (equal, 0, 5, arch),
        (load, 0, 0, 0),  # the system call's number
        (at_least, 3, 0, 0x40000000),  # x32
        (equal, 2, 0, execve),
        (equal, 1, 0, execveat),
        (give, 0, 0, 0x7FFF0000),  # SECCOMP_RET_ALLOW
        (give, 0, 0, refuse),
    ]
    raw = b"".join(struct.pack("HBBI", *step) for step in program)
    buffer = ctypes.create_string_buffer(raw, len(raw))

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = Program(len(program), ctypes.addressof(buffer))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    # PR_SET_NO_NEW_PRIVS, then PR_SET_SECCOMP with SECCOMP_MODE_FILTER
    if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(22, 2, ctypes.addressof(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "the seccomp filter was refused")


def _no_current_test(item, when):
    """Stands for ``_pytest.runner._update_current_test_var``: ``PYTEST_CURRENT_TEST`` is never set."""
    return None


def _run(spec_path, image_pythonpath, secret, write, close, sha256, sources):
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    parts = spec.get("parts", {})  # the plain run's random names
    config = _load_part(parts.get("config.py", "config.py"), "sparring_harness_config")
    changed = config.changed_pins(spec["root"], spec["ini"], spec["files"], {p: s[2] for p, s in sources.items()})
    if changed:
        sys.stderr.write(f"sparring-harness: pytest would load files unlike the repository's own: {changed}\n")
        return CHANGED
    if spec.get("record") is None:
        fd = RECORD_FD
        os.set_inheritable(fd, False)  # a test's subprocess does not get the record's pipe
    else:  # the plain run holds no descriptor of it while the tests run: it opens its FIFO to write
        fd, write, close = None, _channel(spec["record"], os.open, write, os.close, os.set_blocking), _no_close
    import sysconfig

    # With site off (all but the plain run) the interpreter does not know it runs in a virtual
    # environment (site reads pyvenv.cfg): take the environment beside the executable, and its folders
    # without their .pth files (with site on, as in the plain run, they are on the path already).
    prefix = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))
    in_venv = os.path.isfile(os.path.join(prefix, "pyvenv.cfg"))
    scheme = "venv" if in_venv and "venv" in sysconfig.get_scheme_names() else sysconfig.get_default_scheme()
    for key in ("purelib", "platlib"):
        folder = sysconfig.get_path(key, scheme, vars={"base": prefix, "platbase": prefix} if in_venv else None)
        if folder and folder not in sys.path:
            sys.path.append(folder)
    import importlib

    import _pytest.runner
    import pytest

    # pytest names the running test in the environment; a parametrized test's id may hold its expected
    # value (``test_ordinal[113-113th]``), and a user's process has no such variable
    _pytest.runner._update_current_test_var = _no_current_test
    args = list(spec["args"])
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:
            pass
    guard = _load_part(parts.get("guard.py", "guard.py"), "sparring_harness_guard")
    from _pytest.reports import CollectReport, TestReport

    stdlib = os.path.dirname(os.__file__)
    site = [sysconfig.get_path(k, scheme, vars={"base": prefix, "platbase": prefix} if in_venv else None)
            for k in ("purelib", "platlib")]  # fmt: skip
    here = os.path.dirname(os.path.abspath(__file__))
    folders = [p.rstrip("/") + "/" for p in [stdlib, here, *filter(None, site)]]
    tests = [os.path.normpath(os.path.join(spec["root"], f.split("::")[0])) for f in spec["files"]]
    trusted = [*tests, *(os.path.join(spec["root"], rel) for rel in config.pinned(spec["ini"]))]
    integrity = guard.Integrity((TestReport, CollectReport), guard.make_trusted(folders, trusted))
    watch_part = _load_part(parts.get("watch.py", "watch.py"), "sparring_harness_watch")
    importer = make_test_importer(sources, "--assert=plain" not in args, watch_part.compile_test, pytest.hookimpl)
    sys.meta_path.insert(0, importer)  # first again once pytest has put its own hook there (pytest_configure)
    watch = watch_part.Watch(
        guard.make_trusted(folders, trusted), guard.FRAMEWORK, tests, {p: s[2] for p, s in sources.items()}
    )
    plugins = [make_recorder(pytest, fd, spec["token"], secret, write, close, sha256, (integrity, watch)), importer]
    loaded = []
    for name in spec["plugins"]:
        try:
            # given to pytest as a module object: ``-p NAME`` would make pytest import it by name
            # (and warn that it is already imported, an error under ``filterwarnings = error``)
            plugins.append(importlib.import_module(name))
            loaded.append(name)
        except Exception:
            continue  # not installed in this image: its options stay unknown
    entries = [spec["root"], *(p for p in image_pythonpath.split(os.pathsep) if p)]
    if spec.get("plain"):
        # autoloading stays off though the variable goes at session start (the plain plugin)
        os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        plugins.append(_plain_plugin())
        args[:0] = plain_args(spec, loaded, sources)
        entries.insert(0, os.getcwd())  # as a script run from there has it (not writable by the run)
    # From here on the repository's code may run: the audit hook goes in first (see harness_guard).
    hidden = spec.get("hidden", True)  # else nothing is refused that the code could catch (harness.harness_run)
    processes = bool(spec.get("processes")) or not hidden
    if not processes:
        _no_exec()
    else:  # a child that runs a program could read or patch this process (its key to the record) else
        _not_dumpable()
    guard.install(folders, trusted, fd, write, oracle=tests if hidden else (), processes=processes)
    sys.path[:0] = list(dict.fromkeys(os.path.abspath(p) for p in entries))
    if image_pythonpath:
        os.environ["PYTHONPATH"] = image_pythonpath  # as the image gives it to the tests' subprocesses
    return int(pytest.main(args, plugins=plugins))


def main(argv):
    if argv[:1] == ["ini"] and len(argv) >= 2:
        sys.stdout.write(_load_part("config.py", "sparring_harness_config").harness_ini(argv[1], argv[2:]))
        return 0
    if argv[:1] == ["hide"] and len(argv) >= 3:
        return hide(argv[1], argv[2], argv[3:])
    if argv[:1] == ["unhide"] and len(argv) == 2:
        return unhide(argv[1])
    if argv[:1] == ["run"] and len(argv) == 3:
        return run(argv[1], argv[2])
    if not argv:  # the plain run: its spec lies beside this script, under its name
        return run(os.path.splitext(os.path.abspath(__file__))[0] + ".json", None)
    sys.stderr.write(
        "usage: harness_boot.py ini ROOT FILE... | hide FOLDER ROOT FILE... | unhide FOLDER"
        " | run SPEC IMAGE_PYTHONPATH | (nothing: SPEC beside this script)\n"
    )
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
