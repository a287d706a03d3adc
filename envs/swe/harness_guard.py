"""The harness's run-time guard inside the test process (loaded by ``harness_boot.py``, never by the host).

The graded tests import the repository's code into the pytest process, so that code could reach
pytest's objects and rewrite what they report. The AST check on added code is a first layer; a
denylist of syntax cannot be complete (pattern matching reads attributes, chains start at calls,
names are computed), so this module closes the class at run time, in two parts:

**An audit hook** (:func:`install`), added before pytest imports anything of the repository.
Python code cannot remove an audit hook, and its state lives in its closure, which nothing else
references. While *untrusted* code is on the stack (a frame whose code file is not under the
standard library, the interpreter's site-packages, the harness's folder or one of the run's
trusted test files), it refuses what reaching pytest's objects needs and cannot be done without an
audit event: frames (``sys._getframe``, ``sys._current_frames``, a traceback's ``tb_frame``, a
generator's or coroutine's frame), the garbage collector's object lists, trace and profile
functions, new audit hooks, native memory (``ctypes``), code objects made under a trusted file
name (``compile``, ``code.replace``, ``marshal``), function objects made from code, replacing the
code, defaults or class of a trusted object, and the process's ``/proc`` files (its environment,
command line and parents) and ``/sys`` (the container's cgroup limits; a path is judged by its
text and by the file system it leads to, so ``/dev/fd/../status`` is refused as
``/proc/self/status`` is). A trusted helper called by untrusted code acts for it
(``inspect.currentframe``, ``traceback.walk_stack``, anything of pytest or pluggy), so the rule
looks at the chain of trusted frames between the operation and the nearest untrusted frame: the
operation is refused when that chain is empty, when the helper untrusted code called hands frames
back (:data:`EXPOSING`: also the helpers that hand the whole stack back as text, ``traceback``'s
``extract_stack``/``format_stack``/``print_stack`` and ``logging``'s ``findCaller`` called directly, since
pytest's frames are among the callers they name), or when the chain holds a frame of the test framework,
the harness or a debugger (:data:`EXPOSING_FILES`); a trampoline that runs queued work
(:data:`TRAMPOLINES`: a thread's or a thread pool's ``run``) counts as the untrusted code that queued it.
Helpers that read a frame and hand back text about their caller alone (a logging call, which looks its
caller up, ``traceback.format_exc``, ``namedtuple``) still work for the repository's code. A refusal raises in
the tested code AND writes a line ``refused ...`` to the record's pipe at once, so the run counts as tampering even
where the code catches the error.

**The oracle test files are unreadable to untrusted code**: an ``open`` of one of the run's test files
(by its path, another path with its name, or any path to the same file), or a link made to one,
fails with ``PermissionError`` unless it is done on the main thread with only trusted code on the
stack and no trampoline (:data:`TRAMPOLINES`, a finalizer) between: work the repository queued
runs under those, whoever calls the ``open``. Nothing goes to the record: the file's expected
values are not the repair's to copy, and helpers that read a source line for show (``warnings``,
``traceback``, ``linecache``) go on without it. pytest reads the files itself on the main thread
with only trusted code on the stack (collection, assertion rewriting). The run's user cannot rename
them (their folder is not its own), and a link made to one, hard or symbolic, is refused here.

**No process started by the repository's code**: ``subprocess.Popen``, ``os.system``, ``os.exec*``,
``os.posix_spawn``, ``os.spawn*``, ``os.fork``, ``os.forkpty`` and ``pty.spawn`` fail with
``PermissionError`` unless only trusted code, with no trampoline or finalizer, is on the stack (the
code under test, or work it queued, may not start one), because a child runs with no audit hook
and could read what this hook refuses (other processes' ``/proc`` files). A repository whose
``processes`` capability is allowed (``install(processes=True)``) may, and so may every run that
hides nothing (grading's first: ``harness.harness_run(hidden=False)``). Nothing goes to the
record: a test whose code starts a process fails. Not every way raises an event
(``_posixsubprocess.fork_exec`` raises none), so the bootstrap also sets a seccomp filter under
which no process of the run executes a program, a test's neither (``harness_boot._no_exec``).

**Integrity checks** (:class:`Integrity`), made by the recorder at every report: the report
classes are the ones imported before the repository was on the path; the registered hook
implementations (plugin, function, code) are the list snapshotted when collection finished, none
from an untrusted file; a call phase reported passed was observed by the recorder's own innermost
``pytest_runtest_call`` wrapper to return, not raise; and at each call phase's report and at
unconfigure, every class and module of pytest, pluggy and pytest-timeout (and the harness) holds
the very objects it held then, and every signal handler is trusted code (a handler is given the
interrupted frame with no audit event).
"""

