"""A KV cache for a continuous batch: rows live in fixed slots of buffers that are allocated once.

transformers' ``DynamicLayer`` appends a step's keys and values with ``torch.cat`` and selects
rows with fancy indexing: both copy every cached column of every row of every layer. In a
continuous batch rows join and leave all the time, and on CPU those copies (and the page faults of
the fresh memory they land in) add up to a large share of the decode steps around them.

:class:`SlotLayer` keeps each layer's states in buffers ``[rows, heads, columns, dim]`` with spare
rows and columns. The live rows are slots ``0..n-1`` and the live columns a window ``[start,
end)``; ``keys``/``values`` are views of that region, so everything else ``DynamicLayer`` does
(lengths, masks) works unchanged; the other operations transformers may call (row selection,
beam reordering, crop) are overridden to keep the buffers in step. A decode step writes one
column; a joining row writes only its own states; a leaving row is replaced by the last one (one
row's copy); trimming leading padding moves the window's start, and only padding in the middle of
rows (a cached prefix, then the new tokens) needs a copy (:meth:`SlotLayer.repack`). The buffers
are zero-filled when allocated, so columns outside a row's tokens (masked out) always hold finite
values.

Imported by the HF backend only (it imports transformers).
"""

from __future__ import annotations

from typing import Any

from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

__all__ = ["SlotLayer", "slot_cache"]

#: Spare columns allocated after the window, so decode steps rarely reallocate.
SPARE_COLUMNS = 256
#: Spare columns before the window, so a joining row longer than the window rarely reallocates.
HEADROOM = 64


