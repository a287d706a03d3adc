"""KV states of recent sequences, so the next turn of an episode prefills only its new tokens.

An episode's prompt at turn t+1 is its prompt at turn t, the ids sampled at turn t and the
observation's ids. Keeping the key/value states of ``prompt + sampled[:-1]`` (everything that was
fed to the model) lets the HF backend feed only the rest. Entries are found by longest token
prefix and evicted least-recently-used beyond a token budget.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

__all__ = ["PrefixCache"]

#: Per layer: (keys, values), each ``[heads, length, head_dim]``.
LayerStates = list[tuple[Any, Any]]


class PrefixCache:
    """Least-recently-used store of per-sequence KV states, keyed by the sequence's token ids.

    Args:
        max_tokens: Budget in cached tokens over all entries (0 disables the cache).
    """

    def __init__(self, max_tokens: int):
        """Create an empty cache."""
        self.max_tokens = int(max_tokens)
        self._entries: OrderedDict[tuple[int, ...], LayerStates] = OrderedDict()
        self._tokens = 0
        self.hits = 0
        self.reused_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, prompt: Sequence[int]) -> tuple[int, LayerStates | None]:
        """The longest cached prefix of ``prompt`` shorter than it: (its length, its states) or (0, None)."""
        if not self.max_tokens:
            return 0, None
        best: tuple[int, ...] | None = None
        for key in self._entries:
            if len(key) < len(prompt) and (best is None or len(key) > len(best)) and tuple(prompt[: len(key)]) == key:
                best = key
        if best is None:
            return 0, None
        self._entries.move_to_end(best)
        self.hits += 1
        self.reused_tokens += len(best)
        return len(best), self._entries[best]

    def store(self, ids: Sequence[int], states: LayerStates) -> None:
        """Keep ``states`` for ``ids``; entries that are prefixes of ``ids`` are superseded and dropped."""
        if not self.max_tokens or len(ids) > self.max_tokens:
            return
        key = tuple(ids)
        for old in [k for k in self._entries if len(k) <= len(key) and key[: len(k)] == k]:
            self._tokens -= len(old)
            del self._entries[old]
        self._entries[key] = states
        self._tokens += len(key)
        while self._tokens > self.max_tokens:
            old, _ = self._entries.popitem(last=False)
            self._tokens -= len(old)

    def clear(self) -> None:
        """Forget everything (e.g. after a weight update: the states belong to the old weights)."""
        self._entries.clear()
        self._tokens = 0