import errno
import itertools
import operator
import os
import signal
import sys

# Bound now, before any of the repository's code runs: the checks below compare by identity in C loops.
_IS, _CALL, _chain = operator.is_, operator.call, itertools.chain.from_iterable
#: A hook implementation's fields that the checks compare (``wrapper``: pluggy 1.1 and later).
_HOOK_FIELDS = operator.attrgetter("plugin", "function", "function.__code__", "hookwrapper", "wrapper")
_GET_IMPLS = operator.methodcaller("get_hookimpls")
#: A class's own namespace, read through ``type``'s descriptor (a metaclass's ``__dict__`` never answers for it).
_OWN_DICT = type.__dict__["__dict__"].__get__

#: Trusted helpers whose result hands frames (or tracebacks) to their caller: (file tail, function).
EXPOSING = frozenset(
    {
        ("inspect.py", "currentframe"),
        ("inspect.py", "stack"),
        ("inspect.py", "trace"),
        ("inspect.py", "getouterframes"),
        ("inspect.py", "getinnerframes"),
        ("traceback.py", "walk_stack"),
        ("traceback.py", "walk_tb"),
        # the stack handed back as text: every caller's file, function and line (pytest's frames among them)
        ("traceback.py", "extract_stack"),
        ("traceback.py", "format_stack"),
        ("traceback.py", "print_stack"),
        ("logging/__init__.py", "findCaller"),
        ("logging/__init__.py", "<lambda>"),  # logging.currentframe
        ("asyncio/base_tasks.py", "_task_get_stack"),
        ("asyncio/tasks.py", "get_stack"),
        ("threading.py", "_bootstrap_inner"),  # runs threading.settrace's function in a new thread
    }
)

#: Trusted functions that call what other code queued (a thread's target, an executor's work, an
#: event loop's callback): on a stack with no untrusted frame they stand for whoever queued it.
TRAMPOLINES = frozenset(
    {
        ("threading.py", "run"),
        ("concurrent/futures/thread.py", "run"),
        ("asyncio/events.py", "_run"),
        ("sched.py", "run"),
        ("threading.py", "_bootstrap_inner"),
    }
)

#: Trusted modules any of whose functions may hand frames to their caller's objects (debuggers,
#: tracers, profilers, interactive consoles): a frame they get is refused to untrusted callers.
EXPOSING_FILES = tuple(
    "/" + f
    for f in ("bdb.py", "pdb.py", "trace.py", "profile.py", "cProfile.py", "cgitb.py", "doctest.py", "code.py",
              "pydoc.py", "tracemalloc.py", "timeit.py", "runpy.py")
)  # fmt: skip

#: Audit events refused for untrusted code (the chain rule above applies).
FRAME_EVENTS = frozenset(
    {
        "sys._getframe",
        "sys._current_frames",
        "sys._current_exceptions",
        "sys._getframemodulename",
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "function.__new__",
    }
)

#: Attributes whose read raises ``object.__getattr__`` and hands back a frame.
FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})

#: Events judged one by one (see ``_judge``): changes to trusted objects, forged code, /proc, threads.
OTHER_EVENTS = frozenset(
    {"object.__setattr__", "object.__delattr__", "code.__new__", "compile", "marshal.loads", "marshal.load", "open",
     "os.listdir", "os.scandir"}
)  # fmt: skip

#: Events that open a file or link one by name: refused on the oracle test files (module docstring).
ORACLE_EVENTS = frozenset({"open", "os.symlink", "os.link"})

#: Events that start a process: refused while the repository's code is on the stack (module docstring).
PROCESS_EVENTS = frozenset(
    {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "pty.spawn"}
)

