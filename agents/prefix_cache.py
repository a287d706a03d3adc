"""KV states of recent sequences, so the next turn of an episode prefills only its new tokens.

An episode's prompt at turn t+1 is its prompt at turn t, the ids sampled at turn t and the
observation's ids. Keeping the key/value states of ``prompt + sampled[:-1]`` (everything that was
fed to the model) lets the HF backend feed only the rest. A lookup takes the entry sharing the
longest common prefix with the prompt and cuts its states to that prefix (a causal model's states
of a prefix do not depend on what follows), so episodes of one env also share their common
system prompt and instructions. Entries are evicted least-recently-used beyond a token budget.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["PrefixCache"]

#: Per layer: (keys, values), each ``[heads, length, head_dim]``.
LayerStates = list[tuple[Any, Any]]

#: A cut entry must share at least this many tokens: a shorter hit saves less than it costs in padding.
MIN_SHARED = 16


class PrefixCache:
    """Least-recently-used store of per-sequence KV states, keyed by the sequence's token ids.

    Args:
        max_tokens: Budget in cached tokens over all entries (0 disables the cache).
    """

    def __init__(self, max_tokens: int):
        """Create an empty cache."""
        self.max_tokens = int(max_tokens)
        self._entries: OrderedDict[tuple[int, ...], LayerStates] = OrderedDict()
        self._arrays: dict[tuple[int, ...], np.ndarray] = {}  # the keys as arrays, for fast comparison
        self._tokens = 0
        self.hits = 0
        self.reused_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, prompt: Sequence[int]) -> tuple[int, LayerStates | None]:
        """The longest prefix of ``prompt`` (leaving at least one token) with cached states.

        Returns:
            (its length, the states cut to it), or (0, None) without a shared prefix.
        """
        if not self.max_tokens or len(prompt) < 2:
            return 0, None
        ids = np.asarray(prompt, dtype=np.int64)
        best, best_key = 0, None
        for key, cached in self._arrays.items():
            n = min(len(cached), len(ids) - 1)
            if n <= best:
                continue
            differ = np.flatnonzero(cached[:n] != ids[:n])
            shared = int(differ[0]) if len(differ) else n
            if shared > best and (shared == len(cached) or shared >= MIN_SHARED):
                best, best_key = shared, key
        if best_key is None:
            return 0, None
        self._entries.move_to_end(best_key)
        self.hits += 1
        self.reused_tokens += best
        states = self._entries[best_key]
        if best < len(best_key):
            states = [(keys[:, :best], values[:, :best]) for keys, values in states]
        return best, states

    def store(self, ids: Sequence[int], states: LayerStates) -> None:
        """Keep ``states`` for ``ids``; entries that are prefixes of ``ids`` are superseded and dropped."""
        if not self.max_tokens or len(ids) > self.max_tokens:
            return
        key = tuple(ids)
        for old in [k for k in self._entries if len(k) <= len(key) and key[: len(k)] == k]:
            self._drop(old)
        self._entries[key] = states
        self._arrays[key] = np.asarray(key, dtype=np.int64)
        self._tokens += len(key)
        while self._tokens > self.max_tokens:
            self._drop(next(iter(self._entries)))

    def _drop(self, key: tuple[int, ...]) -> None:
        self._tokens -= len(key)
        del self._entries[key], self._arrays[key]

    def clear(self) -> None:
        """Forget everything (e.g. after a weight update: the states belong to the old weights)."""
        self._entries.clear()
        self._arrays.clear()
        self._tokens = 0
