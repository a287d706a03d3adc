"""The package's floors point down only, and no modules import each other in a circle.

Floors, top to bottom (docs/architecture.md): the front door (``sparring.cli``) → ``training`` →
``agents`` → ``envs`` → ``containers``. The package base (``sparring/__init__.py`` and the other
modules of ``sparring/`` except the CLI) may be imported by every room and imports none.
Imports inside functions count: a lazy import still ties the two modules together, it only
postpones the error.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

#: Rooms by floor, lowest first; the package base sits below them all.
FLOORS = ["sparring.containers", "sparring.envs", "sparring.agents", "sparring.training"]
FRONT_DOOR = ("sparring.cli",)


def _package_modules() -> dict[str, Path]:
    """Every module of the installed package: dotted name -> source file."""
    modules: dict[str, Path] = {}
    for package in ["sparring", *FLOORS]:
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations, package
        root = Path(next(iter(spec.submodule_search_locations)))
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join([package, *parts])
            if package == "sparring" and parts and f"sparring.{parts[0]}" in FLOORS:
                continue  # a room's folder reached through sparring/ (never the case with package-dir)
            modules[name] = path
    return modules


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package modules that module ``name`` imports, at top level or inside functions."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if is_package else name.split(".")[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join([*package, base] if base else package)
            # `from X import Y` imports module X.Y when there is one, else a name of X.
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        found.update(t for t in targets if t in modules and t != name)
    return found


def _floor(module: str) -> int:
    """-1 for the package base, 0.. for the rooms, len(FLOORS) for the front door."""
    if module in FRONT_DOOR:
        return len(FLOORS)
    for i, room in enumerate(FLOORS):
        if module == room or module.startswith(room + "."):
            return i
    return -1


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = _package_modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_the_walk_sees_the_whole_package(graph: dict[str, set[str]]) -> None:
    assert {"sparring", "sparring.cli", "sparring.envs.core", "sparring.containers.sandbox"} <= graph.keys()
    assert "sparring.envs.core" in graph["sparring.envs.search.search_env"]


def test_no_upward_imports(graph: dict[str, set[str]]) -> None:
    upward = sorted(
        f"{src} imports {dst}"
        for src, targets in graph.items()
        for dst in targets
        if _floor(dst) > _floor(src) or (_floor(src) == -1 and _floor(dst) != -1)
    )
    assert not upward, "imports that point up a floor:\n" + "\n".join(upward)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circles(graph: dict[str, set[str]]) -> None:
    cycles = _cycles(graph)
    assert not cycles, "modules that import each other in a circle:\n" + "\n".join(" ↔ ".join(c) for c in cycles)


def test_the_checks_can_fail() -> None:
    looped = {"sparring.envs.a": {"sparring.envs.b"}, "sparring.envs.b": {"sparring.envs.a"}, "sparring": set()}
    assert _cycles(looped) == [["sparring.envs.a", "sparring.envs.b"]]
    assert _floor("sparring.containers.sandbox") < _floor("sparring.envs.core") < _floor("sparring.agents.runner")
    assert _floor("sparring") == -1 and _floor("sparring.cli") == len(FLOORS)
