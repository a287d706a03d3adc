"""The AST walk's reading of ``str.format`` templates: the attribute names each field looks up on its argument.

A mixin of :class:`~sparring.envs.swe.capability_finder.CapabilityFinder`: a template's fields are read where the
check can see the template (string literals, concatenations, plain string locals), and a template it cannot read is
refused.
"""

from __future__ import annotations

import _string  # type: ignore[import-not-found]  # str.format's own parser of field names
import ast
import string
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    from sparring.envs.swe.capability_index import Capability, CapabilityIndex

__all__ = ["FORMAT_METHODS", "TemplateReads", "format_walk"]

#: str's methods that look up each field of their template (``{0.a.b[c]}``) on their arguments, by name.
FORMAT_METHODS = frozenset({"format", "format_map"})
#: The most values one expression of string literals may stand for before the check stops reading it.
_MAX_TEMPLATES = 16


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


class TemplateReads:
    """Rules on ``str.format`` templates and logging's ``{``-style messages."""

    if TYPE_CHECKING:  # the finder's, which this mixes into
        index: CapabilityIndex
        _locals: dict[int, dict[str, list[ast.expr]]]

        def add(self, node: ast.AST, caps: Iterable[Capability], what: str) -> None: ...

        def dotted(self, node: ast.AST) -> str | None: ...

        def unknown_attribute(self, node: ast.AST, attr: str, how: str) -> None: ...

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
