"""The text space of every Sparring env: any Unicode string up to a length."""

from __future__ import annotations

import string
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["UnicodeText"]


class UnicodeText(gym.Space[str]):
    """Any ``str`` up to ``max_length`` characters.

    ``gymnasium.spaces.Text`` only admits a fixed charset (alphanumerics by default), which
    rejects the punctuation, newlines and non-ASCII that model outputs and tool outputs contain.

    Example:
        >>> space = UnicodeText(max_length=100)
        >>> space.contains("print('héllo')\\n")
        True
    """

    _SAMPLE_CHARS = string.printable + "äöüßéèçñ—“”‘’…→λπ中文"

    def __init__(self, max_length: int = 1 << 20, seed: int | np.random.Generator | None = None):
        """Create the space; ``max_length`` bounds the characters of a member."""
        self.max_length = int(max_length)
        super().__init__(dtype=str, seed=seed)

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """Random printable text (with punctuation and some non-ASCII), up to 64 characters."""
        length = int(self.np_random.integers(0, min(64, self.max_length) + 1))
        chars = self.np_random.choice(list(self._SAMPLE_CHARS), size=length)
        return "".join(chars.tolist())

    def contains(self, x: Any) -> bool:
        """A member is any ``str`` of at most ``max_length`` characters."""
        return isinstance(x, str) and len(x) <= self.max_length

    @property
    def is_np_flattenable(self) -> bool:
        """Text has no fixed-size array form."""
        return False

    def __repr__(self) -> str:
        return f"UnicodeText(max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UnicodeText) and other.max_length == self.max_length
