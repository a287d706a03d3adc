"""The AST walk behind :mod:`~sparring.envs.swe.capabilities`: every use of a capability in one module.

Split from ``capabilities.py`` (which loads the list and decides what a repair added); the rules
the walk applies are described there and in ``capabilities.toml``. The capabilities as the walk looks them
up are ``capability_index.py``'s; its reads of the module table (``capability_modules.py``) and of
``str.format`` templates (``capability_templates.py``) are mixins of the walk.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from sparring import pyast
from sparring.envs.swe.capability_index import (
    BUILTINS_BY_VALUE,
    GETATTR,
    MISSING,
    ORACLE,
    Capability,
    CapabilityIndex,
    CapabilityUse,
    OracleNames,
    is_module,
    stdlib_object,
)
from sparring.envs.swe.capability_modules import ModuleReads
from sparring.envs.swe.capability_templates import FORMAT_METHODS, TemplateReads, format_walk

__all__ = ["CapabilityFinder", "format_walk", "qualified_scope"]


_OPENERS = ("open", "io.open", "os.fdopen", "io.FileIO", "codecs.open")
#: Statements and patterns that bind a name given as a string (not as an ``ast.Name``).
_NameBinder = ast.ClassDef | ast.ExceptHandler | ast.MatchAs | ast.MatchStar | ast.MatchMapping
#: Listed attributes that may still be assigned to item by item (``os.environ["X"] = "1"``).
_WRITE_ONLY = frozenset({"os.environ", "os.environb"})
#: Methods that take an attribute's name as an argument.
_NAMED_ATTRIBUTE_METHODS = ("__setattr__", "__delattr__", "__getattribute__", "__getattr__")
#: Class attributes that hand attribute names to the interpreter as data: a class pattern's positional
#: subpatterns are read by ``getattr`` with the names of ``__match_args__``, and ``copy``/``pickle`` read every
#: slot of ``__slots__`` the same way, or every name of ``__slotnames__`` (copyreg's cache of them, which
#: ``object.__getstate__`` reads first) (on a class with a forwarding ``__getattr__``, any object's attribute).
_NAMES_AS_DATA = frozenset({"__match_args__", "__slots__", "__slotnames__"})
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
#: Class decorators that write a class's annotation keys into code they execute and look its string annotations up in
#: ``sys.modules[cls.__module__]``: allowed only on a class statement the check reads, applied to it first.
_CODE_FROM_ANNOTATIONS = frozenset({"dataclasses.dataclass"})
#: A dataclass's ``Field`` objects, whose names ``dataclasses.replace``, ``asdict`` and ``astuple`` read by
#: ``getattr``: a name edited after ``@dataclass`` is an attribute read by data. ``field()`` is allowed only as a
#: field's value in a dataclass's class statement, ``fields()`` only as what a loop or comprehension iterates,
#: its target read for public attributes alone (``[f.name for f in fields(P)]``); ``Field`` not at all.
_FIELD_OBJECTS = ("dataclasses.field", "dataclasses.fields", "dataclasses.Field")
#: Functions that make a class of such annotations, or fill a class's namespace with code the check does not read as
#: a class body (``types.new_class``'s ``exec_body``): how many positional arguments come before that code or data.
_CLASS_FACTORIES = {"dataclasses.make_dataclass": 0, "types.new_class": 3, "type.__new__": 3}
#: Argument values that turn a listed argument off (``catch_warnings(record=False)``).
_OFF = (False, None, 0)


def _one_of(dotted: str | None, names: Iterable[str]) -> str | None:
    """Which of ``names`` (standard-library functions) ``dotted`` is, by name or as the very object under another
    module's name; None for none."""
    if dotted is None:
        return None
    obj = MISSING
    for name in names:
        if dotted == name:
            return name
        if obj is MISSING:
            obj = stdlib_object(dotted)
            if obj is MISSING:
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


class CapabilityFinder(TemplateReads, ModuleReads, ast.NodeVisitor):
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

    def constant_getattr(self, node: ast.Call) -> bool:
        return (
            self.builtin(node.func, GETATTR) is not None
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
        if self.builtin(node, GETATTR) and not (isinstance(parent, ast.Call) and parent.func is node):
            self.add(node, self.index.flagged("dynamic_attributes"), f"{node.id} used as a value")
        module = self.aliases.get(node.id, "")
        if module and not (isinstance(parent, ast.Attribute) and parent.value is node):
            self.add(node, self.index.module(module), node.id)  # a refused module used as a value
            if isinstance(node.ctx, ast.Load) and not (
                isinstance(parent, ast.Call) and parent.args[:1] == [node] and self.constant_getattr(parent)
            ):
                self.module_value(node, module)
            self.class_from_data(node, module)
            self.field_objects(node, module)
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
        elif module and isinstance(node.ctx, ast.Load) and (node.id in self.module_names or is_module(module)):
            self.foreign_module_value(node, module)

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
        if reads and node.attr in FORMAT_METHODS:
            self.format_method(node, node.value, node.attr)
        called = getattr(node, "_sparring_parent", None)
        if node.attr in _NAMED_ATTRIBUTE_METHODS and not (isinstance(called, ast.Call) and called.func is node):
            # `fwd = T.__getattr__`: a lookup by a name given as data, wherever it is called
            self.add(node, self.index.flagged("dynamic_attributes"), f".{node.attr} used as a value")
        if not imported and node.attr in BUILTINS_BY_VALUE:  # the builtins module reached as a value
            self.add(node, self.index.flagged("dynamic_attributes"), f".{node.attr} on an object not known statically")
        if isinstance(node.ctx, ast.Store):
            self.add(node, self.index.defining(node.attr), f".{node.attr} assigned")
            if node.attr in _NAMES_AS_DATA:
                self.names_as_data(node, node.attr)
        elif isinstance(node.ctx, ast.Del) and node.attr in _NAMES_AS_DATA:  # the names read, then taken away
            self.add(node, self.index.flagged("dynamic_attributes"), f".{node.attr} deleted")
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
                self.field_objects(node, dotted)
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
                    if not (isinstance(parent, ast.Call) and parent.func is node) and is_module(dotted):
                        self.foreign_module_value(node, dotted)  # `m = xml.dom`, `[email.utils][0]`
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = self.builtin(node.func, GETATTR)
        if func is not None:
            if self.constant_getattr(node):
                attr = node.args[1].value  # type: ignore[attr-defined]
                base = self.dotted(node.args[0])
                if attr in FORMAT_METHODS:
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

    def field_objects(self, node: ast.expr, dotted: str) -> None:
        """``dataclasses.field``, ``fields`` or ``Field`` anywhere their ``Field`` objects could be kept and renamed
        (:data:`_FIELD_OBJECTS`)."""
        name = _one_of(dotted, _FIELD_OBJECTS)
        if name is None:
            return
        call = getattr(node, "_sparring_parent", None)
        if not (isinstance(call, ast.Call) and call.func is node):
            self.add(node, self.index.flagged("dynamic_attributes"), f"{name} where its fields could be renamed")
            return
        holder = getattr(call, "_sparring_parent", None)
        if name == "dataclasses.field":
            owner = getattr(holder, "_sparring_parent", None)
            last = owner.decorator_list[-1] if isinstance(owner, ast.ClassDef) and owner.decorator_list else None
            last = last.func if isinstance(last, ast.Call) else last
            if (isinstance(holder, ast.AnnAssign) and holder.value is call and last is not None
                    and _one_of(self.dotted(last), _CODE_FROM_ANNOTATIONS)):  # fmt: skip
                return
        elif name == "dataclasses.fields" and isinstance(holder, ast.For | ast.comprehension) and holder.iter is call:
            target = holder.target
            scope = holder if isinstance(holder, ast.For) else getattr(holder, "_sparring_parent", holder)
            if isinstance(target, ast.Name) and all(
                isinstance(use.ctx, ast.Load)
                and isinstance(up := getattr(use, "_sparring_parent", None), ast.Attribute)
                and up.value is use
                and isinstance(up.ctx, ast.Load)
                and not up.attr.startswith("_")
                for use in ast.walk(scope)
                if isinstance(use, ast.Name) and use.id == target.id and use is not target
            ):
                return
        self.add(node, self.index.flagged("dynamic_attributes"), f"{name} where its fields could be renamed")

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
            obj = stdlib_object(dotted) if dotted else MISSING
            if self.builtin(base, {"type"}) or (isinstance(obj, type) and issubclass(obj, type)):
                self.add(node, self.index.flagged("dynamic_attributes"), f"metaclass {node.name} defined")
        for keyword in node.keywords:
            meta = self.dotted(keyword.value) if keyword.arg == "metaclass" else None
            if keyword.arg == "metaclass" and (not meta or stdlib_object(meta) is MISSING):
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
