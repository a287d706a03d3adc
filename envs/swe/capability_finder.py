"""The AST walk behind :mod:`~sparring.envs.swe.capabilities`: every use of a capability in one module.

Split from ``capabilities.py`` (which loads the list and decides what a repair added); the rules
the walk applies are described there and in ``capabilities.toml``.
"""

from __future__ import annotations

import _string  # type: ignore[import-not-found]  # str.format's own parser of field names
import ast
import builtins
import fnmatch
import importlib
import inspect
import re
import string
import sys
import types
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from sparring import pyast
from sparring.envs.swe.fresh_imports import fresh_attributes, held_packages, submodules

__all__ = ["ORACLE", "Capability", "CapabilityFinder", "CapabilityIndex", "CapabilityUse", "OracleNames"]


@dataclass(frozen=True)
class Capability:
    """One capability added code may not use (a table of ``capabilities.toml``)."""

    name: str
    why: str
    modules: tuple[str, ...] = ()
    attributes: tuple[str, ...] = ()
    attribute_names: frozenset[str] = frozenset()
    names: frozenset[str] = frozenset()
    definitions: frozenset[str] = frozenset()
    strings: tuple[re.Pattern[str], ...] = ()
    dynamic_attributes: bool = False
    module_values: bool = False
    open_fd: bool = False
    module_stores: bool = False
    loaded_submodules: bool = False
    foreign: tuple[str, ...] = ()
    arguments: tuple[str, ...] = ()

    @classmethod
    def from_table(cls, name: str, table: dict[str, Any]) -> Capability:
        """Build from a ``[capabilities.NAME]`` table."""
        return cls(
            name=name,
            why=str(table.get("why", name)),
            modules=tuple(table.get("modules", ())),
            attributes=tuple(table.get("attributes", ())),
            attribute_names=frozenset(table.get("attribute_names", ())),
            names=frozenset(table.get("names", ())),
            definitions=frozenset(table.get("definitions", ())),
            strings=tuple(re.compile(s) for s in table.get("strings", ())),
            dynamic_attributes=bool(table.get("dynamic_attributes", False)),
            module_values=bool(table.get("module_values", False)),
            open_fd=bool(table.get("open_fd", False)),
            module_stores=bool(table.get("module_stores", False)),
            loaded_submodules=bool(table.get("loaded_submodules", False)),
            foreign=tuple(table.get("foreign", ())),
            arguments=tuple(table.get("arguments", ())),
        )


@dataclass(frozen=True)
class CapabilityUse:
    """One use of a capability in a file.

    Attributes:
        path: The file.
        line: Its line number.
        capability: The capability's name.
        what: The construct (``import gc``, ``os.fork``, ``getattr with a computed name``).
        text: The line, stripped (shown cut at 160 characters).
        scope: The qualified name of the definitions around it (``Duration.__getattr__``; empty at module level).
    """

    path: str
    line: int
    capability: str
    what: str
    text: str
    scope: str = ""

    @property
    def key(self) -> tuple[str, str, str, str]:
        """What makes two uses the same use, wherever they sit in the file: the same line in a definition of the
        same name (a line moved into another function means something else there: its names are that one's)."""
        return self.capability, self.what, self.text, self.scope

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what} ({self.capability}): {self.text.replace(chr(10), ' ')[:160]}"


#: Reaching the repository's oracle test files (the tests grading runs, which the solver never sees whole):
#: importing one, or naming one in a string. Not in ``capabilities.toml``: the files are each bug's own.
ORACLE = Capability(
    name="oracle_tests",
    why="reads the oracle tests (their module or their file), whose expectations the solver may not copy",
)


class OracleNames:
    """The module names and file names by which code can reach the oracle test files ``paths``.

    A test file ``tests/test_core.py`` is the module ``tests.test_core`` or ``test_core`` (whichever
    folder is on the path), so every dotted tail of its path counts; a string naming its file stem
    (``test_core``, as in ``open("tests/test_core.py")``) counts when the stem is specific enough
    (six characters or more, not ``tests`` itself).
    """

    def __init__(self, paths: Iterable[str]):
        self.modules: set[str] = set()
        stems = set()
        for path in paths:
            if not path.endswith(".py"):
                continue
            parts = path[: -len(".py")].strip("/").split("/")
            self.modules.update(".".join(parts[i:]) for i in range(len(parts)))
            if len(parts[-1]) >= 6 and parts[-1] not in ("tests", "testing"):
                stems.add(parts[-1])
        alternatives = "|".join(re.escape(s) for s in sorted(stems))
        self.pattern = re.compile(rf"(?<![A-Za-z0-9_])({alternatives})(?![A-Za-z0-9_])") if stems else None

    def module(self, dotted: str) -> bool:
        """Whether importing ``dotted`` imports an oracle test module (or something inside one)."""
        return any(dotted == m or dotted.startswith(m + ".") for m in self.modules)

    @staticmethod
    def resolve(path: str, level: int, module: str) -> str | None:
        """The dotted name a relative import ``from {'.' * level}{module} import ...`` in file ``path`` means."""
        package = path.strip("/").split("/")[:-1]  # a module's package is its folder (so is __init__.py's)
        if level - 1 > len(package):
            return None
        base = package[: len(package) - (level - 1)]
        return ".".join([*base, *([module] if module else [])])


_GETATTR = ("getattr", "setattr", "delattr", "hasattr")
_OPENERS = ("open", "io.open", "os.fdopen", "io.FileIO", "codecs.open")
#: Names of listed attributes too common on other objects to refuse wherever a chain starts.
_COMMON_TAILS = frozenset({"path", "flags", "exit", "stdout", "stderr", "stdin"})
#: Statements and patterns that bind a name given as a string (not as an ``ast.Name``).
_NameBinder = ast.ClassDef | ast.ExceptHandler | ast.MatchAs | ast.MatchStar | ast.MatchMapping
#: Builtins refused by name that a module object held in a variable (``builtins``) would give by attribute.
_BUILTINS_BY_VALUE = frozenset({"getattr", "setattr", "delattr", "vars", "globals", "locals", "__import__", "eval",
                                "exec"})  # fmt: skip
#: Listed attributes that may still be assigned to item by item (``os.environ["X"] = "1"``).
_WRITE_ONLY = frozenset({"os.environ", "os.environb"})
#: Methods that take an attribute's name as an argument.
_NAMED_ATTRIBUTE_METHODS = ("__setattr__", "__delattr__", "__getattribute__", "__getattr__")
#: str's methods that look up each field of their template (``{0.a.b[c]}``) on their arguments, by name.
_FORMAT_METHODS = frozenset({"format", "format_map"})
#: Class attributes that hand attribute names to the interpreter as data: a class pattern's positional
#: subpatterns are read by ``getattr`` with the names of ``__match_args__``, and ``copy``/``pickle`` read every
#: slot of ``__slots__`` the same way (on a class with a forwarding ``__getattr__``, any object's attribute).
_NAMES_AS_DATA = frozenset({"__match_args__", "__slots__"})
#: Attribute names under which the standard library's modules keep the interpreter's own modules (`x.sys`,
#: `collections._sys`, `tempfile._os`): wherever a chain starts, each reads that module.
_MODULE_ATTRIBUTES = frozenset({"sys", "_sys", "os", "_os", "posix", "_posix", "builtins", "_builtins", "gc", "_gc",
                                "_io", "_imp", "importlib", "_importlib", "_bootstrap", "_frozen_importlib",
                                "_operator"})  # fmt: skip
