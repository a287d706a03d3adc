"""Procedural bug injection: AST mutation operators over Python source (docs/swe.md).

Each operator finds the places in a file where it applies and rewrites only the source text of
that node (not the whole file through ``ast.unparse``), so the resulting ``bug_inject.diff`` is a
small, realistic change. Mutations are made only inside function bodies, never in
``if __name__ == "__main__"`` or ``TYPE_CHECKING`` blocks, and the mutated file must still compile.

Example:
    >>> src = "def f(x):\\n    if x > 0:\\n        return 1\\n    return 0\\n"
    >>> [m.operator for m in find_mutations("m.py", src)][:2]
    ['flip_comparison', 'negate_condition']
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from sparring import pyast
from sparring.envs.swe.bugs.artifact import file_diff

__all__ = ["OPERATORS", "Mutation", "find_mutations", "sample_mutations"]


@dataclass(frozen=True)
class Mutation:
    """One mutation of one file.

    Attributes:
        operator: Name of the operator (``flip_comparison``, ``off_by_one``, ...).
        path: Repository-relative path of the file.
        line: First line (1-based) of the rewritten code.
        description: What changed, for logs and metadata.
        original: The file's text before.
        mutated: The file's text after.
    """

    operator: str
    path: str
    line: int
    description: str
    original: str
    mutated: str

    @property
    def diff(self) -> str:
        """The mutation as a unified diff (``bug_inject.diff``)."""
        return file_diff(self.path, self.original, self.mutated)


@dataclass(frozen=True)
class _Edit:
    """Replace the text between two (line, col) positions; cols are UTF-8 byte offsets, as in ``ast``."""

    start: tuple[int, int]
    end: tuple[int, int]
    text: str
    description: str


class _Source:
    """Source text with conversions between ``ast`` positions and string offsets."""

    def __init__(self, text: str):
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, lineno: int, col: int) -> int:
        line = self.lines[lineno - 1]
        return self.starts[lineno - 1] + len(line.encode()[:col].decode(errors="ignore"))

    def segment(self, node: ast.AST) -> str:
        return self.text[self._span(node)[0] : self._span(node)[1]]

    def _span(self, node: ast.AST) -> tuple[int, int]:
        n: ast.expr = node  # type: ignore[assignment]
        return self.offset(n.lineno, n.col_offset), self.offset(n.end_lineno or n.lineno, n.end_col_offset or 0)

    def replace(self, edits: list[_Edit]) -> str:
        text = self.text
        for e in sorted(edits, key=lambda e: e.start, reverse=True):
            a, b = self.offset(*e.start), self.offset(*e.end)
            text = text[:a] + e.text + text[b:]
        return text


def _pos(node: ast.AST) -> tuple[tuple[int, int], tuple[int, int]]:
    n: ast.expr = node  # type: ignore[assignment]
    return (n.lineno, n.col_offset), (n.end_lineno or n.lineno, n.end_col_offset or 0)


def _whole(node: ast.AST, text: str, description: str) -> _Edit:
    start, end = _pos(node)
    return _Edit(start, end, text, description)


# --------------------------------------------------------------------------- operators

_FLIPPED: dict[type, type] = {
    ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE, ast.LtE: ast.Gt,
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In,
    ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}  # fmt: skip


def _flip_comparison(node: ast.AST, src: _Source) -> Iterator[_Edit]:
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _FLIPPED:
        new = ast.Compare(node.left, [_FLIPPED[type(node.ops[0])]()], node.comparators)
        text = ast.unparse(new)
        yield _whole(node, text, f"{src.segment(node)} -> {text}")


def _negate_condition(node: ast.AST, src: _Source) -> Iterator[_Edit]:
    if isinstance(node, ast.If | ast.While | ast.IfExp) and not _is_guard(node.test):
        test = node.test
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            text = src.segment(test.operand)
            if isinstance(test.operand, ast.BoolOp | ast.Compare | ast.NamedExpr):
                text = f"({text})"
        else:
            inner = src.segment(test)
            text = f"not {inner}" if isinstance(test, ast.Name | ast.Call | ast.Attribute) else f"not ({inner})"
        yield _whole(test, text, f"condition {src.segment(test)!r} negated")


def _off_by_one(node: ast.AST, src: _Source) -> Iterator[_Edit]:
    if isinstance(node, ast.Compare | ast.BinOp | ast.Subscript | ast.Slice) or _is_range(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Slice):
                continue  # its own visit handles it
            if isinstance(child, ast.Constant) and type(child.value) is int:
                new = child.value + 1 if child.value <= 0 else child.value - 1
                yield _whole(child, repr(new), f"constant {child.value} -> {new} in {src.segment(node)!r}")
    if _is_range(node) and isinstance(node, ast.Call) and node.args:
        bound = node.args[1] if len(node.args) > 1 else node.args[0]
        if not isinstance(bound, ast.Constant):
            text = f"{src.segment(bound)} + 1"
            if not isinstance(bound, ast.Name | ast.Attribute | ast.Call | ast.Subscript):
                text = f"({src.segment(bound)}) + 1"
            yield _whole(bound, text, f"range bound {src.segment(bound)!r} -> {text!r}")


def _removed_branch(node: ast.AST, src: _Source) -> Iterator[_Edit]:
    if not isinstance(node, ast.If) or _is_guard(node.test):
        return
    if src.lines[node.lineno - 1].lstrip().startswith("elif"):
        return  # an elif is the else-branch of its parent: the parent's removal covers it
    if node.orelse and not (len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If)):
        # drop the else block: keep only the if-branch
        first, last = node.orelse[0], node.orelse[-1]
        else_line = first.lineno - 1
        while else_line > node.body[-1].end_lineno and not src.lines[else_line - 1].strip().startswith("else"):  # type: ignore[operator]
            else_line -= 1
        if src.lines[else_line - 1].strip().startswith("else"):
            end = last.end_lineno or last.lineno
            stop = (end + 1, 0) if end < len(src.lines) else (end, len(src.lines[end - 1].encode()))
            yield _Edit((else_line, 0), stop, "", f"else branch of line {node.lineno} removed")
    elif not node.orelse:
        # drop the whole if statement when it is not the only statement of its block
        end = node.end_lineno or node.lineno
        indent = src.lines[node.lineno - 1][: node.col_offset]
        if end < len(src.lines):
            yield _Edit((node.lineno, 0), (end + 1, 0), indent + "pass\n", f"if-branch at line {node.lineno} removed")


def _swapped_arguments(node: ast.AST, src: _Source) -> Iterator[_Edit]:
    if isinstance(node, ast.Call) and len(node.args) >= 2:
        a, b = node.args[0], node.args[1]
        if isinstance(a, ast.Starred) or isinstance(b, ast.Starred):
            return
        ta, tb = src.segment(a), src.segment(b)
        if ta == tb or a.lineno != b.lineno:
            return
        start, _ = _pos(a)
        _, end = _pos(b)
        between = src.text[src.offset(*_pos(a)[1]) : src.offset(*_pos(b)[0])]
        yield _Edit(
            start, end, f"{tb}{between}{ta}", f"arguments {ta!r} and {tb!r} of {src.segment(node.func)} swapped"
        )


def _wrong_return(node: ast.AST, src: _Source) -> Iterator[_Edit]:
    if not isinstance(node, ast.Return) or node.value is None:
        return
    value = node.value
    if isinstance(value, ast.Constant):
        if isinstance(value.value, bool):
            new = repr(not value.value)
        elif type(value.value) is int:
            new = repr(value.value + 1)
        elif value.value is None:
            return
        else:
            new = "None"
    elif isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.Not):
        new = src.segment(value.operand)
    elif isinstance(value, ast.Compare | ast.BoolOp):
        new = f"not ({src.segment(value)})"
    else:
        new = "None"
    yield _whole(value, new, f"return {src.segment(value)} -> return {new}")


#: Operator name -> function yielding edits for one AST node.
OPERATORS: dict[str, Callable[[ast.AST, _Source], Iterator[_Edit]]] = {
    "flip_comparison": _flip_comparison,
    "negate_condition": _negate_condition,
    "off_by_one": _off_by_one,
    "removed_branch": _removed_branch,
    "swapped_arguments": _swapped_arguments,
    "wrong_return": _wrong_return,
}


def _is_range(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range"


def _is_guard(test: ast.expr) -> bool:
    """``__name__ == "__main__"`` and ``TYPE_CHECKING`` tests, which mutations leave alone."""
    text = ast.unparse(test)
    return "__name__" in text or "TYPE_CHECKING" in text


def _function_nodes(tree: ast.Module) -> Iterator[ast.AST]:
    """Nodes inside function bodies (decorators, defaults and annotations excluded)."""
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            for stmt in fn.body:
                for node in ast.walk(stmt):
                    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                        yield node


def find_mutations(path: str, text: str, operators: list[str] | None = None) -> list[Mutation]:
    """Every mutation the operators can make in one file, in source order.

    Args:
        path: Repository-relative path (goes into the diff headers).
        text: The file's source.
        operators: Operator names to use; all of :data:`OPERATORS` when None.

    Returns:
        Mutations whose result compiles and differs from the original; none for a file that does
        not parse.
    """
    try:
        tree = pyast.parse(text)
    except (SyntaxError, ValueError):
        return []
    src = _Source(text)
    seen: set[str] = set()
    found: list[Mutation] = []
    for node in _function_nodes(tree):
        for name in operators or list(OPERATORS):
            for edit in OPERATORS[name](node, src):
                mutated = src.replace([edit])
                if mutated == text or mutated in seen:
                    continue
                try:
                    compile(mutated, path, "exec")
                except (SyntaxError, ValueError):
                    continue
                seen.add(mutated)
                found.append(Mutation(name, path, edit.start[0], edit.description, text, mutated))
    found.sort(key=lambda m: (m.line, list(OPERATORS).index(m.operator)))
    return found


def sample_mutations(
    files: dict[str, str], rng: np.random.Generator, n: int, operators: list[str] | None = None
) -> list[Mutation]:
    """Draw up to ``n`` distinct mutations over ``files``, spreading draws over the operators.

    An operator is drawn uniformly first, then a place where it applies, so frequent node kinds
    (comparisons) do not crowd out rare ones (swapped arguments).
    """
    by_operator: dict[str, list[Mutation]] = {}
    for path in sorted(files):
        for m in find_mutations(path, files[path], operators):
            by_operator.setdefault(m.operator, []).append(m)
    picked: list[Mutation] = []
    while len(picked) < n and any(by_operator.values()):
        names = sorted(k for k, v in by_operator.items() if v)
        pool = by_operator[names[int(rng.integers(len(names)))]]
        picked.append(pool.pop(int(rng.integers(len(pool)))))
    return picked
