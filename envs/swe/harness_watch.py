"""The harness's watch over the live state that loads, collects and judges tests (inside the test process).

Loaded by ``harness_boot.py`` beside ``harness_guard.py``, never by the host. The audit hook
(``harness_guard.py``) refuses the operations that reach pytest's objects; this module covers the
changes that need no audited operation at all: a list append, a dict entry, an instance attribute.
Each check answers a list of problems, which the recorder puts into the record's ``tampered`` list
(the harness then counts the run as a crash):

* **The import system** (:meth:`Watch.import_system`): ``sys.meta_path``, ``sys.path_hooks`` and
  ``sys.path_importer_cache`` are the very objects they were at start-up, and no entry (a finder,
  a path hook, a cached finder, down to the loaders it holds and its closure's cells) is made of
  code from an untrusted file. A finder of the repository could load a test module from altered
  source (with a loader whose ``get_data`` edits it, the import system's own ``get_code`` compiles
  it under the test file's name, which the audit hook allows).
* **Namespaces the tests and the judging use** (:meth:`Watch.namespaces`): every callable, class and
  module held by the builtins and by every module loaded before the repository was on the path
  (the standard library, pytest's dependencies), and later by each new module from a trusted folder
  and by the test modules, is the same object at each check; no module of them is replaced in the
  module table; a name added to one shadows no builtin and holds no untrusted code. Checked at
  collection's end, after each test's teardown (when fixtures such as ``monkeypatch`` have undone
  what the test itself did) and at unconfigure. Values that the standard library's own setters or
  pytest change around each test are left out (:data:`MUTABLE`).
* **The collected tests** (:meth:`Watch.collected`, :meth:`Watch.before_call`): each test function
  of a trusted test file has exactly the code that the file on disk compiles to (plain, or with
  pytest's assertion rewriting), and a test whose name the file defines is that function; before
  each call, the item still holds the function and the parameter values it was collected with.
* **The plugin manager's live state**: the callables held by the plugin manager, its hook relay and
  hook callers (the executor that runs every hook), and the values of ``config.option``, are the ones
  they held when collection finished, and none is untrusted code.

* **Classes made during the run** (:meth:`Watch.comparisons`): a class that did not exist when the
  watch started may hold a special method that decides ``==``, ``!=``, ordering, truth or
  ``isinstance`` (:data:`COMPARISON`) only as a ``def`` of that very name, another ``def`` of the
  repository in that class's body, ``total_ordering``'s or the builtin slot of that name (classes
  of trusted modules and test files aside): a lambda, ``str.__ne__``, ``html.escape``, a
  ``functools.partial`` or a callable object bound to ``__eq__`` makes a result equal to anything,
  however the class was made (``type`` under another name, ``str.__class__``, ``types.new_class``,
  a metaclass). Every class is found through ``__subclasses__`` from ``object`` when collection ends, at the start of
  every garbage collection and at unconfigure (a class lives until the collector frees it, so one
  made and dropped within a test is still seen). A class may hold no attribute named by anything
  but a plain ``str`` (a ``str`` subclass key is found by attribute lookup as the plain name), and
  no dataclass field or ``__match_args__`` entry that is not an identifier (dataclasses compiles the
  field names into ``__eq__``: ``"x,<any expression>"`` is code, however the annotations were written).
  The methods dataclasses compiled for such a class may name nothing but its fields and what dataclasses
  itself writes (:data:`DATACLASS_NAMES`): a ``Field``'s name edited after ``@dataclass`` and read by a
  subclass's (a ``str`` subclass whose ``__format__`` is code), then put back, leaves code in them.
  An added ``def __eq__`` is the AST check's.

What is left: a change made and undone within one test (between two checks), and in-place changes
to plain data (a list a test iterates); see docs/swe.md.
"""

import builtins
import dis
import gc
import itertools
import operator
import sys
import types

# The builtins this module uses, bound in its own namespace now: tested code that replaces one in
# ``builtins`` (which these checks report) must not blind the checks themselves.
_NAMES = """
Exception KeyError OSError SyntaxError ValueError all any bool bytes callable classmethod compile complex
dict enumerate float frozenset getattr hasattr id int isinstance len list map object open property set
sorted staticmethod str tuple type vars zip
"""
globals().update({name: getattr(builtins, name) for name in _NAMES.split()})

_FUNCTION, _METHOD, _MODULE = types.FunctionType, types.MethodType, types.ModuleType
_PLAIN = frozenset({str, bytes, int, float, bool, type(None), complex})
_CONTAINERS = frozenset({list, tuple, set, frozenset})
_DESCRIPTORS = (classmethod, staticmethod, property)
_IS, _CALL, _chain = operator.is_, operator.call, itertools.chain.from_iterable

