"""Python's ``ast`` parsing, one thread at a time.

CPython 3.11 keeps the AST converter's recursion depth in per-interpreter state, so two threads
parsing at once can fail with ``SystemError: AST constructor recursion depth mismatch``. Validation
and grading parse in several threads at once (the records of side-by-side test runs, the capability
checks of concurrent episodes), so the package's parses go through :func:`parse` and
:func:`literal_eval`, which hold one lock.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

__all__ = ["literal_eval", "parse"]

_LOCK = threading.Lock()


def parse(source: str | bytes, filename: str = "<unknown>", mode: str = "exec") -> Any:
    """:func:`ast.parse`, under the package's parse lock."""
    with _LOCK:
        return ast.parse(source, filename=filename, mode=mode)


def literal_eval(text: str) -> Any:
    """:func:`ast.literal_eval`, under the package's parse lock."""
    with _LOCK:
        return ast.literal_eval(text)
