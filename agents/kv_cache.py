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
row's copy); trimming leading padding moves the window's start. A window that needs more room
first moves within the buffers, which are reallocated (with room to spare) only when they are too
small. The buffers are zero-filled when allocated, so columns outside a row's tokens (masked out)
always hold finite values.

A *packed* forward (:class:`PackedPlan`, :func:`packed_attention`) runs, in one pass, the decode
step of the rows in the batch and the prefill of rows joining it: every new token of every row is
one position of a single sequence, so the linear layers (most of the work) see them all at once,
while attention is computed per row against that row's own columns of the cache. A joining row
then no longer pauses the others for its prefill (vLLM's scheduler mixes prefill and decode tokens
in one batch the same way), and no row is padded to the width of another's new tokens.

Imported by the HF backend only (it imports transformers).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import AttentionInterface, DynamicCache
from transformers.cache_utils import DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward

__all__ = ["PACKED_ATTENTION", "PackedPlan", "SlotLayer", "packed_attention", "packed_forward", "slot_cache"]

#: Spare columns allocated after the window, so decode steps rarely reallocate.
SPARE_COLUMNS = 256
#: Spare columns before the window, so a joining row longer than the window rarely reallocates.
HEADROOM = 64


class SlotLayer(DynamicLayer):
    """A ``DynamicLayer`` whose rows and columns live in preallocated buffers (module docstring)."""

    def __init__(self) -> None:
        """An empty layer; :meth:`place`, :meth:`reserve` or :meth:`update` allocates."""
        super().__init__()
        self._kbuf: Any = None
        self._vbuf: Any = None
        self.rows = 0
        self.start = self.end = 0
        self.plan: PackedPlan | None = None  # set during a packed forward (see :func:`packed_forward`)

    # -- what transformers calls ---------------------------------------------------------

    def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """Write the new columns after the window's end; return (keys, values) of the whole window.

        In a packed forward the states come as one sequence ``[1, heads, tokens, dim]``: the
        decoding rows' tokens go to the new column, each joining row's to its last columns.
        """
        if self.plan is not None:
            return self._update_packed(key_states[0], value_states[0], self.plan)
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
        self._open(m, keys, w + HEADROOM)
        self._fit(self.rows + m, w)
        self.start = min(self.start, self.end - w)
        self._kbuf[self.rows : self.rows + m, :, self.end - w : self.end] = keys
        self._vbuf[self.rows : self.rows + m, :, self.end - w : self.end] = values
        self.rows += m
        self._refresh()

    def reserve(self, m: int, width: int, like: Any) -> None:
        """Make room, before a packed forward, for ``m`` joining rows and one more column.

        The joining rows take slots ``rows..rows+m-1``; their states (a cached prefix, then the new
        tokens) span at most ``width`` columns ending with the new column. ``like`` is a
        ``[heads, 1, dim]`` tensor of the states' dtype and device.
        """
        # Left headroom as wide as the first rows: the next turns of episodes are longer.
        self._open(m, like, 2 * width - 1 + HEADROOM)
        self._fit(self.rows + m, width - 1)
        self.start = min(self.start, self.end + 1 - width)
        self.rows += m
        self._refresh()

    def write_prefix(self, row: int, keys: Any, values: Any, before: int) -> None:
        """Write a joining row's cached prefix ``[heads, c, dim]`` to end ``before`` columns ahead of the new column."""
        c, stop = keys.shape[-2], self.end + 1 - before
        self._kbuf[row, :, stop - c : stop] = keys
        self._vbuf[row, :, stop - c : stop] = values

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

    # -- internals -----------------------------------------------------------------------

    def _update_packed(self, keys: Any, values: Any, plan: PackedPlan) -> tuple[Any, Any]:
        """Scatter one packed sequence's states ``[heads, tokens, dim]`` to their rows (see :meth:`update`)."""
        end, n0 = self.end, plan.decoding
        if n0:
            self._kbuf[:n0, :, end] = keys[:, :n0].transpose(0, 1)
            self._vbuf[:n0, :, end] = values[:, :n0].transpose(0, 1)
        for row, offset, n, _ in plan.joining:
            self._kbuf[row, :, end + 1 - n : end + 1] = keys[:, offset : offset + n]
            self._vbuf[row, :, end + 1 - n : end + 1] = values[:, offset : offset + n]
        self.end = end + 1
        self._refresh()
        return self.keys, self.values

    def _open(self, m: int, like: Any, end: int) -> None:
        """Allocate zeroed buffers for ``m`` rows (of ``like``'s heads, dim, dtype and device) with the
        window's end at column ``end``; or, when the batch is empty, start its new window there."""
        if self._kbuf is None:
            self.is_initialized, self.dtype, self.device = True, like.dtype, like.device
            shape = (m, like.shape[-3], end + SPARE_COLUMNS, like.shape[-1])
            self._kbuf, self._vbuf = like.new_zeros(shape), like.new_zeros(shape)
            self.start = self.end = end
        elif self.rows == 0:
            self.start = self.end = min(end, self._kbuf.shape[-2] - SPARE_COLUMNS)

    def _fit(self, rows: int, left: int) -> None:
        """Make the buffers hold ``rows`` rows, ``left`` columns before the window's end and one after it.

        Where the buffers are large enough, the window moves within them (one copy of the live
        region); only otherwise are they reallocated, with room to spare on both sides, since
        allocating (and faulting in) fresh zeroed memory costs far more than the copy.
        """
        cap_rows, cap_cols = self._kbuf.shape[0], self._kbuf.shape[-2]
        if rows <= cap_rows and left <= self.end < cap_cols:
            return
        width = self.end - self.start
        needed = max(width, left) + 1
        slack = cap_cols - needed
        if rows <= cap_rows and slack >= HEADROOM:
            new_end = max(width, left) + slack - min(slack // 2, SPARE_COLUMNS)  # keep up to SPARE after it
            keys = self._kbuf[: self.rows, :, self.start : self.end].clone()
            values = self._vbuf[: self.rows, :, self.start : self.end].clone()
            self._kbuf[: self.rows, :, new_end - width : new_end] = keys
            self._vbuf[: self.rows, :, new_end - width : new_end] = values
            self.start, self.end = new_end - width, new_end
            return
        grown = max(rows, min(2 * cap_rows, rows + 8)) if rows > cap_rows else cap_rows
        self._reallocate(grown, left=max(width, left) + max(HEADROOM, cap_cols // 4))

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


#: The name under which :func:`packed_attention` is registered with transformers.
PACKED_ATTENTION = "sparring_packed"


@dataclass
class PackedPlan:
    """Where the tokens of one packed forward belong.

    The sequence holds first one token of each of the ``decoding`` rows (slots ``0..decoding-1``,
    in order), then the new tokens of each joining row. A joining row is ``(slot, offset in the
    sequence, new tokens, cached prefix length)``; its prefix sits just before its new tokens, so
    its states are the last ``prefix + new`` columns of its slot.
    """

    decoding: int
    joining: list[tuple[int, int, int, int]]
    decode_mask: Any = None
    """``[decoding, 1, 1, columns]`` bool: the columns each decoding row attends to."""
    causal: list[Any] = field(default_factory=list)
    """Per joining row, ``[groups * new, prefix + new]`` bool: causal within the row, query heads grouped."""


def packed_attention(
    module: Any, query: Any, key: Any, value: Any, attention_mask: Any, scaling: float | None = None, **kwargs: Any
) -> tuple[Any, None]:
    """Attention of a packed forward: each row's queries against that row's own columns only.

    Registered with transformers as :data:`PACKED_ATTENTION`; without a ``sparring_plan`` it is
    plain SDPA. Query heads that share a key/value head are folded into the query length, so the
    key/value heads are never repeated in memory.
    """
    plan: PackedPlan | None = kwargs.pop("sparring_plan", None)
    if plan is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)
    unsupported = [k for k in ("softcap", "s_aux", "sliding_window") if kwargs.get(k) is not None]
    if unsupported:  # the model's attention is more than softmax(QK^T)V; never compute it wrongly
        raise NotImplementedError(f"packed attention does not support {', '.join(unsupported)}")
    sdpa = torch.nn.functional.scaled_dot_product_attention
    q = query[0]  # [heads, tokens, dim]
    heads, dim = q.shape[0], q.shape[-1]
    kv_heads = key.shape[1]
    groups = heads // kv_heads
    parts = []
    n0 = plan.decoding
    if n0:
        qd = q[:, :n0].transpose(0, 1).reshape(n0, kv_heads, groups, dim)
        out = sdpa(qd, key[:n0], value[:n0], attn_mask=plan.decode_mask, scale=scaling)
        parts.append(out.reshape(n0, heads, dim))
    for (row, offset, n, c), causal in zip(plan.joining, plan.causal, strict=True):
        qj = q[None, :, offset : offset + n].reshape(1, kv_heads, groups * n, dim)
        kj, vj = key[row : row + 1, :, -(n + c) :], value[row : row + 1, :, -(n + c) :]
        out = sdpa(qj, kj, vj, attn_mask=causal, scale=scaling)  # [1, kv_heads, groups * n, dim]
        parts.append(out.reshape(heads, n, dim).transpose(0, 1))
    return torch.cat(parts).unsqueeze(0), None


AttentionInterface.register(PACKED_ATTENTION, packed_attention)


def make_plan(decoding: int, joining: list[tuple[int, int, int, int]], mask: Any, groups: int) -> PackedPlan:
    """A :class:`PackedPlan` with its masks, from the batch's ``[rows, columns]`` 0/1 mask after the pass."""
    plan = PackedPlan(decoding, joining)
    if decoding:
        plan.decode_mask = mask[:decoding].bool()[:, None, None, :]
    for _, _, n, c in joining:
        rows = torch.arange(n, device=mask.device)[:, None]
        cols = torch.arange(n + c, device=mask.device)[None, :]
        plan.causal.append((cols <= rows + c).repeat(groups, 1))
    return plan


@contextmanager
def packed_forward(model: Any, cache: DynamicCache, plan: PackedPlan) -> Iterator[dict[str, Any]]:
    """Run the model's forward inside this as a packed pass; yields the extra forward kwargs.

    The model's attention implementation is switched for the duration only, so the same model
    stays usable by others (a trainer's forward) between passes.
    """
    config = model.config
    before = config._attn_implementation
    layers = [layer for layer in cache.layers if isinstance(layer, SlotLayer)]
    config._attn_implementation = PACKED_ATTENTION
    for layer in layers:
        layer.plan = plan
    try:
        # A 4-D mask is passed through untouched; the plan carries the real masks.
        dummy = torch.ones((1, 1, 1, 1), dtype=torch.bool)
        yield {"sparring_plan": plan, "attention_mask": dummy}
    finally:
        config._attn_implementation = before
        for layer in layers:
            layer.plan = None