#: Module attributes that the standard library's setters (``logging.setLoggerClass``, ...) or pytest
#: around each test (warnings capture, the thread and unraisable-exception hooks) replace: (module, name).
MUTABLE = frozenset(
    {("warnings", "showwarning"), ("warnings", "_showwarnmsg_impl"), ("warnings", "_showwarning_orig"),
     ("warnings", "formatwarning"), ("threading", "excepthook"), ("threading", "_profile_hook"),
     ("threading", "_trace_hook"), ("logging", "_loggerClass"), ("logging", "_logRecordFactory"),
     ("sys", "excepthook"), ("sys", "unraisablehook"), ("sys", "displayhook"), ("sys", "breakpointhook"),
     ("sys", "stdout"), ("sys", "stderr"), ("sys", "stdin")}
)  # fmt: skip

#: The import system's containers, which must stay the very objects they were at start-up.
IMPORT_SYSTEM = ("meta_path", "path_hooks", "path_importer_cache", "modules")

#: Special methods that decide a comparison's, a truth test's or an ``isinstance`` check's answer.
COMPARISON = frozenset({"__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__instancecheck__",
                        "__subclasscheck__"})  # fmt: skip

#: Class attributes whose names dataclasses writes into the code it executes (``__eq__`` compares ``(self.NAME,)``)
#: or the interpreter reads by ``getattr``: a name that is no identifier (``"x,<any expression>"``, written into
#: the annotations by a metaclass or a base's ``__init_subclass__`` before ``@dataclass`` runs) is code.
NAMES_AS_CODE = frozenset({"__dataclass_fields__", "__match_args__"})
_IDENTIFIER = str.isidentifier
#: What the interpreter reads by ``getattr`` with each name a class's own entry holds (a class pattern's
#: ``__match_args__``; ``object.__getstate__``'s ``__slotnames__``, copyreg's cache): names written by data
#: (``Enum('E', [('__match_args__', (name,))])``, a standard-library metaclass called with a namespace,
#: ``type(C)(...)``) are reads the AST check never saw.
NAMES_READ = frozenset({"__match_args__", "__slotnames__"})
_COMPILING = object()  # a file's entry in the class check's cache while it is compiled
_TUPLEGETTER = getattr(sys.modules.get("_collections"), "_tuplegetter", None)  # namedtuple's fields
#: What the methods dataclasses compiles (``<string>`` code) name besides the class's fields, measured in the
#: image's Python 3.11 over every option (eq, order, frozen, unsafe_hash, slots, kw_only, defaults, factories,
#: ``InitVar``, ``ClassVar``, ``__post_init__``); its locals (``__dataclass_builtins_object__``) are no names.
DATACLASS_NAMES = frozenset({"NotImplemented", "__class__", "__delattr__", "__post_init__", "__qualname__",
                             "__setattr__", "hash", "super", "type"})  # fmt: skip

_SUBCLASSES = type.__dict__["__subclasses__"]  # read through the type, not through a metaclass's hooks
_INSTRUCTIONS = dis.get_instructions
_COMPILE = compile  # the builtin as it was when the harness loaded, before any of the repository's code ran
_OWN_DICT = type.__dict__["__dict__"].__get__
_QUALNAME = type.__dict__["__qualname__"].__get__
#: The builtin types' own special methods, unbound (``object.__eq__``, ``str.__lt__``).
_SLOT, _METHOD_DESCRIPTOR = type(object.__eq__), type(str.__dict__["join"])


def _code_parts(function):
    """What a function runs and with which defaults: each compared by identity (``None`` for what it lacks)."""
    if type(function) is not _FUNCTION:
        return (None, None, None)
    return (function.__code__, function.__defaults__, function.__kwdefaults__)


def _names_held(value):
    """The names a class's ``__dataclass_fields__`` (its keys, and each ``Field``'s own name) or ``__match_args__``
    holds; anything else is itself the odd name."""
    if type(value) is dict:
        fields = sys.modules.get("dataclasses")
        field = fields.__dict__.get("Field") if type(fields) is _MODULE else None
        own = [type.__dict__["__dict__"].__get__(field)["name"].__get__(f) for f in value.values() if type(f) is field]
        return [*value, *own]
    return list(value) if type(value) is tuple else [value]


def _compiled_names(cls):
    """Where a dataclass's compiled methods (code of ``<string>``) name more than its fields and
    :data:`DATACLASS_NAMES`, or hold code of their own (a lambda, a comprehension): code in a field's name."""
    space = _OWN_DICT(cls)
    table = space.get("__dataclass_fields__")
    if type(table) is not dict:
        return []
    fields = {n for n in _names_held(table) if type(n) is str}
    problems = []
    for key, value in list(space.items()):
        if type(value) is _FUNCTION:  # ``__repr__`` is dataclasses' wrapper of the compiled one
            value = dict.get(value.__dict__, "__wrapped__", value)
        if type(value) is not _FUNCTION or value.__code__.co_filename != "<string>":
            continue
        code = value.__code__
        odd = sorted(set(code.co_names) - fields - DATACLASS_NAMES)
        if odd or any(type(c) is types.CodeType for c in code.co_consts):
            problems.append(
                f"class {_QUALNAME(cls)} has {key} compiled from a string naming {odd or 'code'}, not its fields"
            )
    return problems


