"""What setup provides and doctor checks: one :class:`Requirement` per piece, contributed by each room.

This is part of the package base, so every room may import it; the front door (``sparring.cli``)
collects the rooms' requirements and walks them for ``sparring setup`` and ``sparring doctor``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["GOALS", "Requirement"]

#: What each quick-start goal needs set up.
GOALS = ("demo", "test")


@dataclass
class Requirement:
    """One thing setup provides and doctor checks.

    Attributes:
        name: Short label shown in tables ("docker engine", "base image", ...).
        check: Returns (present, detail); must be fast and must not raise for a missing piece.
        ensure: Builds or starts the piece (idempotent); raises SparringError with the fix if it can't.
        fix: The command a user runs to provide the piece.
        needed_for: Which goals need it ("demo", "test").
        required: Whether doctor fails (non-zero exit) when it is missing.
    """

    name: str
    check: Callable[[], tuple[bool, str]]
    ensure: Callable[[], object]
    fix: str
    needed_for: frozenset[str] = field(default_factory=lambda: frozenset(GOALS))
    required: bool = True
