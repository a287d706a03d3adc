"""A KV cache whose layers grow in place, so a decode step does not copy the whole cache.

transformers' ``DynamicLayer`` appends a step's keys and values with ``torch.cat``, which copies
every cached column of every layer at every step: on CPU that copy was a third of a batch-8
decode step of SmolLM2 (docs/benchmarks.md, rollout). :class:`GrowingLayer` keeps the states in
a buffer with spare columns and writes each step into it; ``keys``/``values`` stay views of the
filled part, so everything else ``DynamicLayer`` does (``batch_select_indices``, ``crop``,
lengths, masks) works unchanged, at the cost of one reallocation after such an operation.

Imported by the HF backend only (it imports transformers).
"""

from __future__ import annotations

from typing import Any

from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

__all__ = ["GrowingLayer", "growing_cache"]

#: Spare columns allocated beyond what is needed (at least), so decode steps rarely reallocate.
SPARE_COLUMNS = 256


class GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` that writes new states into preallocated columns instead of concatenating."""

    _kbuf: Any = None
    _vbuf: Any = None

    def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """Write the new states after the cached ones; return (keys, values) of every column so far."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = self.get_seq_length()
        k = key_states.shape[-2]
        if not self._owns_states() or n + k > self._kbuf.shape[-2] or key_states.shape[0] != self._kbuf.shape[0]:
            self._reallocate(key_states, value_states, n, n + k + max(SPARE_COLUMNS, n + k))
        self._kbuf[..., n : n + k, :] = key_states
        self._vbuf[..., n : n + k, :] = value_states
        self.keys = self._kbuf[..., : n + k, :]
        self.values = self._vbuf[..., : n + k, :]
        return self.keys, self.values

    def _owns_states(self) -> bool:
        """Whether ``keys``/``values`` are still views of the buffers (not replaced by a batch select)."""
        keys, values = self.keys, self.values
        if self._kbuf is None or keys is None or values is None:
            return False
        if keys.numel() == 0:
            return True
        return keys.data_ptr() == self._kbuf.data_ptr() and values.data_ptr() == self._vbuf.data_ptr()

    def _reallocate(self, key_states: Any, value_states: Any, n: int, columns: int) -> None:
        kbuf = key_states.new_empty((*key_states.shape[:2], columns, key_states.shape[-1]))
        vbuf = value_states.new_empty((*value_states.shape[:2], columns, value_states.shape[-1]))
        if n:
            kbuf[..., :n, :] = self.keys
            vbuf[..., :n, :] = self.values
        self._kbuf, self._vbuf = kbuf, vbuf

    def reset(self) -> None:
        """Drop the buffers with the states."""
        self._kbuf = self._vbuf = None
        super().reset()


def growing_cache(config: Any) -> DynamicCache:
    """A ``DynamicCache`` for ``config`` whose full-attention layers grow in place.

    Layers of other kinds (sliding windows, linear attention) stay as transformers makes them.
    """
    cache = DynamicCache(config=config)
    cache.layers = [GrowingLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache
