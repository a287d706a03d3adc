"""The AST walk's reads of the module table: a package's submodules, the packages modules hold, modules as values.

A mixin of :class:`~sparring.envs.swe.capability_finder.CapabilityFinder` (see ``capabilities.toml``'s
``loaded_submodules`` and ``module_values``; ``fresh_imports`` measures what a fresh interpreter has, the task
image's where the index names one).
"""

from __future__ import annotations

import ast
import types
from typing import TYPE_CHECKING

from sparring.envs.swe.capability_index import stdlib_object
from sparring.envs.swe.fresh_imports import fresh_attributes, held_packages, submodules

if TYPE_CHECKING:
    from collections.abc import Iterable

    from sparring.envs.swe.capability_index import Capability, CapabilityIndex

__all__ = ["ModuleReads"]


class ModuleReads:
    """Rules on modules and packages read as values or through each other's attributes."""

    if TYPE_CHECKING:  # the finder's, which this mixes into
        index: CapabilityIndex
        imported: set[str]
        _fresh: frozenset[str] | None
        _held: dict[str, str] | None

        def add(self, node: ast.AST, caps: Iterable[Capability], what: str) -> None: ...

        def constant_getattr(self, node: ast.Call) -> bool: ...

    def submodules(self, package: str) -> frozenset[str]:
        """``package``'s submodules, where it is a measured package (the standard library's or the image's)."""
        return submodules(package, self.index.image) if package.split(".")[0] in self.index.measured else frozenset()

    def fresh(self) -> frozenset[str]:
        """Every ``package.attribute`` a fresh interpreter has after the file's imports of measured modules."""
        if self._fresh is None:
            self._fresh = fresh_attributes(self.measured_imports(), self.index.image)
        return self._fresh

    def held(self) -> dict[str, str]:
        """``module.attribute`` -> the package it holds, after a fresh interpreter runs the file's imports
        (``shutil.collections``: ``collections``)."""
        if self._held is None:
            self._held = held_packages(self.measured_imports(), self.index.image)
        return self._held

    def measured_imports(self) -> tuple[str, ...]:
        """The file's imports of measured modules, in the order the fresh interpreter runs them."""
        return tuple(sorted(m for m in self.imported if m.split(".")[0] in self.index.measured))

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

    def foreign_attribute(self, node: ast.AST, dotted: str, ctx: ast.expr_context) -> None:
        """Replacing an attribute of a module that is not the repository's, or reading a private one."""
        if dotted.split(".")[0].lstrip(".") not in self.index.foreign or dotted.startswith("."):
            return
        if isinstance(ctx, ast.Store | ast.Del):
            self.add(node, self.index.flagged("module_stores"), f"{dotted} replaced")
        elif any(p.startswith("_") and not p.startswith("__") for p in dotted.split(".")[1:]):
            self.add(node, self.index.flagged("module_stores"), f"private {dotted}")