class SlotLayer(DynamicLayer):
    """A ``DynamicLayer`` whose rows and columns live in preallocated buffers (module docstring)."""

    def __init__(self) -> None:
        """An empty layer; :meth:`place` or :meth:`update` allocates."""
        super().__init__()
        self._kbuf: Any = None
        self._vbuf: Any = None
        self.rows = 0
        self.start = self.end = 0

    # -- what transformers calls ---------------------------------------------------------

    def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """Write the new columns after the window's end; return (keys, values) of the whole window."""
        if self._kbuf is None:
            self.place(key_states, value_states)
            return self.keys, self.values
        if key_states.shape[0] != self.rows:
            raise ValueError(f"{key_states.shape[0]} rows of new states for a cache of {self.rows} rows")
        k = key_states.shape[-2]
        if self.end + k > self._kbuf.shape[-2]:
            self._reallocate(self._kbuf.shape[0], left=self.end - self.start + HEADROOM, right=k + SPARE_COLUMNS)
        self._kbuf[: self.rows, :, self.end : self.end + k] = key_states
        self._vbuf[: self.rows, :, self.end : self.end + k] = value_states
        self.end += k
        self._refresh()
        return self.keys, self.values

    def batch_select_indices(self, indices: Any) -> None:
        """Keep the rows ``indices`` (in that order)."""
        keys, values = self.keys, self.values
        if self._kbuf is not None and keys is not None and values is not None:
            self._replace(keys[indices], values[indices])

    def reorder_cache(self, beam_idx: Any) -> None:
        """Put the rows in the order ``beam_idx`` (beam search)."""
        self.batch_select_indices(beam_idx)

    def batch_repeat_interleave(self, repeats: int) -> None:
        """Repeat every row ``repeats`` times, each copy next to its original."""
        keys, values = self.keys, self.values
        if self._kbuf is not None and keys is not None and values is not None:
            self._replace(keys.repeat_interleave(repeats, dim=0), values.repeat_interleave(repeats, dim=0))

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the window's last ``-tokens_to_remove`` columns (a negative count, as transformers passes)."""
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes a negative number of columns to remove, got {tokens_to_remove}")
        if self._kbuf is None or tokens_to_remove == 0:
            return
        self.end = max(self.start, self.end + tokens_to_remove)
        self._refresh()

    def offload(self) -> None:
        """Not supported: the states live in buffers that ``keys``/``values`` are views of."""
        raise NotImplementedError("SlotLayer keeps its states on one device; use DynamicCache to offload")

    def prefetch(self) -> None:
        """Not supported (see :meth:`offload`)."""
        raise NotImplementedError("SlotLayer keeps its states on one device; use DynamicCache to offload")

    def reset(self) -> None:
        """Drop the buffers with the states."""
        self._kbuf = self._vbuf = None
        self.rows = self.start = self.end = 0
        super().reset()

    # -- what the continuous batch calls -------------------------------------------------

    def place(self, keys: Any, values: Any) -> None:
        """Add rows ``[m, heads, w, dim]`` after the live ones, right-aligned at the window's end.

        The window widens to the left if the new rows have more columns than it; the columns a
        row does not fill are masked out by the caller.
        """
        m, w = keys.shape[0], keys.shape[-2]
        if self._kbuf is None:
            self.is_initialized, self.dtype, self.device = True, keys.dtype, keys.device
            shape = (m, keys.shape[1], w + HEADROOM + SPARE_COLUMNS, keys.shape[-1])
            self._kbuf, self._vbuf = keys.new_zeros(shape), values.new_zeros(shape)
            self.start = self.end = w + HEADROOM
        elif self.rows == 0:  # an empty batch starts a new window
            self.start = self.end = min(w + HEADROOM, self._kbuf.shape[-2] - SPARE_COLUMNS)
        if self.rows + m > self._kbuf.shape[0] or self.end < w:
            rows = max(self.rows + m, min(2 * self._kbuf.shape[0], self.rows + m + 8))
            self._reallocate(rows, left=max(self.end - self.start, w) + HEADROOM)
        self.start = min(self.start, self.end - w)
        self._kbuf[self.rows : self.rows + m, :, self.end - w : self.end] = keys
        self._vbuf[self.rows : self.rows + m, :, self.end - w : self.end] = values
        self.rows += m
        self._refresh()

    def remove(self, row: int) -> None:
        """Take ``row`` out: the last row moves into its slot (callers reorder their rows the same way)."""
        last = self.rows - 1
        if row != last:
            self._kbuf[row, :, self.start : self.end] = self._kbuf[last, :, self.start : self.end]
            self._vbuf[row, :, self.start : self.end] = self._vbuf[last, :, self.start : self.end]
        self.rows = last
        self._refresh()

    def trim(self, columns: int) -> None:
        """Drop the window's first ``columns`` columns (padding that no live row needs)."""
        self.start += columns
        self._refresh()

    def repack(self, columns: Any) -> None:
        """Keep, for each row ``r``, the window's columns ``columns[r]`` (in order), right-aligned.

        For padding in the middle of rows, which :meth:`trim` cannot cut: copies every live row.
        """
        assert self.keys is not None and self.values is not None
        index = columns[:, None, :, None].expand(-1, self.keys.shape[1], -1, self.keys.shape[-1])
        keys, values = self.keys.gather(2, index), self.values.gather(2, index)  # fresh tensors
        width = columns.shape[1]
        self._kbuf[: self.rows, :, self.end - width : self.end] = keys
        self._vbuf[: self.rows, :, self.end - width : self.end] = values
        self.start = self.end - width
        self._refresh()

    # -- internals -----------------------------------------------------------------------

    def _replace(self, keys: Any, values: Any) -> None:
        """Make ``keys``/``values`` (fresh tensors, not views of the buffers) the only rows."""
        self.rows = 0
        self.place(keys, values)

    def _refresh(self) -> None:
        self.keys = self._kbuf[: self.rows, :, self.start : self.end]
        self.values = self._vbuf[: self.rows, :, self.start : self.end]

    def _reallocate(self, rows: int, left: int, right: int = SPARE_COLUMNS) -> None:
        """New zeroed buffers of ``rows`` rows; the live region is copied to end at column ``left``
        (at least its width, so the window can widen leftwards), with ``right`` spare columns after."""
        width = self.end - self.start
        new_end = max(left, width)
        shape = (rows, self._kbuf.shape[1], new_end + right, self._kbuf.shape[-1])
        kbuf, vbuf = self._kbuf.new_zeros(shape), self._vbuf.new_zeros(shape)
        kbuf[: self.rows, :, new_end - width : new_end] = self._kbuf[: self.rows, :, self.start : self.end]
        vbuf[: self.rows, :, new_end - width : new_end] = self._vbuf[: self.rows, :, self.start : self.end]
        self._kbuf, self._vbuf = kbuf, vbuf
        self.start, self.end = new_end - width, new_end


def slot_cache(config: Any) -> DynamicCache:
    """A ``DynamicCache`` for ``config`` whose full-attention layers are :class:`SlotLayer` s.

    Layers of other kinds (sliding windows, linear attention) stay as transformers makes them.
    """
    cache = DynamicCache(config=config)
    cache.layers = [SlotLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache
