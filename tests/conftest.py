"""Shared test fixtures and policies.

Tests run the real thing (containers, repositories, the model, the corpus). A test that needs a
piece which setup provides is skipped locally when the piece is missing, but under CI (``CI`` set)
a missing piece is a failure: CI runs setup first, so absence there is a bug.
"""

from __future__ import annotations

import os

import pytest


def require(ok: bool, what: str) -> None:
    """Skip (locally) or fail (under CI) when a piece that setup provides is missing."""
    if ok:
        return
    message = f"{what} is missing; run `sparring setup --for test`"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)