#: Trusted functions that run what other code queued, for the oracle rule: a trampoline, or a finalizer.
QUEUED_WORK = TRAMPOLINES | {("weakref.py", "__call__"), ("weakref.py", "_exitfunc")}

#: Events refused whenever untrusted code is anywhere on the stack (no helper needs them for it).
ALWAYS_EVENTS = frozenset({"sys.settrace", "sys.setprofile", "sys.addaudithook", "sys.monitoring.register_callback"})

#: Module name prefixes of the test framework and the harness (their frames never act for untrusted code).
FRAMEWORK = (
    "_pytest",
    "pytest",
    "pluggy",
    "pytest_timeout",
    "iniconfig",
    "__main__",
    "sparring_harness_guard",
    "sparring_harness_watch",
)


def install(trusted_prefixes, trusted_files, fd, write, oracle=(), processes=False):
    """Add the audit hook (see the module docstring); nothing keeps a reference to it but the interpreter.

    Args:
        trusted_prefixes: Folders (ending in ``/``) whose code is trusted.
        trusted_files: Absolute paths of trusted files outside them (the run's test files).
        fd: The record's descriptor, where each refusal is written as one line.
        write: ``os.write`` as captured before any tested code ran.
        oracle: Absolute paths of the run's test files, which untrusted code may not open.
        processes: The repository's code may start processes (its ``processes`` capability is allowed).
    """
    getframe, get_ident, add = sys._getframe, __import__("_thread").get_ident, sys.addaudithook
    busy = set()
    is_oracle = _oracle_test(oracle)
    proc = _procfs()
    starting = frozenset() if processes else PROCESS_EVENTS
    main = get_ident()  # installed on the main thread, before any of the repository's code runs
    trusted = make_trusted(trusted_prefixes, trusted_files)
    framework_files = tuple(_framework_folders(tuple(trusted_prefixes)))
    reported = []

    def verdict(frame, chain_rule):
        """Why the operation done by ``frame``'s code must be refused, or None."""
        chain = []
        entry_code = None
        if frame is None:
            return "no Python caller (a thread started on a builtin function)"
        while frame is not None:
            code = frame.f_code
            name = code.co_filename
            # a trampoline (a thread's or an executor's run) calls what untrusted code queued: it
            # stands for that code, whose frame is no longer on the stack. Where no helper may act for
            # untrusted code, one anywhere below counts: a trusted function queued by the repository
            # (``functools.update_wrapper`` on a thread, setting a test's ``__code__``) is its act
            if not trusted(name) or _listed(name, code.co_name, TRAMPOLINES):
                if not chain_rule:
                    return f"untrusted code at {name}:{frame.f_lineno}"
                if not chain:
                    return f"{name}:{frame.f_lineno}"
                if _framework_signal_handler(entry_code, framework_files):
                    return None  # the interpreter interrupted the untrusted code: it called nothing
                entry_file, entry = chain[-1]  # the trusted function untrusted code called
                if _listed(entry_file, entry, EXPOSING) or any(
                    f.startswith(framework_files) or f.endswith(EXPOSING_FILES) for f, _ in chain
                ):
                    return f"{name}:{frame.f_lineno} through {entry} ({entry_file})"
                return None
            if code.co_name == "_find_and_load" and name.startswith("<frozen "):
                return None  # a module's own top-level code, being imported; its importer does not see its frames
            chain.append((name, code.co_name))
            entry_code = code
            frame = frame.f_back
        return None

    def pytest_alone(frame):
        """Whether only pytest's own reading reaches here: main thread, trusted frames, nothing queued."""
        if get_ident() != main:
            return False
        while frame is not None:
            code = frame.f_code
            if not trusted(code.co_filename) or _listed(code.co_filename, code.co_name, QUEUED_WORK):
                return False
            frame = frame.f_back
        return True

    def hook(event, args):
        ident = get_ident()
        if ident in busy:
            return
        if not (
            event in FRAME_EVENTS
            or event in ALWAYS_EVENTS
            or event.startswith("ctypes.")
            or (event == "object.__getattr__" and args[1] in FRAME_ATTRIBUTES)
            or event in OTHER_EVENTS
            or event in ORACLE_EVENTS
            or event in starting
        ):
            return
        busy.add(ident)
        try:
            why, denied = None, None
            if event in starting:
                if not pytest_alone(getframe(1)):  # the repository's code, or work queued on a thread
                    denied = "the tested code may not start a process", event
            elif event in ORACLE_EVENTS and is_oracle(args[0]) and not pytest_alone(getframe(1)):
                denied = "the tested code may not read the oracle test files", args[0]
            elif event in OTHER_EVENTS or event not in ORACLE_EVENTS:
                why = _judge(event, args, getframe(1), verdict, trusted, proc)
        finally:
            busy.discard(ident)
        if denied is not None:
            raise PermissionError(errno.EACCES, *denied)
        if why is None:
            return
        line = f"refused {event}: {why}"
        if len(reported) < 20:
            reported.append(line)
            try:
                write(fd, (line.replace("\n", " ")[:500] + "\n").encode("utf-8", "replace"))
            except OSError:
                pass  # the pipe is gone: the run has no record and counts as a crash anyway
        raise RuntimeError(f"sparring harness: {line}")

    add(hook)


