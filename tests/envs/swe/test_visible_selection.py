"""Which pytest run a command is, and which tracked tests it selects: the turn signal's gate (no container)."""

from __future__ import annotations

import pytest

from sparring.envs.swe.visible import pytest_selection, selected

TRACKED = ["test_inflection.py::test_ordinalize[13-13th]", "test_inflection.py::test_ordinalize[113-113th]",
           "tests/unit/test_y.py::TestC::test_m"]  # fmt: skip


@pytest.mark.parametrize(
    ("command", "paths"),
    [
        ("pytest", []),
        ("cd /repo && python -m pytest -q 2>&1 | tail -5", []),
        ("PYTHONPATH=. python3 -m pytest -x -k ord --tb=short test_inflection.py", ["test_inflection.py"]),
        ("py.test tests/unit/ ; echo done", ["tests/unit/"]),
        ("echo pytest", None),  # an argument, not a command
        ("cat test_inflection.py", None),
        ('pytest "unclosed', None),  # the lexer cannot read it: no run
    ],
)
def test_the_pytest_run_of_a_command(command: str, paths: list[str] | None) -> None:
    assert pytest_selection(command) == paths


def test_a_selection_names_tracked_tests_by_file_folder_or_id_and_a_typo_names_none() -> None:
    assert selected(TRACKED, []) == TRACKED
    assert selected(TRACKED, ["/repo/test_inflection.py"]) == TRACKED[:2]
    assert selected(TRACKED, ["./test_inflection.py::test_ordinalize"]) == TRACKED[:2]
    assert selected(TRACKED, ["test_inflection.py::test_ordinalize[13-13th]"]) == TRACKED[:1]
    assert selected(TRACKED, ["tests"]) == TRACKED[2:] == selected(TRACKED, ["tests/unit/test_y.py::TestC"])
    assert selected(TRACKED, ["test_inflection.py::test_ordinalise"]) == []  # a typo'd id selects nothing
    assert selected(TRACKED, ["test_mine.py"]) == []  # the agent's own test is not tracked
