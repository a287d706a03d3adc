"""AST mutation operators on real Python files (the standard library's own sources)."""

from __future__ import annotations

import ast
import collections
import colorsys
import fractions
import shlex
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest

from sparring.envs.swe.bugs.artifact import diff_files
from sparring.envs.swe.bugs.mutations import OPERATORS, find_mutations, sample_mutations

REAL_FILES = {m.__name__ + ".py": Path(m.__file__).read_text() for m in (textwrap, shlex, fractions, colorsys)}


def test_every_operator_fires_on_real_code() -> None:
    counts: collections.Counter[str] = collections.Counter()
    for path, text in REAL_FILES.items():
        counts.update(m.operator for m in find_mutations(path, text))
    assert set(counts) == set(OPERATORS)
    assert all(n >= 3 for n in counts.values()), counts


@pytest.mark.parametrize("path", sorted(REAL_FILES))
def test_mutations_compile_differ_and_diff_applies(path: str, tmp_path: Path) -> None:
    text = REAL_FILES[path]
    mutations = find_mutations(path, text)
    assert mutations
    rng = np.random.default_rng(1)
    for m in [mutations[i] for i in rng.choice(len(mutations), size=min(12, len(mutations)), replace=False)]:
        assert m.mutated != text
        ast.parse(m.mutated)
        assert diff_files(m.diff) == [path]
        # the diff is a real patch: `git apply` turns the original into the mutated file
        repo = tmp_path / m.operator / str(m.line)
        repo.mkdir(parents=True)
        (repo / path).write_text(text)
        (repo / "bug.diff").write_text(m.diff)
        subprocess.run(["git", "apply", "bug.diff"], cwd=repo, check=True)
        assert (repo / path).read_text() == m.mutated
        # small, local changes: a mutation touches few lines
        changed = [ln for ln in m.diff.splitlines()[2:] if ln[:1] in "+-"]
        assert 1 <= len(changed) <= 12


def test_operator_examples() -> None:
    src = (
        "def f(xs, a, b):\n"
        "    if a < b:\n"
        "        return True\n"
        "    for i in range(len(xs)):\n"
        "        print(xs[i + 1], a)\n"
        "    if xs:\n"
        "        a = 2\n"
        "    return pow(a, b)\n"
    )
    found = {(m.operator, m.description) for m in find_mutations("f.py", src)}
    ops = {op for op, _ in found}
    assert ops == set(OPERATORS)
    assert ("flip_comparison", "a < b -> a >= b") in found
    assert ("wrong_return", "return True -> return False") in found
    assert any(op == "off_by_one" and "range bound" in d for op, d in found)
    assert any(op == "swapped_arguments" and "'a' and 'b' of pow" in d for op, d in found)
    removed = [m for m in find_mutations("f.py", src, ["removed_branch"]) if m.line == 6]
    assert removed and "a = 2" not in removed[0].mutated


def test_guards_and_module_level_code_are_left_alone() -> None:
    src = "X = 1 if True else 2\nif __name__ == '__main__':\n    print(X < 2)\n"
    assert find_mutations("m.py", src) == []
    assert find_mutations("bad.py", "def f(:\n") == []


def test_sampling_is_seeded_and_spread_over_operators() -> None:
    a = sample_mutations(REAL_FILES, np.random.default_rng(7), 12)
    b = sample_mutations(REAL_FILES, np.random.default_rng(7), 12)
    assert [(m.path, m.line, m.operator) for m in a] == [(m.path, m.line, m.operator) for m in b]
    assert len({m.mutated for m in a}) == 12
    assert len({m.operator for m in a}) >= 4
