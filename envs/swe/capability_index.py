"""The capabilities a repair may not add, as the AST walk looks them up (:mod:`~sparring.envs.swe.capability_finder`).

:class:`Capability` is one table of ``capabilities.toml``; :class:`CapabilityIndex` arranges a list of them for
the walk's lookups; :func:`stdlib_object` is what a standard-library name is in this process.
"""

from __future__ import annotations

import builtins
import fnmatch
import importlib
import inspect
import re
import sys
import types
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from sparring.envs.swe.fresh_imports import TaskImage, stdlib_names

__all__ = ["BUILTINS_BY_VALUE", "GETATTR", "MISSING", "ORACLE", "Capability", "CapabilityIndex", "CapabilityUse",
           "OracleNames", "is_module", "stdlib_object"]  # fmt: skip


#: The builtins that read or set an attribute by a name given as data.
GETATTR = ("getattr", "setattr", "delattr", "hasattr")
#: Builtins refused by name that a module object held in a variable (``builtins``) would give by attribute.
BUILTINS_BY_VALUE = frozenset({"getattr", "setattr", "delattr", "vars", "globals", "locals", "__import__", "eval",
                                "exec"})  # fmt: skip


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


#: Names of listed attributes too common on other objects to refuse wherever a chain starts.
_COMMON_TAILS = frozenset({"path", "flags", "exit", "stdout", "stderr", "stdin"})


@dataclass
class CapabilityIndex:
    """The capabilities arranged for lookup by the finder, and the image whose interpreter the checked code runs in
    (its standard library and its fresh imports are measured there; None: in this process, :mod:`fresh_imports`)."""

    caps: list[Capability]
    image: TaskImage | None = None
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
        stdlib = stdlib_names(self.image) if names or any(c.loaded_submodules for c in self.caps) else frozenset()
        self.foreign = frozenset(names | stdlib if names else ())
        # modules whose submodules, read as attributes, must be loaded by the file's own imports: the standard
        # library's and the image's (importing them in a fresh interpreter to measure that does nothing else)
        measurable = {n for c in self.caps for n in c.foreign} | stdlib
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
            entry = listed.get(id(obj)) if obj is not MISSING else None
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


MISSING = object()
#: Standard-library modules whose import does something (opens a browser, prints, starts a program, changes the
#: terminal): never imported to resolve a name.
_IMPORT_EFFECTS = frozenset({"this", "antigravity", "__hello__", "__phello__", "idlelib", "tkinter", "turtle",
                             "turtledemo", "readline", "rlcompleter", "site", "sitecustomize", "usercustomize",
                             "ensurepip", "venv", "test", "lib2to3", "pydoc_data", "__main__"})  # fmt: skip


@lru_cache(maxsize=4096)
def stdlib_object(dotted: str) -> Any:
    """The object a standard-library name (``pathlib.attrgetter``) is in this process, imported if need be
    (never a module whose import does something, nor a ``__main__``); ``MISSING`` where there is none."""
    parts = dotted.split(".")
    if parts[0] not in getattr(sys, "stdlib_module_names", ()) or _IMPORT_EFFECTS.intersection(parts):
        return MISSING
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
            return MISSING
        return obj
    return MISSING


def is_module(dotted: str) -> bool:
    """Whether a standard-library name (``copy``, ``xml.dom``) is a module."""
    return isinstance(stdlib_object(dotted), types.ModuleType)


@lru_cache(maxsize=16)
def _listed_objects(caps: tuple[Capability, ...]) -> dict[int, tuple[Any, list[Capability]]]:
    """The listed functions and classes of ``caps``, and the refused builtins, by identity: what each is listed
    by. Built once per list of capabilities (every file a repair changes is checked against the same list)."""
    listed: dict[int, tuple[Any, list[Capability]]] = {}
    for cap in caps:
        for name in cap.attributes:
            obj = stdlib_object(name) if "*" not in name else MISSING
            # functions and classes only: a data object (sys.stdout, a list) may be another name's by chance
            if obj is not MISSING and (inspect.isroutine(obj) or isinstance(obj, type)):
                listed.setdefault(id(obj), (obj, []))[1].append(cap)
    dynamic = [c for c in caps if c.dynamic_attributes]
    for name in sorted({n for c in caps for n in c.names} | BUILTINS_BY_VALUE | set(GETATTR)):
        obj = getattr(builtins, name, MISSING)  # a refused builtin under a module's name (`x.bltns.eval`)
        if obj is not MISSING and inspect.isroutine(obj):
            listed.setdefault(id(obj), (obj, []))[1].extend(dynamic)
    return listed


def _prefixes(dotted: str) -> list[str]:
    parts = dotted.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]