def _oracle_test(paths):
    """The test ``is_oracle(path)``: a path that names one of the files ``paths`` or leads to one of them.

    Taken by the file's identity, and a relative path by its name too: a path relative to a directory
    descriptor (``os.open(name, dir_fd=...)``) reaches the audit hook without its directory, and a
    link's relative target text ends in the name of the file it leads to.
    """
    names, files = set(), set()
    for path in paths:
        names.add(os.path.basename(path))
        try:
            found = os.stat(path)
        except OSError:
            continue
        files.add((found.st_dev, found.st_ino))
    stat, basename = os.stat, os.path.basename

    def is_oracle(path):
        if isinstance(path, bytes):
            path = path.decode("utf-8", "surrogateescape")
        if not isinstance(path, str) or not names:
            return False
        if not path.startswith("/") and basename(path.rstrip("/")) in names:
            return True  # an absolute path is judged by the file it leads to: another module of that name is not one
        try:
            found = stat(path)
        except (OSError, ValueError):
            return False
        return (found.st_dev, found.st_ino) in files

    return is_oracle


def make_trusted(trusted_prefixes, trusted_files):
    """The test ``trusted(filename)``: code from a file under the trusted folders, or a trusted file."""
    prefixes, files = tuple(trusted_prefixes), frozenset(trusted_files)

    def trusted(filename):
        return filename in files or filename.startswith(prefixes) or filename.startswith("<frozen ")

    return trusted


def _listed(filename, function, pairs):
    """Whether (``filename``, ``function``) is one of ``pairs`` of (file tail, function)."""
    return any(function == name and filename.endswith("/" + tail) for tail, name in pairs)


def _framework_folders(prefixes):
    """Folders of the test framework's packages under the trusted site folders, and the harness's."""
    out = []
    for prefix in prefixes:
        if prefix.endswith("/site-packages/"):
            out += [prefix + name for name in ("_pytest", "pytest", "pluggy")]
            out.append(prefix + "pytest_timeout.py")  # a module file: matched as a prefix of its path
        elif "sparring-harness-" in prefix:
            out.append(prefix.rstrip("/"))
    return out


def _framework_signal_handler(code, framework_files):
    """Whether ``code`` is the test framework's installed handler of a signal (pytest-timeout's alarm).

    The interpreter runs a handler on top of whatever frame the signal interrupted, so the untrusted
    frame below it did not call it; a handler that untrusted code installed is not the framework's
    (and the integrity checks refuse any handler that is not trusted code).
    """
    if code is None or not code.co_filename.startswith(framework_files):
        return False
    for number in (signal.SIGALRM, signal.SIGVTALRM, signal.SIGPROF):
        handler = signal.getsignal(number)
        if getattr(getattr(handler, "__func__", handler), "__code__", None) is code:
            return True
    return False