def _key(cls):
    """``cls`` itself where its metaclass is ``type`` (hashed by identity, in C), else its ``id``: a metaclass's
    own ``__hash__``/``__eq__`` could make a new class pass for one already seen. ``id`` is an audited
    event, so the hook runs for each call: most classes do without it."""
    return cls if type(cls) is type else id(cls)


def _classes():
    """Every class alive now (subclasses of ``object``, metaclasses included), each once."""
    seen, out, stack = set(), [], [object]
    while stack:
        for sub in _SUBCLASSES(stack.pop()):
            key = _key(sub)
            if key not in seen:
                seen.add(key)
                out.append(sub)
                stack.append(sub)
    return out


class Watch:
    """Snapshots of the live state above, taken before the repository is on the path, and the checks."""

    def __init__(self, trusted, framework, test_files, sources=None):
        """Snapshot the builtins and the modules loaded so far (call before the repository is on the path).

        Args:
            trusted: ``trusted(filename)`` of ``harness_guard.make_trusted``.
            framework: Module name prefixes of pytest, pluggy and the harness (checked by ``Integrity``).
            test_files: Absolute paths of the run's test files.
            sources: Absolute path -> bytes of the test files as read before the run (the run's user
                cannot read the files themselves); a file not in it is read from disk.
        """
        self._trusted = trusted
        self._framework = tuple(framework)
        self._dotted = tuple(p + "." for p in framework)
        self._test_files = frozenset(test_files)
        self._sources = dict(sources or {})
        self._classes = {}  # class -> why it is untrusted, or None
        self._bodies = {}  # file -> its module's code, compiled again for the class check (None: unreadable)
        self._class_bodies = {}  # the same for the names class statements wrote (_COMPILING while compiled)
        self._spaces, self._lens, self._names, self._modules, self._module_keys = [], [], [], [], []
        self._getters, self._getter_spaces, self._flat, self._entries = [], [], [], []
        self._held_classes = set()
        self._proxies, self._proxy_lens, self._proxy_owners, self._held_keys = [], [], [], []
        self._seen = 0
        self._import_system = {name: getattr(sys, name) for name in IMPORT_SYSTEM}
        self._import_shape = None
        self._builtins = sys.modules["builtins"]
        self._live = None
        self._items = {}
        self._new_modules()
        self._startup_classes = {_key(c): c for c in _classes()}  # held, so no new class reuses an id of theirs
        self._pending = []  # what the collector's callback found, handed over at the next check
        self._collecting = self._before_collection
        gc.callbacks.append(self._collecting)

    # ------------------------------------------------------------------------ what is untrusted

    def _foreign_class(self, cls):
        """Where ``cls`` (or a base, or its metaclass) has untrusted code, or None."""
        if cls in self._classes:
            return self._classes[cls]
        self._classes[cls] = None  # a cycle through a metaclass ends here
        why = None
        meta = type(cls)
        if meta is not type:
            why = self._foreign_class(meta)
        for c in () if why else type.__dict__["__mro__"].__get__(cls):
            filename = _file(sys.modules.get(c.__dict__.get("__module__") or ""))
            if isinstance(filename, str) and not self._trusted(filename):
                why = f"class {c.__qualname__} of {filename}"
                break
            for value in c.__dict__.values():
                function = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
                if type(function) is _FUNCTION and self._foreign_code(function):
                    why = f"{c.__qualname__} with {self._foreign_code(function)}"
                    break
            if why:
                break
        self._classes[cls] = why
        return why

    def _foreign_code(self, function):
        """Where ``function``'s code is untrusted, or None.

        Code compiled from a string (``<string>``: dataclasses, namedtuple) counts as its globals'
        module's, when those are a trusted module's namespace (or namedtuple's own).
        """
        filename = function.__code__.co_filename
        if self._trusted(filename):
            return None
        if filename.startswith("<"):
            space = function.__globals__
            name = space.get("__name__")
            module = sys.modules.get(name) if isinstance(name, str) else None
            if type(module) is _MODULE and module.__dict__ is space:
                owner = _file(module)
                if owner is None or (isinstance(owner, str) and self._trusted(owner)):
                    return None
            elif isinstance(name, str) and name.startswith("namedtuple_") and space.get("__builtins__") == {}:
                return None
        return f"code of {filename}"

    def foreign(self, obj, depth=3):
        """Where ``obj`` is made of untrusted code (its function, class, closure, bound object, members), or None."""
        kind = type(obj)
        if kind in _PLAIN:
            return None
        if kind is _FUNCTION:
            why = self._foreign_code(obj)
            if why:
                return why
            for cell in (obj.__closure__ or ()) if depth > 0 else ():
                try:
                    inner = self.foreign(cell.cell_contents, depth - 1)
                except ValueError:  # an empty cell
                    continue
                if inner:
                    return inner
            return None
        if kind is _METHOD:
            return self.foreign(obj.__func__, depth) or self.foreign(obj.__self__, depth - 1)
        if isinstance(obj, type):
            return self._foreign_class(obj)
        why = self._foreign_class(kind)
        if why or depth <= 0 or kind is _MODULE:
            return why
        if kind in _CONTAINERS or kind is dict:
            members = list(obj.values() if kind is dict else obj)[:200]
        else:
            try:
                space = obj.__dict__  # the class is trusted: its __dict__ is the plain one
            except Exception:
                space = None
            members = list(space.values())[:200] if type(space) is dict else []
            members += [getattr(obj, name, None) for name in ("func", "args", "keywords") if kind.__name__ == "partial"]
        for member in members:
            inner = self.foreign(member, depth - 1)
            if inner:
                return inner
        return None

    # ------------------------------------------------------------------------ the import system

    def import_system(self):
        """Problems of ``sys.meta_path``, ``sys.path_hooks`` and ``sys.path_importer_cache``.

        The entries are walked again only when their shape (the objects they are and hold, two
        levels down) differs from the last walk's: a walk reaches far (a finder holds pytest's config).
        """
        problems = [
            f"sys.{name} was replaced" for name, obj in self._import_system.items() if getattr(sys, name) is not obj
        ]
        cache = list(sys.path_importer_cache.items())
        entries = [*sys.meta_path, *sys.path_hooks, *(finder for _, finder in cache)]
        shape = [m for e in entries for m in self._shape(e)]
        if self._import_shape is not None and _same(shape, self._import_shape):
            return problems
        self._import_shape = shape
        labels = ["a sys.meta_path entry"] * len(sys.meta_path) + ["a sys.path_hooks entry"] * len(sys.path_hooks)
        labels += [f"the cached finder of {key!r}" for key, _ in cache]
        for label, entry in zip(labels, entries, strict=True):
            why = self.foreign(entry)
            if why:
                problems.append(f"{label} holds untrusted code ({why})")
        return problems

    def _shape(self, obj):
        """The ids of ``obj`` and of what it holds, two levels down (a trusted class's instance, a closure)."""
        out = [obj]
        if type(obj) is _FUNCTION:
            members = [c.cell_contents for c in obj.__closure__ or () if _full(c)]
        elif self._classes.get(type(obj), False) is None and type(getattr(obj, "__dict__", None)) is dict:
            members = list(obj.__dict__.values())  # a class already found trusted: its __dict__ is plain
        else:
            return out
        for member in members:
            out.append(member)
            if type(member) in (list, tuple):
                out += member[:50]
        return out

    # ------------------------------------------------------------------------ namespaces

    def _watched_module(self, name, module):
        if name in self._framework or name.startswith(self._dotted) or name == "__main__":
            return False
        filename = _file(module)
        return filename is None or (
            isinstance(filename, str) and self._trusted(filename) and filename not in self._test_files
        )

    def _watch(self, name, module, scan):
        """Hold ``module``'s callables, classes and modules from now on; with ``scan``, refuse untrusted ones now."""
        space = module.__dict__
        problems = []
        self._spaces.append(space)
        self._lens.append(len(space))
        self._names.append(name)
        self._modules.append(module)
        held = set()
        self._module_keys.append(held)
        pairs = []
        for key, value in list(space.items()):
            if (name, key) in MUTABLE or not (callable(value) or type(value) is _MODULE):
                continue
            if scan:
                why = self.foreign(value, 1)
                if why:
                    problems.append(f"{name}.{key} is untrusted code ({why})")
                    continue
            pairs.append((key, value))
            held.add(key)
            if scan is not None and isinstance(value, type) and value.__dict__.get("__module__") == name:
                problems += self._watch_class(f"{name}.{key}", value, scan)
        self._hold(space, name, pairs)
        return problems

    def _hold(self, space, owner, pairs):
        """Hold ``space``'s (key, value) ``pairs``: one ``itemgetter`` reads them all back at each check."""
        if not pairs:
            return
        pairs.append(pairs[0])  # two keys at least: the getter then always answers a tuple
        self._getters.append(operator.itemgetter(*(k for k, _ in pairs)))
        self._getter_spaces.append(space)
        self._flat += [v for _, v in pairs]
        for key, value in pairs[:-1]:
            self._entries.append((space, key, value, owner))

    def _watch_class(self, owner, cls, scan):
        """Hold the methods (and other callables, properties) of a class the module defines."""
        if cls in self._held_classes:
            return []
        self._held_classes.add(cls)
        proxy = cls.__dict__
        problems = []
        self._proxies.append(proxy)
        self._proxy_lens.append(len(proxy))
        self._proxy_owners.append(owner)
        held = set()
        self._held_keys.append(held)
        pairs = []
        for key, value in list(proxy.items()):
            if not (callable(value) or isinstance(value, _DESCRIPTORS)):
                continue
            held.add(key)
            why = (
                self.foreign(getattr(value, "__func__", None) or getattr(value, "fget", None) or value, 1)
                if scan
                else None
            )
            if why:
                problems.append(f"{owner}.{key} is untrusted code ({why})")
                continue
            pairs.append((key, value))
        self._hold(proxy, owner, pairs)
        return problems

    def _new_modules(self, scan=False):
        """Watch the modules from trusted folders that appeared since the last look."""
        table = sys.modules
        if len(table) == self._seen:
            return []
        self._seen = len(table)
        known = set(self._names)
        problems = []
        for name, module in list(table.items()):
            if name not in known and type(module) is _MODULE and self._watched_module(name, module):
                problems += self._watch(name, module, scan)
        return problems

    def namespaces(self):
        """What changed in the watched namespaces since they were taken (see the module docstring)."""
        problems = []
        try:  # C all the way: one getter call per namespace, then identity per value
            same = all(map(_IS, _chain(map(_CALL, self._getters, self._getter_spaces)), self._flat))
        except KeyError:
            same = False
        if not same:
            missing = object()
            problems += [f"{owner}.{key} was replaced" for space, key, value, owner in self._entries
                         if space.get(key, missing) is not value]  # fmt: skip
        if list(map(len, self._proxies)) != self._proxy_lens:
            for i, (proxy, owner) in enumerate(zip(self._proxies, self._proxy_owners, strict=True)):
                if len(proxy) != self._proxy_lens[i]:
                    self._proxy_lens[i] = len(proxy)  # a cache filled in the class: looked at once per change
                    if {k for k, v in proxy.items() if callable(v) or isinstance(v, _DESCRIPTORS)} != self._held_keys[
                        i
                    ]:
                        problems.append(f"{owner} gained or lost a method")
        if list(map(len, self._spaces)) != self._lens:
            problems += self._added()
        if not all(map(_IS, map(sys.modules.get, self._names), self._modules)):
            pairs = zip(self._names, self._modules, strict=True)
            problems += [
                f"module {n} was replaced in the module table" for n, m in pairs if sys.modules.get(n) is not m
            ]
        return problems + self._new_modules(scan=True)

    def _added(self):
        builtin_names = self._builtins.__dict__.keys()
        problems = []
        for i, (space, name) in enumerate(zip(self._spaces, self._names, strict=True)):
            if len(space) == self._lens[i]:
                continue
            self._lens[i] = len(space)
            for key, value in list(space.items()):
                if key in self._module_keys[i] or not (callable(value) or type(value) is _MODULE):
                    continue
                why = self.foreign(value, 1)
                if why or (name != "builtins" and key in builtin_names and not key.startswith("__")):
                    problems.append(f"{name}.{key} was added ({why or 'it shadows the builtin'})")
        return problems

    def check(self, classes=True):
        """The import system, the namespaces and (with ``classes``) the classes: everything checked after collection.

        The classes are looked at when collection ends, at the start of every garbage collection and
        at unconfigure, not after each test: a walk over every class costs about a millisecond per
        thousand classes, and a class lives until a collection frees it.
        """
        problems = self.import_system() + self.namespaces() + self._live_problems()
        self._forget_test_sources()
        return problems + self.comparisons() if classes else problems

    def _forget_test_sources(self):
        """Drop the test files' lines from ``linecache`` (the tested code may not open them: nor read a copy)."""
        cache = getattr(sys.modules.get("linecache"), "__dict__", {}).get("cache")
        if type(cache) is dict:
            for path in self._test_files:
                cache.pop(path, None)

    # ------------------------------------------------------------------------ classes made during the run

    def comparisons(self):
        """Classes made since start-up whose comparison methods are not definitions (module docstring)."""
        problems, self._pending = self._pending, []
        if not any(map(_IS, gc.callbacks, [self._collecting] * len(gc.callbacks))):
            problems.append("the harness's garbage-collector callback was removed")
        return problems + self._new_class_problems()

    def _before_collection(self, phase, info):
        """``gc.callbacks`` entry: look at the classes before the collector may free one."""
        if phase != "start":
            return
        try:
            if len(self._pending) < 50:
                self._pending += [p for p in self._new_class_problems() if p not in self._pending][:10]
        except Exception as e:  # the collector ignores what a callback raises: say it instead
            self._pending.append(f"the class check failed: {type(e).__name__}")

    def _new_class_problems(self):
        startup = self._startup_classes
        problems = []
        for cls in _classes():
            if _key(cls) in startup or self._trusted_class(cls):
                continue
            # every entry, keys compared as plain strings; a key of a str subclass (which attribute lookup
            # matches as the plain name) is refused as such: ``type.__setattr__`` and class bodies make plain ones
            for key, value in list(_OWN_DICT(cls).items()):
                if type(key) is not str:
                    problems.append(f"class {_QUALNAME(cls)} has an attribute named by a {_QUALNAME(type(key))}")
                elif key in COMPARISON:
                    why = self._not_a_definition(key, value, _QUALNAME(cls))
                    if why:
                        problems.append(f"class {_QUALNAME(cls)} has {key} = {why}, not a def of {key}")
                elif key in NAMES_AS_CODE:
                    odd = next((n for n in _names_held(value) if type(n) is not str or not _IDENTIFIER(n)), None)
                    if odd is not None:
                        problems.append(f"class {_QUALNAME(cls)} has {key} naming {odd!r}, not an identifier")
                if key in NAMES_READ:
                    odd = self._unwritten_names(cls, key, value)
                    if odd is not None:
                        why = f"naming {odd!r}, which no class statement wrote"
                        problems.append(f"class {_QUALNAME(cls)} has {key} {why}")
            problems += _compiled_names(cls)
        return problems

    def _unwritten_names(self, cls, key, value):
        """The first name in ``cls``'s own ``key`` (:data:`NAMES_READ`) that the source did not write there, or None.

        ``__match_args__``: a field of namedtuple's (a ``_tuplegetter`` of the class itself), or a string constant of
        the body of a class statement of that qualified name in its module's file that stores ``__match_args__`` or
        annotates that name (dataclasses and attrs make theirs of the annotations). ``__slotnames__``: a slot of the
        class or a base, as copyreg computes them.
        """
        names = list(value) if type(value) is tuple or type(value) is list else [value]
        own = _OWN_DICT(cls)
        if key == "__slotnames__":
            slots = set()
            for c in type.__dict__["__mro__"].__get__(cls):
                held = _OWN_DICT(c).get("__slots__", ())
                for n in [held] if type(held) is str else list(held) if type(held) in (tuple, list) else []:
                    slots.add(f"_{_QUALNAME(c).rsplit('.', 1)[-1].lstrip('_')}{n}" if type(n) is str
                              and n.startswith("__") and not n.endswith("__") else n)  # fmt: skip
            return next((n for n in names if type(n) is not str or n not in slots), None)
        written = set()  # a dataclass inherits its bases' fields
        for c in type.__dict__["__mro__"].__get__(cls):
            names_of_c = self._written_names(_OWN_DICT(c).get("__module__"), _QUALNAME(c))
            if names_of_c is None:  # its file is being compiled (a collection began there): at the next look
                return None
            written.update(names_of_c)
        for n in names:
            if type(n) is not str:
                return n
            if n not in written and (_TUPLEGETTER is None or type(own.get(n)) is not _TUPLEGETTER):
                return n
        return None

    def _written_names(self, module_name, qualname):
        """The names class statements named ``qualname`` in ``module_name``'s file give ``__match_args__`` as
        constants, or annotate (``x: int``): empty where there is none, or no file; None while the file is being
        compiled (the collector's callback runs this inside that compile)."""
        module = sys.modules.get(module_name) if type(module_name) is str else None
        path = _file(module)
        if not isinstance(path, str) or self._trusted(path):  # compiling a trusted file is refused under the
            return frozenset()  # repository's code, where a collection may begin; its bases' names are their own
        if path not in self._class_bodies:
            self._class_bodies[path] = _COMPILING
            code = None
            try:
                source = self._sources.get(path)
                if source is None:
                    with open(path, "rb") as f:
                        source = f.read()
                code = _COMPILE(source, path, "exec", dont_inherit=True)
            except (OSError, SyntaxError, ValueError):
                pass
            self._class_bodies[path] = code
        if self._class_bodies[path] is _COMPILING:
            return None
        stack = [self._class_bodies[path]] if self._class_bodies[path] is not None else []
        written = set()
        while stack:
            body = stack.pop()
            stack += [c for c in body.co_consts if type(c) is types.CodeType]
            if body.co_qualname != qualname:
                continue
            ops = list(_INSTRUCTIONS(body))
            if any(i.opname == "STORE_NAME" and i.argval == "__match_args__" for i in ops):
                for c in body.co_consts:
                    written.update(x for x in (c if type(c) is tuple else (c,)) if type(x) is str)
            for before, const, store in zip(ops, ops[1:], ops[2:], strict=False):  # `__annotations__['x'] = int`
                if (before.opname == "LOAD_NAME" and before.argval == "__annotations__" and const.opname == "LOAD_CONST"
                        and store.opname == "STORE_SUBSCR" and type(const.argval) is str):  # fmt: skip
                    written.add(const.argval)
        return frozenset(written)

    def _trusted_class(self, cls):
        """Whether ``cls`` is a class of a trusted module (or test file), held there under its qualified name.

        A class statement of trusted code binds its class there; code of the repository cannot put one
        of its own in such a namespace without the namespace check seeing it.
        """
        name = _OWN_DICT(cls).get("__module__")
        module = sys.modules.get(name) if type(name) is str else None
        filename = _file(module)
        if not (isinstance(filename, str) and self._trusted(filename)):
            return False
        holder = module.__dict__
        for part in _QUALNAME(cls).split("."):
            found = holder.get(part)
            if found is cls:
                return True
            try:
                holder = _OWN_DICT(found)
            except TypeError:  # not a class: a function's <locals>, or nothing
                return False
        return False

    def _not_a_definition(self, key, value, owner):
        """What ``value``, bound to the special method ``key`` in the class named ``owner`` (not a trusted
        module's class), is when it is not a definition of it, or None. A definition: a ``def key`` (in a
        class body, or generated as dataclasses and attrs do), a function the repository defines in that
        class's own body (``__le__ = issubset``), ``total_ordering``'s, or the builtin slot ``key``."""
        if value is None:  # the operation refused (``__eq__ = None``)
            return None
        kind = type(value)  # compared with ``is`` only: a metaclass's ``__eq__`` would run its own code
        function = value.__func__ if kind is classmethod or kind is staticmethod else value
        kind = type(function)
        if kind is _FUNCTION:
            code = function.__code__
            filename = code.co_filename
            if (
                code.co_name == key
                or (  # a def in the class's own body (sortedcontainers' made comparers), not a lambda
                    not self._trusted(filename)
                    and code.co_qualname.startswith(owner + ".")
                    and code.co_name != "<lambda>"
                    and self._bound_in_body(code, key, owner)
                )
                or (
                    filename.endswith("/functools.py")
                    and self._trusted(filename)
                    and code.co_name.startswith(f"_{key.strip('_')}_from_")
                )
            ):
                return None
            return f"the function {code.co_qualname} of {filename}"
        if kind is _SLOT or kind is _METHOD_DESCRIPTOR:
            return None if function.__name__ == key else f"the builtin {function.__qualname__}"
        mock = sys.modules.get("unittest.mock")
        if type(mock) is _MODULE:  # a MagicMock's configurable special methods (the AST check refuses unittest)
            space = mock.__dict__
            proxy, base = space.get("MagicProxy"), space.get("NonCallableMock")
            if kind is proxy or any(c is base for c in type.__dict__["__mro__"].__get__(kind)):
                return None
        return f"a {_QUALNAME(kind)} object"

    def _bound_in_body(self, code, key, owner):
        """Whether a class statement named ``owner`` in ``code``'s file binds ``key`` and holds ``code``.

        The qualified name alone is a claim anything can make: a class made by a call under the name of
        another class, whose body holds the function, would pass for that body's (the fifth review: graded
        solved, reward 1). The file is compiled again: the class body that holds ``code`` (as itself, or
        inside a function it defines, as sortedcontainers' made comparers are) must store ``key`` by name.
        """
        path = code.co_filename
        if path not in self._bodies:
            self._bodies[path] = None
            try:
                source = self._sources.get(path)
                if source is None:
                    with open(path, "rb") as f:
                        source = f.read()
                self._bodies[path] = _COMPILE(source, path, "exec", dont_inherit=True)
            except (OSError, SyntaxError, ValueError):
                pass
        stack = [self._bodies[path]] if self._bodies[path] is not None else []
        while stack:
            body = stack.pop()
            nested = [c for c in body.co_consts if type(c) is types.CodeType]
            stack += nested
            if body.co_qualname != owner or key not in body.co_names:
                continue
            stores = any(i.opname == "STORE_NAME" and i.argval == key for i in _INSTRUCTIONS(body))
            inner, found = list(nested), False
            while inner and not found:
                c = inner.pop()
                found = c == code
                inner += [n for n in c.co_consts if type(n) is types.CodeType]
            if stores and found:
                return True
        return False

    # ------------------------------------------------------------------------ the collected tests

    def _compiled(self, path, config, cache):
        """Qualified name -> code objects the test file at ``path`` compiles to (plain and rewritten)."""
        if path in cache:
            return cache[path]
        out = {}
        source = self._sources.get(path)
        try:
            if source is None:
                with open(path, "rb") as f:
                    source = f.read()
            codes = [compile_test(path, source, None)]
        except (OSError, SyntaxError, ValueError):
            codes = []
        if source is not None:
            try:
                codes.append(compile_test(path, source, config))
            except Exception:
                pass  # pytest's rewriter is private API: without it the plain compile is the reference
        while codes:
            code = codes.pop()
            out.setdefault(code.co_qualname, []).append(code)
            codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
        cache[path] = out
        return out

    def collected(self, items, config):
        """Each test function of a trusted file is what the file compiles to; snapshot what each item calls."""
        problems, cache = [], {}
        for item in items:
            path = str(getattr(item, "path", ""))
            if path not in self._test_files or not hasattr(item, "obj"):
                continue
            obj = item.obj
            function = getattr(obj, "__func__", obj)
            params = dict(getattr(getattr(item, "callspec", None), "params", None) or {})
            self._items[item.nodeid] = (function, params, _code_parts(function))
            compiled = self._compiled(path, config, cache)
            own = _own_function(function, path)
            if own is not None:
                if not any(own.__code__ == c for c in compiled.get(own.__code__.co_qualname, ())):
                    problems.append(
                        f"{item.nodeid} runs code unlike what {path} compiles to (loaded from other source)"
                    )
                continue
            cls = getattr(item, "cls", None)
            name = getattr(item, "originalname", None) or item.name
            if (f"{cls.__qualname__}.{name}" if cls is not None else name) in compiled:
                problems.append(f"{item.nodeid} does not run the function {path} defines ({self.foreign(function)})")
        for module in {getattr(item, "module", None) for item in items}:
            if type(module) is _MODULE and _file(module) in self._test_files:
                self._watch(module.__name__, module, None)  # its own classes are the tests' business
        self._live = self._live_state(config)
        objs, names, values = self._live[:3]
        return problems + [f"pytest's {k} is untrusted code ({w})" for k, v in zip(names, values, strict=True)
                           if callable(v) and (w := self.foreign(v, 1))]  # fmt: skip

    def before_call(self, item):
        """Problems of ``item`` just before its test runs: the function or parameters it was collected with changed."""
        held = self._items.get(item.nodeid)
        if held is None:
            return []
        function, params, parts = held
        obj = item.obj
        problems = []
        if getattr(obj, "__func__", obj) is not function:
            problems.append(f"{item.nodeid}'s test function was replaced after collection")
        elif not all(map(_IS, _code_parts(function), parts)):  # the same function made to run other code
            problems.append(f"{item.nodeid}'s test function's code or defaults were replaced after collection")
        now = getattr(getattr(item, "callspec", None), "params", None) or {}
        if list(now) != list(params) or not _same(now.values(), params.values()):
            problems.append(f"{item.nodeid}'s parameters were changed after collection")
        return problems + self._live_problems()

    # ------------------------------------------------------------------------ pytest's live state

    def _live_state(self, config):
        pm = config.pluginmanager
        holders = [pm, pm.hook, *vars(pm.hook).values()]
        objs, names, values = [], [], []
        for o in holders:
            for k in list(vars(o)) if hasattr(o, "__dict__") else list(getattr(type(o), "__slots__", ())):
                if callable(v := getattr(o, k, None)):
                    objs.append(o), names.append(k), values.append(v)
        option = vars(config.option)
        for k, v in list(option.items()):
            objs.append(config.option), names.append(k), values.append(v)
        return objs, names, values, len(option), option

    def _live_problems(self):
        if self._live is None:
            return []
        objs, names, values, size, option = self._live
        problems = []
        if not all(map(_IS, map(getattr, objs, names, [None] * len(names)), values)):
            problems += [
                f"pytest's {k} was replaced"
                for o, k, v in zip(objs, names, values, strict=True)
                if getattr(o, k, None) is not v
            ]
        if len(option) != size:
            problems.append("an option was added to pytest's configuration")
        return problems


