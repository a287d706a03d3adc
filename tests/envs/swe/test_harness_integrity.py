"""The harness's integrity check (``harness_guard.Integrity``) on a real pytest plugin manager, in this process.

The check compares by identity in C loops and takes the slow way only to name what differs: each change below must
be found, named, and gone once undone (the run's own harness tests are the container files; this is the check
alone, on pytest's and pluggy's real modules).
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Iterator
from typing import Any

import pytest
from _pytest.config import get_config
from _pytest.reports import CollectReport, TestReport

from sparring.envs.swe import harness_guard as guard


@pytest.fixture
def checked() -> Iterator[tuple[Any, Any]]:
    """An ``Integrity`` snapshot of a plugin manager with pytest's default plugins (as a run's at collection's end)."""
    manager = get_config().pluginmanager
    folders = [p.rstrip("/") + "/" for p in {sysconfig.get_paths()[k] for k in ("stdlib", "purelib", "platlib")}]
    folders.append(os.path.dirname(guard.__file__) + "/")
    integrity = guard.Integrity((TestReport, CollectReport), guard.make_trusted(folders, []))
    assert integrity.snapshot(manager) == []  # no implementation from an untrusted file
    yield integrity, manager


def _problems(checked: tuple[Any, Any]) -> list[str]:
    """What the check names, less the signal handlers: this process's own (the test worker's cleanup) are not
    the run's, whose harness trusts no such file."""
    integrity, manager = checked
    return [p for p in integrity.check(manager, full=True) if not p.startswith("a handler of signal")]


def test_an_untouched_framework_passes_every_check(checked: tuple[Any, Any]) -> None:
    assert _problems(checked) == [] and _problems(checked) == []


def test_a_replaced_or_removed_attribute_of_a_framework_module_or_class_is_named(
    checked: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import _pytest.pathlib

    monkeypatch.setattr(_pytest.pathlib, "make_numbered_dir", lambda *a, **k: None)
    assert _problems(checked) == ["_pytest.pathlib.make_numbered_dir was replaced"]
    monkeypatch.undo()
    monkeypatch.delattr(_pytest.pathlib, "rm_rf")
    assert _problems(checked) == ["_pytest.pathlib.rm_rf was replaced"]
    monkeypatch.undo()
    monkeypatch.setattr(TestReport, "from_item_and_call", classmethod(lambda cls, item, call: None))
    assert _problems(checked) == ["TestReport.from_item_and_call was replaced"]
    monkeypatch.undo()
    monkeypatch.setattr(TestReport, "_to_json", lambda self: {}, raising=False)  # its base's, shadowed
    assert _problems(checked) == ["_pytest.reports.TestReport._to_json was added"]
    monkeypatch.undo()
    assert _problems(checked) == []


def test_a_changed_hook_implementation_or_an_added_plugin_is_named(
    checked: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, manager = checked
    (first, *_) = manager.hook.pytest_runtest_setup.get_hookimpls()
    monkeypatch.setattr(first, "function", bool)  # a builtin: no code of its own
    problems = _problems(checked)
    assert problems[0].startswith("the registered hook implementations changed"), problems
    assert "a pytest_runtest_setup implementation from <class 'bool'> is registered" in problems, problems
    monkeypatch.undo()
    assert _problems(checked) == []

    class Forge:
        @pytest.hookimpl
        def pytest_runtest_logreport(self, report: Any) -> None:
            report.outcome = "passed"

    manager.register(Forge(), name="forge")
    try:
        problems = _problems(checked)
        assert problems[0].startswith("the registered hook implementations changed"), problems
        assert f"a pytest_runtest_logreport implementation from {__file__} is registered" in problems, problems
    finally:
        manager.unregister(name="forge")
    assert _problems(checked) == []


def test_a_report_of_another_class_is_named(checked: tuple[Any, Any]) -> None:
    integrity, manager = checked

    class Forged(TestReport):
        pass

    assert integrity.check(manager, Forged.__new__(Forged), full=False) == [
        f"a report of class {Forged.__qualname__}, not pytest's"
    ]


def test_an_implementation_moved_between_two_callers_is_named_even_where_their_answers_misstate_their_length(
    checked: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the fast comparison is flat (every implementation's fields in a row) plus each caller's number: the number
    # must be what was read, or the last implementation of one caller moved to the next reads the same
    _, manager = checked
    relay = vars(manager.hook)
    names = sorted(relay)
    counts = [len(relay[n].get_hookimpls()) for n in names]
    j = next(j for j in range(len(names) - 1) if counts[j] >= 2 and counts[j + 1] >= 1)
    first, second = relay[names[j]].get_hookimpls(), relay[names[j + 1]].get_hookimpls()

    class Misstated(list):  # iterates its items, says another length
        def __init__(self, items: list[Any], length: int) -> None:
            super().__init__(items)
            self.length = length

        def __len__(self) -> int:
            return self.length

    class Caller:
        def __init__(self, answer: list[Any]) -> None:
            self.answer = answer

        def get_hookimpls(self) -> list[Any]:
            return self.answer

    monkeypatch.setitem(relay, names[j], Caller(Misstated(first[:-1], len(first))))
    monkeypatch.setitem(relay, names[j + 1], Caller(Misstated(first[-1:] + second, len(second))))
    problems = _problems(checked)
    assert problems and problems[0].startswith("the registered hook implementations changed"), problems
    monkeypatch.undo()
    assert _problems(checked) == []


def test_a_framework_namespace_that_answers_the_old_value_for_a_replaced_one_is_named(
    checked: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # a module of pytest's name whose namespace is a dict subclass: its __getitem__ (which the fast comparison's
    # itemgetter would call) answers the held value, its stored one is another; compared one by one, it is named

    class Answering(dict):
        held: dict[str, Any] = {}

        def __getitem__(self, key: str) -> Any:
            return self.held[key] if key in self.held else dict.__getitem__(self, key)

    class Namespace:
        pass

    planted = Namespace()
    planted.__dict__ = Answering(x=len, y=abs)
    monkeypatch.setitem(sys.modules, "_pytest.zz_planted", planted)
    assert _problems(checked) == []  # held from the check that first sees it
    monkeypatch.setattr(Answering, "held", {"x": len})
    planted.x = print
    assert _problems(checked) == ["_pytest.zz_planted.x was replaced"]
    planted.x = len
    assert _problems(checked) == []