def _procfs():
    """``in_proc(path)``: whether ``path`` names a file of ``/proc``, by its text or by where it leads.

    A path can reach ``/proc`` through a link (``/dev/fd/../status`` is ``/proc/self/status``), so
    one that exists is also judged by the file system it is on, as the kernel resolves it; a
    descriptor (``open(fd)``, ``os.listdir(fd)``) by the file system of what it holds. The audit
    event of an open relative to a directory descriptor (``os.open("fd/../status", dir_fd=...)``)
    carries no directory, so a relative path that climbs (``..``) and names nothing from the working
    directory counts as one of ``/proc``: where it leads cannot be told.
    """
    stat, fstat, normpath = os.stat, os.fstat, os.path.normpath
    devices = set()
    for place in ("/proc", "/sys", "/sys/fs/cgroup"):  # /sys too: the container's cgroup limits are there
        try:
            devices.add(stat(place).st_dev)
        except OSError:
            pass

    def in_proc(path):
        if isinstance(path, int) and not isinstance(path, bool):
            try:
                return fstat(path).st_dev in devices
            except (OSError, ValueError, OverflowError):
                return False
        if isinstance(path, bytes):
            path = path.decode("utf-8", "surrogateescape")
        if not isinstance(path, str):
            return False
        text = normpath("/" + path if not path.startswith("/") else path)
        if text.startswith(("/proc", "/sys")):
            return True
        try:
            return stat(path).st_dev in devices
        except (OSError, ValueError):
            return not path.startswith("/") and ".." in path.replace("\\", "/").split("/")

    return in_proc


def _judge(event, args, frame, verdict, trusted, in_proc):
    """Why ``event`` (raised by ``frame``'s code) is refused, or None."""
    if event in FRAME_EVENTS or event.startswith("ctypes.") or event == "object.__getattr__":
        return verdict(frame, True)
    if event in ALWAYS_EVENTS:
        return verdict(frame, False) or (
            "a thread's trace function" if frame.f_code.co_name == "_bootstrap_inner" else None
        )
    if event in ("object.__setattr__", "object.__delattr__"):
        return verdict(frame, False) if _owned(args[0], trusted) else None
    if event == "code.__new__":
        return verdict(frame, False) if trusted(str(args[1])) else None
    if event == "compile":
        filename = args[1] if isinstance(args[1], str) else str(args[1])
        if not trusted(filename) or _importing(frame, "source_to_code"):
            return None
        return verdict(frame, False)
    if event in ("marshal.loads", "marshal.load"):
        return None if _importing(frame, "_compile_bytecode") else verdict(frame, False)
    if in_proc(args[0]):
        return verdict(frame, False)
    return None


def _importing(frame, name):
    """Whether ``frame`` is the import system's ``name`` called by its own ``get_code`` (which read a real file)."""
    while frame is not None and frame.f_code.co_name == "_call_with_frames_removed":
        frame = frame.f_back
    if frame is None or frame.f_code.co_name != name or not frame.f_code.co_filename.startswith("<frozen "):
        return False
    caller = frame.f_back
    return (
        caller is not None and caller.f_code.co_name == "get_code" and caller.f_code.co_filename.startswith("<frozen ")
    )


def _owned(obj, trusted):
    """Whether ``obj`` (a function, a class or an instance) belongs to trusted code."""
    code = getattr(obj, "__code__", None)
    if code is not None and hasattr(code, "co_filename"):
        return trusted(code.co_filename)
    cls = obj if isinstance(obj, type) else type(obj)
    module = sys.modules.get(getattr(cls, "__module__", None) or "")
    filename = getattr(module, "__file__", None)
    return module is not None and (filename is None or trusted(filename))


# ------------------------------------------------------------------------------------- integrity

#: Class attributes pytest itself reassigns during a run: (class, attribute).
_MUTABLE_CLASS_ATTRIBUTES = frozenset(
    {("pytestPDB", "_config"), ("pytestPDB", "_pluginmanager"), ("pytestPDB", "_recursive_debug"),
     ("pytestPDB", "_wrapped_pdb_cls"), ("pytestPDB", "_saved")}
)  # fmt: skip