def compile_test(path, source, config):
    """The code object of the test file ``path`` from its ``source`` (bytes), as pytest would make it.

    ``config`` None: compiled plainly; else with pytest's assertion rewriting for that configuration,
    as its import hook rewrites a test file named on the command line.
    """
    if config is None:
        return _COMPILE(source, path, "exec", dont_inherit=True)
    import ast

    from _pytest.assertion.rewrite import rewrite_asserts

    tree = ast.parse(source, filename=path)
    rewrite_asserts(tree, source, path, config)
    return _COMPILE(tree, path, "exec", dont_inherit=True)


def _same(these, those):
    """Whether two sequences hold the very same objects, in order (``id`` is not used: it is an audited event)."""
    these, those = list(these), list(those)
    return len(these) == len(those) and all(map(_IS, these, those))


def _full(cell):
    """Whether a closure cell holds a value."""
    try:
        _ = cell.cell_contents
    except ValueError:
        return False
    return True


def _file(module):
    """A plain module's ``__file__`` read from its namespace (no attribute hook runs), else None."""
    return module.__dict__.get("__file__") if type(module) is _MODULE else None


def _own_function(function, path):
    """The function of ``path`` that ``function`` is or wraps (through ``__wrapped__``), or None."""
    for _ in range(20):
        if type(function) is not _FUNCTION:
            return None
        if function.__code__.co_filename == path:
            return function
        function = function.__dict__.get("__wrapped__")
    return None