#: functools' wrappers, which read and set every attribute their ``assigned`` and ``updated`` arguments name: how
#: many positional arguments come before those.
_WRAPPERS = {"functools.update_wrapper": 2, "functools.wraps": 1}
#: Methods that read the command line when given no arguments (argparse's and optparse's parsers).
_ARGV_PARSERS = frozenset({"parse_args", "parse_known_args", "parse_intermixed_args", "parse_known_intermixed_args"})
#: The most values one expression of string literals may stand for before the check stops reading it.
_MAX_TEMPLATES = 16
#: Class decorators that write a class's annotation keys into code they execute and look its string annotations up in
#: ``sys.modules[cls.__module__]``: allowed only on a class statement the check reads, applied to it first.
_CODE_FROM_ANNOTATIONS = frozenset({"dataclasses.dataclass"})
#: Functions that make a class of such annotations, or fill a class's namespace with code the check does not read as
#: a class body (``types.new_class``'s ``exec_body``): how many positional arguments come before that code or data.
_CLASS_FACTORIES = {"dataclasses.make_dataclass": 0, "types.new_class": 3, "type.__new__": 3}
#: Argument values that turn a listed argument off (``catch_warnings(record=False)``).
_OFF = (False, None, 0)


def format_walk(template: str, depth: int = 0) -> Iterator[str]:
    """The attribute names each field of a ``str.format`` template looks up on its argument
    (``{0._sys.modules[x]}``: ``_sys`` and ``modules``; ``[x]`` is an item, not an attribute), nested fields in a
    format spec included.

    Raises:
        ValueError: ``template`` is not a valid template (``str.format`` refuses it too).
    """
    for _, field_name, spec, _ in string.Formatter().parse(template):
        if field_name is not None:
            _, rest = _string.formatter_field_name_split(field_name)
            yield from (key for is_attribute, key in rest if is_attribute)
        if spec and depth < 2:
            yield from format_walk(spec, depth + 1)


@dataclass
class CapabilityIndex:
    """The capabilities arranged for lookup by the finder."""

    caps: list[Capability]
    sensitive: set[str] = field(default_factory=set)
    refused: set[str] = field(default_factory=set)
    foreign: frozenset[str] = frozenset()
    interpreter: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        # modules whose attributes are listed: reached as a value or re-rooted inside a chain
        self.sensitive = {a.split(".")[0] for c in self.caps for a in c.attributes}
        self.refused = {m.split(".")[0] for c in self.caps for m in c.modules if "*" not in m}
        # attribute names that give a listed attribute away wherever the chain starts (a call, a
        # subscript, a lambda, a match pattern): the interpreter's own, and private ones
        self.tails = {
            a.rsplit(".", 1)[1]
            for c in self.caps
            for a in c.attributes
            if "*" not in a and "." in a and (a.split(".")[0] == "sys" or a.rsplit(".", 1)[1].startswith("_"))
        } - _COMMON_TAILS
        # the modules that are refused whole, and the interpreter's own: reached under another name, each counts
        self.interpreter = self.refused | {"sys", "os", "posix", "nt", "builtins"}
        # modules that are not the repository's: the standard library's and the image's packages
        names = {n for c in self.caps if c.module_stores for n in c.foreign}
        self.foreign = frozenset(names | set(getattr(sys, "stdlib_module_names", ())) if names else ())
        # modules whose submodules, read as attributes, must be loaded by the file's own imports: the standard
        # library's and the image's (importing them on the host to measure that does nothing else)
        measurable = {n for c in self.caps for n in c.foreign} | set(getattr(sys, "stdlib_module_names", ()))
        measuring = any(c.loaded_submodules for c in self.caps)
        self.measured = frozenset(measurable - _IMPORT_EFFECTS) if measuring else frozenset()
        # each capability's listed arguments, parsed: (callee or "*", keyword, position or None), and the callees
        # exempt from a keyword ("!callee:keyword")
        self.arguments: list[tuple[Capability, list[tuple[str, str, int | None]], list[tuple[str, str]]]] = []
        for cap in self.caps:
            entries = [e.split(":") for e in cap.arguments]
            listed = [(e[0], e[1], int(e[2]) if len(e) > 2 else None) for e in entries if not e[0].startswith("!")]
            exempt = [(e[0][1:], e[1]) for e in entries if e[0].startswith("!")]
            if listed:
                self.arguments.append((cap, listed, exempt))

    def module(self, dotted: str, reroot: bool = False) -> Iterator[Capability]:
        """Capabilities whose modules ``dotted`` is or is in; with ``reroot`` also through another module."""
        parts = dotted.split(".")
        candidates = [dotted]
        if reroot:
            candidates += [".".join(parts[i:]) for i in range(1, len(parts)) if parts[i] in self.refused]
        for cap in self.caps:
            if any(fnmatch.fnmatchcase(p, pat) for pat in cap.modules for c in candidates for p in _prefixes(c)):
                yield cap

    def attribute(self, dotted: str) -> Iterator[Capability]:
        candidates = self.rerooted(dotted)
        found = False
        for cap in self.caps:
            if any(fnmatch.fnmatchcase(p, pat) for pat in cap.attributes for c in candidates for p in _prefixes(c)):
                found = True
                yield cap
        if not found:  # a listed object under another module's name (`pathlib.attrgetter` is operator's)
            yield from self.same_object(dotted)

    def same_object(self, dotted: str) -> list[Capability]:
        """The capabilities whose listed attribute is the very object a standard-library name ``dotted`` (or a
        prefix of it) is: a module that imported a listed function keeps it under its own name."""
        listed = _listed_objects(tuple(self.caps))
        for prefix in _prefixes(dotted)[1:]:
            obj = stdlib_object(prefix)
            entry = listed.get(id(obj)) if obj is not _MISSING else None
            if entry is not None and entry[0] is obj:
                return entry[1]
        return []

    def rerooted(self, dotted: str) -> list[str]:
        """``dotted`` and each tail of it that starts at a listed module (``shutil.os.fork`` -> ``os.fork``)."""
        parts = dotted.split(".")
        return [dotted, *(".".join(parts[i:]) for i in range(1, len(parts)) if parts[i] in self.sensitive)]

    def flagged(self, attr: str) -> Iterator[Capability]:
        return (c for c in self.caps if getattr(c, attr))

    def defining(self, name: str) -> list[Capability]:
        """Capabilities that refuse defining (or binding) ``name``."""
        return [c for c in self.caps if name in c.definitions]