class Integrity:
    """Snapshots of pytest's, pluggy's and the harness's objects, and the checks against them."""

    def __init__(self, report_classes, trusted, prefixes=FRAMEWORK):
        self._report_classes = tuple(report_classes)
        self._trusted = trusted
        self._dotted = tuple(p + "." for p in prefixes)
        # Each namespace's held values: one itemgetter per namespace reads them back, compared by identity in one
        # C loop (``_changed_modules``); ``_entries`` (namespace, key, value, owner) names what differs.
        self._getters, self._spaces, self._values, self._entries = [], [], [], []
        self._odd = []  # entries of a namespace that is no plain dict: compared one by one at every check
        self._hook_state = None  # the hook implementations as _hook_fields reads them (None: read the slow way)
        self._seen_modules = 0
        self._prefixes = prefixes
        self._modules = {}
        self._classes = {}
        self._hooks = None
        # module globals pytest itself sets around each test (the assertion rewriter's hooks)
        util = "_pytest.assertion.util"
        self._mutable = frozenset({(util, "_reprcompare"), (util, "_assertion_pass"), (util, "_config")})

    def _framework_modules(self):
        dotted = self._dotted
        return [
            (n, m)
            for n, m in list(sys.modules.items())
            if m is not None and (n in self._prefixes or n.startswith(dotted))
        ]

    def snapshot(self, pluginmanager):
        """Record the framework's modules, classes and hook implementations (at collection's end)."""
        for name, module in self._framework_modules():
            self._take(name, module)
        self._hooks = self._hookimpls(pluginmanager)
        self._hook_state = self._hook_fields(pluginmanager)
        return self.foreign_hooks(self._hooks)

    def _take(self, name, module):
        values = dict(vars(module))
        self._modules[name] = (module, values)
        space = vars(module)
        pairs = [(k, v) for k, v in values.items() if (name, k) not in self._mutable]
        self._hold(space, name, pairs, space if type(space) is dict else None)
        for value in values.values():
            # the framework's own classes (what it imports from elsewhere is that module's)
            if isinstance(value, type) and value not in self._classes and value.__module__ == name:
                self._classes[value] = dict(vars(value))
                qualname = value.__qualname__
                pairs = [(k, v) for k, v in vars(value).items() if (qualname, k) not in _MUTABLE_CLASS_ATTRIBUTES]
                self._hold(vars(value), qualname, pairs, _OWN_DICT(value))

    def _hold(self, space, owner, pairs, read):
        """Hold ``space``'s (key, value) ``pairs``, read back at each check by one ``itemgetter`` on ``read``: a plain
        dict or a class's own namespace, whose lookups no Python code answers (None: ``space`` is something else, a
        mapping whose ``__getitem__`` could answer the old value, so its entries are compared one by one)."""
        if not pairs:
            return
        entries = [(space, k, v, owner) for k, v in pairs]
        self._entries += entries
        if read is None:
            self._odd += entries
            return
        pairs.append(pairs[0])  # two keys at least: the getter then always answers a tuple
        self._getters.append(operator.itemgetter(*(k for k, _ in pairs)))
        self._spaces.append(read)
        self._values += [v for _, v in pairs]

    @staticmethod
    def _hook_fields(pluginmanager):
        """The hook callers' names, their numbers of implementations and every implementation's fields, flat (None
        where a caller or an implementation does not read this way: the checks then take the slow way alone)."""
        try:
            relay = vars(pluginmanager.hook)
            names = sorted(relay)
            # each caller's answer read once into a list: the numbers are then what was read, not what the answer's
            # __len__ says (else one implementation moved between two neighbouring callers would read the same, flat)
            impls = list(map(list, map(_GET_IMPLS, map(relay.__getitem__, names))))
            return names, list(map(len, impls)), list(_chain(map(_HOOK_FIELDS, _chain(impls))))
        except Exception:
            return None

    def _same_hook_fields(self, pluginmanager):
        """True only where every caller and implementation field is the very object it was (else: the slow way)."""
        then = self._hook_state
        if then is None:
            return False
        now = self._hook_fields(pluginmanager)
        if now is None:
            return False
        for a, b in ((now[0], then[0]), (now[2], then[2])):
            if len(a) != len(b) or not all(map(_IS, a, b)):
                return False
        return now[1] == then[1]

    @staticmethod
    def _hookimpls(pluginmanager):
        out = {}
        for name, caller in sorted(vars(pluginmanager.hook).items()):
            impls = getattr(caller, "get_hookimpls", None)
            if impls is None:
                continue
            out[name] = [(i.plugin, i.function, getattr(i.function, "__code__", None), i.hookwrapper,
                          getattr(i, "wrapper", False)) for i in impls()]  # fmt: skip
        return out

    def _same_hooks(self, hooks):
        if hooks.keys() != self._hooks.keys():
            return False
        for name, impls in hooks.items():
            before = self._hooks[name]
            if len(impls) != len(before):
                return False
            for now, then in zip(impls, before, strict=True):
                if any(a is not b for a, b in zip(now, then, strict=True)):
                    return False
        return True

    def check(self, pluginmanager, report=None, full=True):
        """What differs from the snapshot (empty: nothing), and ``report``'s own class.

        The hook implementations are compared every time; the framework's modules, classes and
        signal handlers only when ``full`` (at each call phase's report and at unconfigure).
        """
        problems = []
        if report is not None and type(report) not in self._report_classes:
            problems.append(f"a report of class {type(report).__qualname__}, not pytest's")
        if self._hooks is None:
            return problems
        if not self._same_hook_fields(pluginmanager):  # the common case ends here, in C loops
            hooks = self._hookimpls(pluginmanager)
            if not self._same_hooks(hooks):
                problems.append("the registered hook implementations changed (a plugin added, removed or wrapped)")
                problems += self.foreign_hooks(hooks)
        if full:
            problems += self._changed_modules() + self.foreign_signal_handlers()
        return problems

    def _changed_modules(self):
        """Replaced module or class attributes, modules replaced in the table, attributes added."""
        try:  # C all the way: one getter call per namespace, then identity per value
            same = all(map(_IS, _chain(map(_CALL, self._getters, self._spaces)), self._values))
        except KeyError:
            same = False
        missing = object()
        problems = [f"{owner}.{k} was replaced" for space, k, v, owner in (self._odd if same else self._entries)
                    if space.get(k, missing) is not v]  # fmt: skip
        if len(sys.modules) != self._seen_modules:
            self._seen_modules = len(sys.modules)
            for name, module in self._framework_modules():
                if name not in self._modules:
                    self._take(name, module)  # imported later by pytest itself: held from now on
        table = sys.modules
        for name, (module, values) in self._modules.items():
            if table.get(name) is not module:
                problems.append(f"module {name} was replaced in the module table")
            now = vars(module)
            if len(now) != len(values):
                problems += [f"{name}.{k} was added" for k in now.keys() - values.keys() if not k.startswith("__")]
        for cls, values in self._classes.items():
            now = vars(cls)
            if len(now) != len(values):
                added = [
                    k for k in now.keys() - values.keys() if (cls.__qualname__, k) not in _MUTABLE_CLASS_ATTRIBUTES
                ]
                problems += [f"{cls.__module__}.{cls.__qualname__}.{key} was added" for key in added]
        return problems

    def foreign_signal_handlers(self):
        """Signal handlers not from trusted code: a handler is given the interrupted frame with no audit event."""
        import signal

        out = []
        plain = (signal.SIG_DFL, signal.SIG_IGN, None, signal.default_int_handler)
        for number in signal.valid_signals():
            try:
                handler = signal.getsignal(number)
            except (ValueError, OSError):
                continue
            if any(handler is p for p in plain):
                continue
            code = getattr(getattr(handler, "__func__", handler), "__code__", None)
            if not isinstance(getattr(code, "co_filename", None), str) or not self._trusted(code.co_filename):
                out.append(f"a handler of signal {int(number)} from {getattr(code, 'co_filename', repr(handler)[:80])}")
        return out

    def foreign_hooks(self, hooks):
        """Hook implementations whose code is not from a trusted file (the repository's, or made at run time)."""
        out = []
        for name, impls in hooks.items():
            for _, function, code, _, _ in impls:
                filename = getattr(code, "co_filename", None)
                if not isinstance(filename, str) or not self._trusted(filename):
                    out.append(f"a {name} implementation from {filename or repr(function)[:80]} is registered")
        return out
