"""The package's AST parsing holds up when threads parse at once (validation parses run records side by side)."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable
from typing import Any

from sparring import pyast


class _Slow:
    """Garbage in a cycle whose finalizer lets another thread run: the collector frees it mid-parse."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        time.sleep(0.0005)


def _errors(literal_eval: Callable[[str], Any], seconds: float) -> list[str]:
    payload = repr({f"tests/test_x.py::test_{i}": [i, (i, "passed")] for i in range(2000)})
    errors: list[str] = []
    stop = threading.Event()

    def parse() -> None:
        while not stop.is_set():
            for _ in range(20):
                _Slow()
            try:
                assert literal_eval(payload)["tests/test_x.py::test_7"] == [7, (7, "passed")]
            except SystemError as e:  # CPython 3.11: "AST constructor recursion depth mismatch"
                errors.append(str(e))
                stop.set()

    threshold = gc.get_threshold()
    gc.set_threshold(100, 1, 1)
    try:
        threads = [threading.Thread(target=parse) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join()
    finally:
        gc.set_threshold(*threshold)
    return errors


def test_parses_in_several_threads_while_the_collector_switches_them() -> None:
    assert _errors(pyast.literal_eval, seconds=4.0) == []
    assert pyast.parse("x = 1").body[0].targets[0].id == "x"