_MISSING = object()
#: Standard-library modules whose import does something (opens a browser, prints, starts a program, changes the
#: terminal): never imported to resolve a name.
_IMPORT_EFFECTS = frozenset({"this", "antigravity", "__hello__", "__phello__", "idlelib", "tkinter", "turtle",
                             "turtledemo", "readline", "rlcompleter", "site", "sitecustomize", "usercustomize",
                             "ensurepip", "venv", "test", "lib2to3", "pydoc_data", "__main__"})  # fmt: skip


@lru_cache(maxsize=4096)
def stdlib_object(dotted: str) -> Any:
    """The object a standard-library name (``pathlib.attrgetter``) is in this process, imported if need be
    (never a module whose import does something, nor a ``__main__``); ``_MISSING`` where there is none."""
    parts = dotted.split(".")
    if parts[0] not in getattr(sys, "stdlib_module_names", ()) or _IMPORT_EFFECTS.intersection(parts):
        return _MISSING
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        try:
            obj = sys.modules.get(name) or importlib.import_module(name)
        except Exception:  # noqa: BLE001 - not a module: a shorter prefix may be
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except Exception:  # noqa: BLE001 - no such attribute (or one that raises): nothing to compare
            return _MISSING
        return obj
    return _MISSING


def _is_module(dotted: str) -> bool:
    """Whether a standard-library name (``copy``, ``xml.dom``) is a module."""
    return isinstance(stdlib_object(dotted), types.ModuleType)


@lru_cache(maxsize=16)
def _listed_objects(caps: tuple[Capability, ...]) -> dict[int, tuple[Any, list[Capability]]]:
    """The listed functions and classes of ``caps``, and the refused builtins, by identity: what each is listed
    by. Built once per list of capabilities (every file a repair changes is checked against the same list)."""
    listed: dict[int, tuple[Any, list[Capability]]] = {}
    for cap in caps:
        for name in cap.attributes:
            obj = stdlib_object(name) if "*" not in name else _MISSING
            # functions and classes only: a data object (sys.stdout, a list) may be another name's by chance
            if obj is not _MISSING and (inspect.isroutine(obj) or isinstance(obj, type)):
                listed.setdefault(id(obj), (obj, []))[1].append(cap)
    dynamic = [c for c in caps if c.dynamic_attributes]
    for name in sorted({n for c in caps for n in c.names} | _BUILTINS_BY_VALUE | set(_GETATTR)):
        obj = getattr(builtins, name, _MISSING)  # a refused builtin under a module's name (`x.bltns.eval`)
        if obj is not _MISSING and inspect.isroutine(obj):
            listed.setdefault(id(obj), (obj, []))[1].extend(dynamic)
    return listed


def _own_scope(function: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``function``'s body that run in its own scope: not the bodies of functions, lambdas and
    classes inside it (their defaults and decorators do run in it)."""
    stack: list[ast.AST] = []
    if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
        stack.extend(function.body)
    elif isinstance(function, ast.Lambda):
        stack.append(function.body)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            stack.extend(node.args.defaults)
            stack.extend(d for d in node.args.kw_defaults if d is not None)
            stack.extend(getattr(node, "decorator_list", []))
        elif isinstance(node, ast.ClassDef):
            stack.extend(node.decorator_list)
            stack.extend(node.bases)
            stack.extend(node.keywords)
        else:
            stack.extend(ast.iter_child_nodes(node))


def _scope(node: ast.AST) -> ast.AST | None:
    """The function whose local namespace a name in ``node`` is looked up in; None at a module's or a class's level.
    A function's defaults, decorators and annotations are evaluated in the scope around it, not in it."""
    child, scope = node, getattr(node, "_sparring_parent", None)
    while scope is not None:
        if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef) and any(child is b for b in scope.body):
            return scope
        if isinstance(scope, ast.Lambda) and child is scope.body:
            return scope
        if isinstance(scope, ast.ClassDef) and any(child is b for b in scope.body):
            return None
        child, scope = scope, getattr(scope, "_sparring_parent", None)
    return None


def _one_of(dotted: str | None, names: Iterable[str]) -> str | None:
    """Which of ``names`` (standard-library functions) ``dotted`` is, by name or as the very object under another
    module's name; None for none."""
    if dotted is None:
        return None
    obj = _MISSING
    for name in names:
        if dotted == name:
            return name
        if obj is _MISSING:
            obj = stdlib_object(dotted)
            if obj is _MISSING:
                return None
        if obj is stdlib_object(name):
            return name
    return None


def qualified_scope(node: ast.AST) -> str:
    """The qualified name of the functions and classes around ``node`` (``Duration.__getattr__``, ``f.<lambda>``),
    as ``__qualname__`` spells it; a decorator, default or annotation belongs to the scope around its definition."""
    names: list[str] = []
    child, scope = node, getattr(node, "_sparring_parent", None)
    while scope is not None:
        if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            outside = child in scope.decorator_list or child is getattr(scope, "returns", None) or (
                isinstance(scope, ast.ClassDef) and (child in scope.bases or child in scope.keywords))  # fmt: skip
            if not outside and not isinstance(child, ast.arguments):
                names.append(scope.name)
        elif isinstance(scope, ast.Lambda) and child is scope.body:
            names.append("<lambda>")
        child, scope = scope, getattr(scope, "_sparring_parent", None)
    return ".".join(reversed(names))


def _prefixes(dotted: str) -> list[str]:
    parts = dotted.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


