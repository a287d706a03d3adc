"""The document form every corpus and retriever shares: Search-R1/FlashRAG ``{"id", "contents"}``.

``contents`` is the quoted title, a newline, then the text; :class:`Hit` is one retrieved document.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Hit", "format_contents", "split_contents"]


def format_contents(title: str, text: str) -> str:
    """The FlashRAG ``contents`` field: the quoted title, a newline, the text."""
    return f'"{title}"\n{text}'


def split_contents(contents: str) -> tuple[str, str]:
    """Inverse of :func:`format_contents`; a contents without a quoted first line has no title."""
    first, _, rest = contents.partition("\n")
    if len(first) >= 2 and first.startswith('"') and first.endswith('"'):
        return first[1:-1], rest
    return "", contents


@dataclass(frozen=True)
class Hit:
    """One retrieved document: its position in the corpus, id, FlashRAG contents and score."""

    index: int
    id: str
    contents: str
    score: float

    @property
    def title(self) -> str:
        """The title part of ``contents``."""
        return split_contents(self.contents)[0]

    def document(self) -> dict[str, Any]:
        """The Search-R1 document form ``{"id", "contents"}``."""
        return {"id": self.id, "contents": self.contents}