class CapabilityFinder(ast.NodeVisitor):
    """Every capability use in one module's AST."""

    def __init__(self, index: CapabilityIndex, path: str, lines: list[str]):
        self.index, self.path, self.lines = index, path, lines
        self.aliases: dict[str, str] = {}
        # module-level names bound by def, class or import and never deleted: those are not builtins
        self.defined: set[str] = set()
        self.uses: list[CapabilityUse] = []
        self.line_override: int | None = None
        self.oracle: OracleNames | None = None
        self._locals: dict[int, dict[str, list[ast.expr]]] = {}  # by function: its plain string locals
        self.imported: set[str] = set()  # the measured modules the file imports (absolute names)
        self.module_names: set[str] = set()  # names an ``import`` statement binds (each a module)
        self._fresh: frozenset[str] | None = None
        self._held: dict[str, str] | None = None

    # -- bookkeeping

    def prepare(self, tree: ast.AST) -> None:
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                child._sparring_parent = node  # type: ignore[attr-defined]
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
                    self.module_names.add(a.asname or a.name.split(".")[0])
                    self.imported.add(a.name)
            elif isinstance(node, ast.ImportFrom):
                base = "." * node.level + (node.module or "")
                if not node.level and node.module:
                    self.imported.add(node.module)
                    self.imported.update(f"{node.module}.{a.name}" for a in node.names
                                         if a.name != "*" and a.name in self.submodules(node.module))  # fmt: skip
                for a in node.names:
                    if a.name != "*":
                        # ``from . import x`` is ``.x`` (the package's x), ``from .m import x`` is ``.m.x``
                        joined = f"{base}{a.name}" if base.endswith(".") else f"{base}.{a.name}"
                        self.aliases[a.asname or a.name] = joined if base else a.name
        body = tree.body if isinstance(tree, ast.Module) else []
        self.defined = {n.name for n in body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
        self.defined.update(self.aliases)
        # `del NAME` makes NAME the builtin again, wherever it stands
        self.defined -= {t.id for n in ast.walk(tree) if isinstance(n, ast.Delete) for t in n.targets
                         if isinstance(t, ast.Name)}  # fmt: skip

    def _local_strings(self, function: ast.AST) -> dict[str, list[ast.expr]]:
        """The names of ``function`` bound only by plain assignments in it (``fmt = "..."``), with what they are
        assigned: a template held in such a name is read where it is used. A name bound any other way in it
        (a parameter, a loop, a match capture, ``except ... as``, a ``def``, an import, ``global`` or
        ``nonlocal``) is not one of them; neither is a module's or a class's name, which other code can rebind."""
        known = self._locals.get(id(function))
        if known is not None:
            return known
        assigned: dict[str, list[ast.expr]] = {}
        simple: set[int] = set()
        other: set[str] = set()
        for node in _own_scope(function):  # a nested function's assignments are its own locals
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if (
                isinstance(node, ast.AnnAssign) and node.value is not None) else []  # fmt: skip
            if targets and all(isinstance(t, ast.Name) for t in targets):
                for target in targets:
                    simple.add(id(target))
                    assigned.setdefault(target.id, []).append(node.value)  # type: ignore[attr-defined,arg-type]
        for node in ast.walk(function):  # any other binding, in it or in a scope inside it
            if isinstance(node, ast.Global | ast.Nonlocal):
                other.update(node.names)
            elif isinstance(node, ast.arg):
                other.add(node.arg)
            elif isinstance(node, ast.alias):
                other.add(node.asname or node.name.split(".")[0])
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node is not function:
                other.add(node.name)
            elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
                other.add(node.name)
            elif isinstance(node, ast.MatchMapping) and node.rest:
                other.add(node.rest)
        for node in ast.walk(function):
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load) and id(node) not in simple:
                other.add(node.id)
        known = {name: values for name, values in assigned.items() if name not in other}
        self._locals[id(function)] = known
        return known

    def templates(self, node: ast.AST, depth: int = 0) -> list[str] | None:
        """Every string ``node`` can be, where it is string literals joined by ``+``, repeated by ``*``, or a
        function's local name assigned only such expressions; None where it is anything else."""
        if depth > 8:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.Name):
            scope = _scope(node)
            values = self._local_strings(scope).get(node.id) if scope is not None else None
            if values is None:
                return None
            found: list[str] = []
            for value in values:
                more = self.templates(value, depth + 1)
                if more is None:
                    return None
                found += more
            return found[:_MAX_TEMPLATES] if len(found) <= _MAX_TEMPLATES else None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.templates(node.left, depth + 1), self.templates(node.right, depth + 1)
            if left is None or right is None or len(left) * len(right) > _MAX_TEMPLATES:
                return None
            return [a + b for a in left for b in right]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            text, times = (node.left, node.right) if isinstance(node.right, ast.Constant) else (node.right, node.left)
            parts = self.templates(text, depth + 1)
            if parts is None or not isinstance(times, ast.Constant) or type(times.value) is not int:
                return None
            return [p * max(0, min(times.value, 64)) for p in parts]
        return None

    def format_fields(self, node: ast.AST, template: str) -> None:
        """The names a ``str.format`` template's fields look up, each as an attribute read on an object not
        known statically (``'{0._sys.modules}'.format(collections)`` reads ``modules`` as ``x._sys.modules``
        does)."""
        if "{" not in template:
            return
        try:
            names = list(format_walk(template))
        except ValueError:  # not a template: str.format would refuse it
            return
        for name in names:
            self.unknown_attribute(node, name, "format field ")

    def format_method(self, node: ast.AST, receiver: ast.AST, method: str) -> None:
        """``receiver.format`` (or ``format_map``, or ``getattr(receiver, "format")``): its template is read
        where the check can tell what it is; a template it cannot read is refused, since its fields may walk
        to any attribute."""
        found = self.templates(receiver)
        if found is None:
            self.add(node, self.index.flagged("dynamic_attributes"),
                     f"str.{method} of a template the check cannot read")  # fmt: skip
        elif not isinstance(receiver, ast.Constant):  # a literal is read where it stands
            for template in found:
                self.format_fields(node, template)

    def add(self, node: ast.AST, caps: Iterable[Capability], what: str) -> None:
        line: int = self.line_override or getattr(node, "lineno", None) or 1
        # every line the construct spans is its text: a use that starts on a line the bug removed
        # and goes on over new lines is not that line restored
        end = line if self.line_override else max(line, getattr(node, "end_lineno", None) or line)
        text = "\n".join(self.lines[i - 1].strip() for i in range(line, end + 1) if 0 < i <= len(self.lines))
        for cap in caps:
            self.uses.append(CapabilityUse(self.path, line, cap.name, what, text, qualified_scope(node)))

    def dotted(self, node: ast.AST) -> str | None:
        """The dotted name an expression refers to, aliases resolved; None when it is not a name."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Call) and self.constant_getattr(node):
            base = self.dotted(node.args[0])
            return None if base is None else ".".join([base, node.args[1].value, *reversed(parts)])  # type: ignore[attr-defined]
        if isinstance(node, ast.Name):
            return ".".join([self.aliases.get(node.id, node.id), *reversed(parts)])
        return None

    def builtin(self, node: ast.AST, names: Iterable[str]) -> str | None:
        if isinstance(node, ast.Name) and node.id in names and node.id not in self.defined:
            return node.id
        return None

    def submodules(self, package: str) -> frozenset[str]:
        """``package``'s submodules, where it is a measured package (the standard library's or the image's)."""
        return submodules(package) if package.split(".")[0] in self.index.measured else frozenset()

    def fresh(self) -> frozenset[str]:
        """Every ``package.attribute`` a fresh interpreter has after the file's imports of measured modules."""
        if self._fresh is None:
            self._fresh = fresh_attributes(tuple(sorted(m for m in self.imported
                                                        if m.split(".")[0] in self.index.measured)))  # fmt: skip
        return self._fresh

    def held(self) -> dict[str, str]:
        """``module.attribute`` -> the package it holds, after a fresh interpreter runs the file's imports
        (``shutil.collections``: ``collections``)."""
        if self._held is None:
            self._held = held_packages(tuple(sorted(m for m in self.imported
                                                    if m.split(".")[0] in self.index.measured)))  # fmt: skip
        return self._held

    def held_chain(self, node: ast.AST, parts: list[str], whole: bool) -> None:
        """A chain rooted at an imported module, read link by link as a fresh interpreter has it: where a link is
        a package the module before it holds (``shutil.collections``), the rest of the chain is read from that
        package (``.abc``, a submodule), and the chain used whole (``c = shutil.collections``) is that package
        used as a value."""
        current = parts[0]
        for i in range(1, len(parts)):
            if parts[i] in self.submodules(current):
                current = f"{current}.{parts[i]}"
                continue
            package = self.held().get(f"{current}.{parts[i]}") if current.split(".")[0] in self.index.measured else None
            if package is None:
                return
            current = package
            if i + 1 < len(parts):
                self.submodule_read(node, [package, *parts[i + 1 :]], True)
            elif whole:
                self.package_value(node, package)

    def submodule_read(self, node: ast.AST, parts: list[str], rooted: bool) -> None:
        """A chain of attribute names (``email.message.Message``) that reads a submodule of a measured package
        the file's imports do not load: present where the test runner loaded it, absent in a user's process. The
        chain is read from its root where that is an imported name, and from every link named like a measured
        top-level package (``compat.email.message``, the package held by another module)."""
        starts = [0] if rooted else []
        starts += [i for i in range(1, len(parts) - 1) if parts[i] in self.index.measured]
        for start in starts:
            for i in range(start + 1, len(parts)):
                package, name = ".".join(parts[start:i]), parts[i]
                if name not in self.submodules(package):
                    break
                if f"{package}.{name}" not in self.fresh():
                    self.add(node, self.index.flagged("loaded_submodules"),
                             f"submodule {package}.{name} read as an attribute, not imported")  # fmt: skip
                    return

    def package_value(self, node: ast.AST, module: str) -> None:
        """A measured package used as a value (``dir(email)``, ``e = email``): its attributes are then read where
        the check cannot see which, so it may have no submodule the file's imports leave unloaded."""
        unloaded = sorted(s for s in self.submodules(module) if f"{module}.{s}" not in self.fresh())
        if unloaded:
            what = f"package {module} used as a value (its submodule {unloaded[0]} may be loaded or not)"
            self.add(node, self.index.flagged("loaded_submodules"), what)

    def module_value(self, node: ast.AST, module: str) -> None:
        """A measured module used as a value: a package itself, the package a module holds (``from shutil import
        collections``), or a module whose held packages are then read where the check cannot see
        (``match tokenize: case object(collections=c)``)."""
        parts = module.split(".")
        self.held_chain(node, parts, True)
        self.package_value(node, module)
        if module.split(".")[0] in self.index.measured:
            for package in sorted({p for held, p in self.held().items() if held.rsplit(".", 1)[0] == module}):
                self.package_value(node, package)

    def constant_getattr(self, node: ast.Call) -> bool:
        return (
            self.builtin(node.func, _GETATTR) is not None
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        )

    # -- visitors

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self.add(node, self.index.module(a.name), f"import {a.name}")
            self.oracle_import(node, a.name)
            self._definition(node, a.asname or a.name.partition(".")[0])

    def oracle_import(self, node: ast.AST, *dotted: str | None) -> None:
        """An import of an oracle test module, by any of the ``dotted`` names it may mean."""
        oracle = self.oracle
        found = next((d for d in dotted if d and oracle is not None and oracle.module(d)), None)
        if found is not None:
            self.add(node, [ORACLE], f"import of the oracle test module {found}")

    def oracle_reference(self, node: ast.AST, dotted: str) -> None:
        """A name that reaches an oracle test module as an attribute of a package (``tests.test_core.X``)."""
        if self.oracle is None:
            return
        level = len(dotted) - len(dotted.lstrip("."))
        absolute = OracleNames.resolve(self.path, level, dotted[level:]) if level else dotted
        if absolute is not None and self.oracle.module(absolute):
            self.add(node, [ORACLE], f"the oracle test module reached as {dotted.lstrip('.')}")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        for a in node.names:
            if a.name != "*":
                self._definition(node, a.asname or a.name)
        if node.level:  # the repository's own modules: an oracle test module among them
            base = OracleNames.resolve(self.path, node.level, module)
            if base is not None:
                self.oracle_import(node, base, *(f"{base}.{a.name}".lstrip(".") for a in node.names))
            return
        self.oracle_import(node, module, *(f"{module}.{a.name}" for a in node.names if a.name != "*"))
        self.add(node, self.index.module(module), f"import {module}")
        for a in node.names:
            if a.name == "*":
                if self.submodules(module) and f"{module}.__all__" not in self.fresh():
                    # with no __all__, a star import copies whichever submodules happen to be loaded
                    self.package_value(node, module)
                if module.split(".")[0] in self.index.sensitive:
                    self.add(node, self.index.flagged("module_values"), f"from {module} import *")
                continue
            full = f"{module}.{a.name}"
            self.add(node, self.index.attribute(full), full)
            self.add(node, (c for c in self.index.caps if a.name in c.attribute_names), a.name)

    def visit_Name(self, node: ast.Name) -> None:
        if not isinstance(node.ctx, ast.Load):
            # every binding of a name: `a, __eq__ = ...`, `for __eq__ in`, `(__eq__ := f)`, `with f as __eq__`
            self._definition(node, node.id)
            if node.id in _NAMES_AS_DATA:
                self.names_as_data(node, node.id)
        parent = getattr(node, "_sparring_parent", None)
        name = self.builtin(node, {n for c in self.index.caps for n in c.names})
        if name is not None:
            self.add(node, (c for c in self.index.caps if name in c.names), name)
        if self.builtin(node, _GETATTR) and not (isinstance(parent, ast.Call) and parent.func is node):
            self.add(node, self.index.flagged("dynamic_attributes"), f"{node.id} used as a value")
        module = self.aliases.get(node.id, "")
        if module and not (isinstance(parent, ast.Attribute) and parent.value is node):
            self.add(node, self.index.module(module), node.id)  # a refused module used as a value
            if isinstance(node.ctx, ast.Load) and not (
                isinstance(parent, ast.Call) and parent.args[:1] == [node] and self.constant_getattr(parent)
            ):
                self.module_value(node, module)
            self.class_from_data(node, module)
        if node.id == "__name__" and not isinstance(node.ctx, ast.Load):  # the module every class made here claims
            self.add(node, self.index.defining("__module__"), "__name__ bound")
        if (module and isinstance(node.ctx, ast.Load) and self.wrapper(module) is not None
                and not (isinstance(parent, ast.Call) and parent.func is node)):  # fmt: skip
            self.add(node, self.index.flagged("dynamic_attributes"), f"{module} used as a value")
        if (
            isinstance(node.ctx, ast.Load)
            and module.split(".")[-1] in self.index.sensitive
            and not (isinstance(parent, ast.Attribute) and parent.value is node)
            and not (isinstance(parent, ast.Call) and parent.args[:1] == [node] and self.constant_getattr(parent))
        ):
            self.add(node, self.index.flagged("module_values"), f"module {module} used as a value")
        elif module and isinstance(node.ctx, ast.Load) and (node.id in self.module_names or _is_module(module)):
            self.foreign_module_value(node, module)

    def foreign_module_value(self, node: ast.AST, module: str) -> None:
        """A module of the standard library or the image bound, stored, passed or returned as a value (``c = copy``,
        ``[copy][0]``, ``f(copy)``): its private attributes (``c._reconstruct``, which sets any attribute from data)
        are then read where the check cannot tell them from ``self._x``. Reading an attribute of it, a constant
        ``getattr`` on it and a truth or identity test (``if json is None``, an optional import) stay allowed."""
        parent = getattr(node, "_sparring_parent", None)
        if module.startswith(".") or module.split(".")[0] not in self.index.foreign:
            return
        if isinstance(parent, ast.Attribute) and parent.value is node:
            return
        if isinstance(parent, ast.Call) and parent.args[:1] == [node] and self.constant_getattr(parent):
            return
        tested = isinstance(parent, ast.If | ast.IfExp | ast.While) and parent.test is node
        negated = isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not)
        if tested or negated or isinstance(parent, ast.Compare):
            return
        self.add(node, self.index.flagged("module_values"), f"module {module} used as a value")

    def attribute_name(self, node: ast.AST, attr: str, how: str) -> None:
        """An attribute read whose object is not known statically: refused by name alone."""
        self.add(node, (c for c in self.index.caps if attr in c.attribute_names), f"{how}{attr}")
        if attr in self.index.tails:
            self.add(node, (c for c in self.index.caps if any(a.rsplit(".", 1)[-1] == attr for a in c.attributes)),
                     f"{how}{attr} on an object not known statically")  # fmt: skip

    def unknown_attribute(self, node: ast.AST, attr: str, how: str) -> None:
        """An attribute read on an object not known statically (a chain's link after a call, subscript or
        variable; a format field): refused by name, and where the name is that of a listed module (``sys``,
        ``os``, or a module's private alias of one, ``collections._sys``), as that module used as a value."""
        self.attribute_name(node, attr, how)
        if attr in _MODULE_ATTRIBUTES:
            self.add(node, self.index.flagged("module_values"), f"{how}{attr}: a module reached through an object")

    def visit_MatchClass(self, node: ast.MatchClass) -> None:
        # `case object(f_back=f)` reads the attribute f_back of the subject
        for attr in node.kwd_attrs:
            self.attribute_name(node, attr, "pattern attribute ")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.add(node, (c for c in self.index.caps if node.attr in c.attribute_names), f".{node.attr}")
        root_node: ast.expr = node.value
        while isinstance(root_node, ast.Attribute):
            root_node = root_node.value
        imported = isinstance(root_node, ast.Name) and root_node.id in self.aliases
        if (
            not imported
            and not (isinstance(root_node, ast.Call) and self.constant_getattr(root_node))
            and node.attr in self.index.tails
        ):
            # a chain rooted at a call, subscript, lambda or a variable (`s = [c][0]._sys; s.modules`)
            self.attribute_name(node, node.attr, ".")
        reads = isinstance(node.ctx, ast.Load)
        if reads and not imported and not (isinstance(root_node, ast.Call) and self.constant_getattr(root_node)):
            if node.attr in _MODULE_ATTRIBUTES:
                self.add(node, self.index.flagged("module_values"), f".{node.attr}: a module reached through an object")
        if reads and node.attr in _FORMAT_METHODS:
            self.format_method(node, node.value, node.attr)
        called = getattr(node, "_sparring_parent", None)
        if node.attr in _NAMED_ATTRIBUTE_METHODS and not (isinstance(called, ast.Call) and called.func is node):
            # `fwd = T.__getattr__`: a lookup by a name given as data, wherever it is called
            self.add(node, self.index.flagged("dynamic_attributes"), f".{node.attr} used as a value")
        if not imported and node.attr in _BUILTINS_BY_VALUE:  # the builtins module reached as a value
            self.add(node, self.index.flagged("dynamic_attributes"), f".{node.attr} on an object not known statically")
        if isinstance(node.ctx, ast.Store):
            self.add(node, self.index.defining(node.attr), f".{node.attr} assigned")
            if node.attr in _NAMES_AS_DATA:
                self.names_as_data(node, node.attr)
        parent = getattr(node, "_sparring_parent", None)
        if not (isinstance(parent, ast.Attribute) and parent.value is node):  # the whole chain, once
            dotted = self.dotted(node)
            if (
                dotted is not None
                and self.wrapper(dotted) is not None
                and not (isinstance(parent, ast.Call) and parent.func is node)
            ):
                self.add(node, self.index.flagged("dynamic_attributes"), f"{dotted} used as a value")
            links: list[str] = []
            link: ast.expr = node
            while isinstance(link, ast.Attribute):
                links.append(link.attr)
                link = link.value
            while isinstance(link, ast.Call) and self.constant_getattr(link):  # getattr(shutil, "collections").abc
                link = link.args[0]
                while isinstance(link, ast.Attribute):
                    link = link.value
            rooted = isinstance(link, ast.Name) and link.id in self.aliases
            chain = (self.dotted(node) or "?").split(".") if rooted else ["?", *reversed(links)]
            self.submodule_read(node, chain, rooted)
            if rooted:
                whole = isinstance(node.ctx, ast.Load) and not (
                    isinstance(parent, ast.Call)
                    and (parent.func is node or (parent.args[:1] == [node] and self.constant_getattr(parent)))
                )
                self.held_chain(node, chain, whole)
            if dotted is not None:
                self.renamed_module(node, dotted)
                self.class_from_data(node, dotted)
                caps = list(self.index.attribute(dotted))
                if dotted in _WRITE_ONLY and isinstance(parent, ast.Subscript) and not isinstance(parent.ctx, ast.Load):
                    caps = [c for c in caps if c.name != "runner_state"]  # setting a variable reads nothing
                self.add(node, caps, dotted)
                self.oracle_reference(node, dotted)
                root: ast.expr = node
                while isinstance(root, ast.Attribute):
                    root = root.value
                if isinstance(root, ast.Name) and root.id in self.aliases:
                    # each use of a refused module counts, so an import already there allows no new use
                    self.add(node, self.index.module(dotted, reroot=True), dotted)
                    self.foreign_attribute(node, dotted, node.ctx)
                # a listed module reached through an imported module (shutil.os), used as a value
                if (
                    dotted.split(".")[-1] in self.index.sensitive
                    and isinstance(root, ast.Name)
                    and (root.id in self.aliases)
                ):
                    self.add(node, self.index.flagged("module_values"), f"module {dotted} used as a value")
                elif isinstance(root, ast.Name) and root.id in self.aliases and isinstance(node.ctx, ast.Load):
                    if not (isinstance(parent, ast.Call) and parent.func is node) and _is_module(dotted):
                        self.foreign_module_value(node, dotted)  # `m = xml.dom`, `[email.utils][0]`
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = self.builtin(node.func, _GETATTR)
        if func is not None:
            if self.constant_getattr(node):
                attr = node.args[1].value  # type: ignore[attr-defined]
                base = self.dotted(node.args[0])
                if attr in _FORMAT_METHODS:
                    self.format_method(node, node.args[0], attr)
                anchor = node.args[0]
                while isinstance(anchor, ast.Attribute):
                    anchor = anchor.value
                if not (isinstance(anchor, ast.Name) and anchor.id in self.aliases):  # an object not known statically
                    self.unknown_attribute(node, attr, f"{func} ")
                self.add(node, (c for c in self.index.caps if attr in c.attribute_names), f"{func} {attr!r}")
                if func == "setattr":
                    self.add(node, self.index.defining(attr), f"setattr {attr!r}")
                    if attr in _NAMES_AS_DATA:
                        self.names_as_data(node, attr)
                if base is not None:
                    self.add(node, self.index.attribute(f"{base}.{attr}"), f"{base}.{attr}")
                    root = node.args[0]
                    while isinstance(root, ast.Attribute):
                        root = root.value
                    self.submodule_read(node, f"{base}.{attr}".split("."),
                                        isinstance(root, ast.Name) and root.id in self.aliases)  # fmt: skip
                    if isinstance(root, ast.Name) and root.id in self.aliases:  # used whole unless a chain goes on
                        above = getattr(node, "_sparring_parent", None)
                        whole = not (isinstance(above, ast.Attribute) and above.value is node)
                        self.held_chain(node, f"{base}.{attr}".split("."), whole)
                    if isinstance(root, ast.Name) and root.id in self.aliases:
                        store = ast.Store() if func in ("setattr", "delattr") else ast.Load()
                        self.foreign_attribute(node, f"{base}.{attr}", store)
            else:
                self.add(node, self.index.flagged("dynamic_attributes"), f"{func} with a computed name")
        if self.builtin(node.func, ("type",)) and len(node.args) == 3:
            self.class_namespace(node, node.args[2])
        for keyword in node.keywords:  # dict(__eq__=f), SimpleNamespace(__eq__=f): a definition by keyword
            if keyword.arg is not None:
                self._definition(node, keyword.arg)
                if keyword.arg in _NAMES_AS_DATA:
                    self.names_as_data(node, keyword.arg)
        if isinstance(node.func, ast.Attribute) and node.func.attr in _NAMED_ATTRIBUTE_METHODS:
            # obj.__setattr__(name, v) or T.__setattr__(obj, name, v): the name is second from the end
            at = len(node.args) - (2 if node.func.attr == "__setattr__" else 1)
            name = node.args[at] if 0 <= at < len(node.args) else None
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                self.add(node, self.index.flagged("dynamic_attributes"), f"{node.func.attr} with a computed name")
            else:
                self.attribute_name(node, name.value, f"{node.func.attr} ")
        self.logging_template(node)
        self.listed_arguments(node)
        self.class_factory(node)
        if isinstance(node.func, ast.Attribute) and node.func.attr in _ARGV_PARSERS:
            given = node.args[:1] + [k.value for k in node.keywords if k.arg == "args"]
            if not (given and isinstance(given[0], ast.List | ast.Tuple | ast.ListComp)):
                # `parser.parse_args()` (or of None, or of a value the check cannot see) parses sys.argv[1:]
                self.add(node, (c for c in self.index.caps if "sys.argv" in c.attributes),
                         f"{node.func.attr}() of argv")  # fmt: skip
        limit = self.wrapper(self.dotted(node.func))
        if limit is not None and (
            len(node.args) > limit
            or any(isinstance(a, ast.Starred) for a in node.args)
            or any(k.arg in ("assigned", "updated", None) for k in node.keywords)
        ):  # the attribute names they copy, given as data, are reads and writes by name
            self.add(node, self.index.flagged("dynamic_attributes"), "a wrapper copying attributes named as data")
        opener = self.builtin(node.func, ("open",)) or self.dotted(node.func)
        first = node.args[0] if node.args else None
        if opener in _OPENERS and isinstance(first, ast.Constant) and isinstance(first.value, int):
            self.add(node, self.index.flagged("open_fd"), f"{opener} on descriptor {first.value}")
        self.generic_visit(node)

    def renamed_module(self, node: ast.AST, dotted: str) -> None:
        """A listed or refused module reached as another module's attribute under a name of its own
        (``enum.bltns`` is the builtins module): as that module used as a value."""
        parts = dotted.split(".")
        for i in range(2, len(parts) + 1):
            obj = stdlib_object(".".join(parts[:i]))
            name = getattr(obj, "__name__", None) if isinstance(obj, types.ModuleType) else None
            # under another name than its own (`shutil.os` is rerooted as os; `os.path` is posixpath, not listed)
            if name and parts[i - 1] != name.rsplit(".", 1)[-1] and name.split(".")[0] in self.index.interpreter:
                self.add(node, [*self.index.module(name), *self.index.flagged("module_values")],
                         f"module {name} reached as {'.'.join(parts[:i])}")  # fmt: skip
                return

    def wrapper(self, dotted: str | None) -> int | None:
        """How many positional arguments ``dotted`` takes before its attribute names, where it is functools'
        ``update_wrapper`` or ``wraps`` (under any module's name); None for anything else."""
        name = _one_of(dotted, _WRAPPERS)
        return None if name is None else _WRAPPERS[name]

    def listed_arguments(self, node: ast.Call) -> None:
        """Arguments a capability lists for a callee (``warnings.catch_warnings(record=True)``, ``stacklevel=`` to
        anything but ``warnings.warn``), given a value other than a literal False, None or 0."""
        dotted = self.dotted(node.func)
        for cap, listed, exempts in self.index.arguments:
            exempt = {keyword for callee, keyword in exempts if _one_of(dotted, [callee])}
            for callee, keyword, at in listed:
                if keyword in exempt or not (callee == "*" or _one_of(dotted, [callee])):
                    continue
                given = [k.value for k in node.keywords if k.arg == keyword]
                if at is not None and len(node.args) > at:
                    given.append(node.args[at])
                unseen = callee != "*" and (any(k.arg is None for k in node.keywords) or any(
                    isinstance(a, ast.Starred) for a in node.args))  # fmt: skip
                if unseen or any(not (isinstance(v, ast.Constant) and v.value in _OFF) for v in given):
                    self.add(node, [cap], f"{dotted or callee}({keyword}=...)")

    def class_factory(self, node: ast.Call) -> None:
        """A class made from data: ``make_dataclass``, ``types.new_class`` given code to fill its namespace, or
        ``type.__new__`` given a namespace the check cannot read (what a class statement's body would show)."""
        name = _one_of(self.dotted(node.func), _CLASS_FACTORIES)
        if name is None:
            return
        at = _CLASS_FACTORIES[name]
        if name == "type.__new__" and len(node.args) > at and not node.keywords:
            self.class_namespace(node, node.args[at])
        elif name != "types.new_class" or len(node.args) > at or node.keywords:
            self.add(node, self.index.defining("__annotations__"), f"{name}: a class made from data")

    def class_from_data(self, node: ast.expr, dotted: str) -> None:
        """``dataclasses.dataclass`` anywhere but on a class statement, applied to it first: on a class the check
        does not read, its annotation keys may be code (dataclasses executes them) and its module another's."""
        if _one_of(dotted, _CODE_FROM_ANNOTATIONS) is None:
            return
        parent = getattr(node, "_sparring_parent", None)
        decorator = parent if isinstance(parent, ast.Call) and parent.func is node else node
        owner = getattr(decorator, "_sparring_parent", None)
        if not (isinstance(owner, ast.ClassDef) and owner.decorator_list[-1:] == [decorator]):
            self.add(node, self.index.defining("__annotations__"), f"{dotted} on a class the check does not read")

    def logging_template(self, node: ast.Call) -> None:
        """A logging format of ``style="{"`` (``Formatter``, ``basicConfig``, ``StrFormatStyle``): logging fills
        it in with ``str.format``, so its template is read as one."""
        callee = self.dotted(node.func) or ""
        style = next((k.value for k in node.keywords if k.arg == "style"), None)
        if style is None and callee.endswith("Formatter") and len(node.args) >= 3:
            style = node.args[2]
        # a style the check cannot read may be "{"; "%" and "$" look nothing up by attribute
        braces = style is not None and not (isinstance(style, ast.Constant) and style.value in ("%", "$"))
        if not (braces or callee.endswith("StrFormatStyle")):
            return
        for template in [*node.args[:1], *(k.value for k in node.keywords if k.arg in ("fmt", "format"))]:
            self.format_method(node, template, "format (a logging template)")

    def class_namespace(self, node: ast.Call, namespace: ast.expr) -> None:
        """``type(name, bases, namespace)``: its keys are definitions, and must be constants to be checked."""
        if not isinstance(namespace, ast.Dict) or any(
            not (isinstance(k, ast.Constant) and isinstance(k.value, str)) for k in namespace.keys
        ):
            self.add(node, self.index.flagged("dynamic_attributes"), "type() with computed attribute names")
            return
        for key in namespace.keys:
            self._definition(node, key.value)  # type: ignore[union-attr]
            if key.value in _NAMES_AS_DATA:  # type: ignore[union-attr]
                self.names_as_data(node, key.value)  # type: ignore[union-attr]

    def foreign_attribute(self, node: ast.AST, dotted: str, ctx: ast.expr_context) -> None:
        """Replacing an attribute of a module that is not the repository's, or reading a private one."""
        if dotted.split(".")[0].lstrip(".") not in self.index.foreign or dotted.startswith("."):
            return
        if isinstance(ctx, ast.Store | ast.Del):
            self.add(node, self.index.flagged("module_stores"), f"{dotted} replaced")
        elif any(p.startswith("_") and not p.startswith("__") for p in dotted.split(".")[1:]):
            self.add(node, self.index.flagged("module_stores"), f"private {dotted}")

    def names_as_data(self, node: ast.AST, name: str) -> None:
        """``__match_args__`` or ``__slots__`` bound: the interpreter reads each name it holds by ``getattr``, so
        each must be a string constant in a class body's assignment, checked as an attribute of an unknown object."""
        statement = getattr(node, "_sparring_parent", None)
        body = getattr(statement, "_sparring_parent", None)
        value = statement.value if isinstance(statement, ast.Assign | ast.AnnAssign) else None
        if isinstance(statement, ast.Assign) and statement.targets != [node]:
            value = None
        items = value.elts if isinstance(value, ast.Tuple | ast.List) else [value]
        if not isinstance(body, ast.ClassDef) or not all(
            isinstance(i, ast.Constant) and isinstance(i.value, str) for i in items
        ):
            self.add(node, self.index.flagged("dynamic_attributes"), f"{name} with names the check cannot read")
            return
        for item in items:
            self.unknown_attribute(node, item.value, f"{name} name ")  # type: ignore[union-attr]

    def _definition(self, node: ast.AST, name: str) -> None:
        self.add(node, self.index.defining(name), f"{name} defined")

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._definition(node, node.name)
        if node.returns is not None:
            self.visit_annotation(node.returns)
        for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs, node.args.vararg,
                    node.args.kwarg]:  # fmt: skip
            if arg is not None and arg.annotation is not None:
                self.visit_annotation(arg.annotation)
        for child in [*node.decorator_list, *node.args.defaults, *node.args.kw_defaults, *node.body]:
            if child is not None:
                self.visit(child)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def _bound_name(self, node: _NameBinder) -> None:
        """A name bound by a class statement (in a class body, a class named ``__eq__`` is its equality), an
        ``except ... as`` or a match capture (``case x``, ``case [*x]``, ``case {**x}``)."""
        name = node.rest if isinstance(node, ast.MatchMapping) else node.name
        if name:
            self._definition(node, name)
        self.generic_visit(node)

    visit_ExceptHandler = visit_MatchAs = visit_MatchStar = visit_MatchMapping = _bound_name

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        """A class statement; one that makes a metaclass (a base of ``type``) or is made by one that is not the
        standard library's writes class namespaces by keys the check cannot read (``ns['__match' + '_args__']``)."""
        for base in node.bases:
            dotted = self.dotted(base) or ""
            obj = stdlib_object(dotted) if dotted else _MISSING
            if self.builtin(base, {"type"}) or (isinstance(obj, type) and issubclass(obj, type)):
                self.add(node, self.index.flagged("dynamic_attributes"), f"metaclass {node.name} defined")
        for keyword in node.keywords:
            meta = self.dotted(keyword.value) if keyword.arg == "metaclass" else None
            if keyword.arg == "metaclass" and (not meta or stdlib_object(meta) is _MISSING):
                self.add(node, self.index.flagged("dynamic_attributes"), f"class {node.name} made by a metaclass "
                         f"the check cannot read ({ast.unparse(keyword.value)})")  # fmt: skip
        self._bound_name(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if isinstance(getattr(node, "_sparring_parent", None), ast.ClassDef) and isinstance(node.target, ast.Name):
            # a field of a class body: dataclasses' replace, asdict and generated __match_args__ read it by getattr
            self.unknown_attribute(node, node.target.id, "class field ")
        self.visit_annotation(node.annotation)
        self.visit(node.target)
        if node.value is not None:
            self.visit(node.value)

    def visit_annotation(self, node: ast.AST) -> None:
        """An annotation, and the code inside each string of it (``get_type_hints`` evaluates those)."""
        self.visit(node)
        for sub in ast.walk(node):
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                try:
                    inner = pyast.parse(sub.value.strip(), mode="eval")
                except (SyntaxError, ValueError):
                    continue
                outer, self.line_override = self.line_override, self.line_override or sub.lineno
                try:
                    self.prepare_parents(inner)
                    self.visit_annotation(inner.body)
                finally:
                    self.line_override = outer

    @staticmethod
    def prepare_parents(tree: ast.AST) -> None:
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                child._sparring_parent = node  # type: ignore[attr-defined]

    def visit_Constant(self, node: ast.Constant) -> None:
        """A string of the source: as a template's fields, and against the oracle's and each capability's
        string patterns."""
        if not isinstance(node.value, str):
            return
        text = node.value
        if self.oracle is not None and self.oracle.pattern is not None:
            named = self.oracle.pattern.search(text)
            if named:
                self.add(node, [ORACLE], f"a string naming the oracle test file {named.group(1)}")
        self.format_fields(node, text)
        for cap in self.index.caps:
            for pattern in cap.strings:
                if pattern.search(text):
                    self.add(node, [cap], f"string matching {pattern.pattern!r}")
                    break
