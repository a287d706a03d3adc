"""Continuous batching for the HF backend: rows join after their prefill and leave when they finish.

A :class:`DecodeBatch` holds the rows that are decoding together: one KV cache, one attention
mask, each row's next position and the token it sampled last. :meth:`DecodeBatch.step` feeds
every row its last token and samples the next; :meth:`DecodeBatch.add` does the same in a pass
that also prefills new prompts (only what the prefix cache does not hold), so a joining row does
not pause the others for its prefill. A row whose turn ends leaves at once, so an episode waiting
on the env never waits for another episode's long answer, and its next turn can join while the
others are still decoding (what vLLM calls continuous batching). Every pass is a packed forward
(:func:`~sparring.agents.kv_cache.packed_forward`): the new tokens of all rows form one sequence
for the linear layers, and attention runs per row over that row's columns.

Layout: every row of the cache has the same number of columns; the columns a row does not use
are padding before its tokens, masked out.
Positions are explicit, so padding never shifts them. The cache's rows live in fixed slots
(:class:`~sparring.agents.kv_cache.SlotLayer`): a joining row is written into a free slot, a
leaving row's slot gets the last row. When rows leave, the leading padding that no remaining row
needs is cut by moving the window.

Each row samples with its own ``torch.Generator`` seeded from its request, so a sampled turn is
reproducible whatever else shares the batch (up to float rounding of batched matmuls).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from sparring.agents.generation import Generation, SamplingParams
from sparring.agents.kv_cache import SlotLayer, make_plan, packed_forward, slot_cache

__all__ = ["DecodeBatch", "Request", "sample_next"]

#: Padding columns that no remaining row needs are cut once there are at least this many.
TRIM_COLUMNS = 32


@dataclass(frozen=True)
class Request:
    """One prompt to continue: a caller's key (returned with the result), the ids, the sampling."""

    key: Hashable
    prompt: Sequence[int]
    sampling: SamplingParams


@dataclass
class _Row:
    request: Request
    rng: torch.Generator | None
    out_ids: list[int] = field(default_factory=list)
    out_lp: list[float] = field(default_factory=list)
    finish: str = "length"


def sample_next(logits: Any, sampling: SamplingParams, rng: Any) -> tuple[Any, Any]:
    """Pick the next token of every row; return (token ids, their behaviour logprobs).

    Args:
        logits: ``[batch, vocab]`` float logits of the last position.
        sampling: Temperature and top-p.
        rng: A ``torch.Generator`` for sampling.
    """
    logits = logits.float()
    if sampling.greedy:
        logprobs = torch.log_softmax(logits, dim=-1)
        tokens = logits.argmax(dim=-1)
    else:
        logprobs = torch.log_softmax(logits / sampling.temperature, dim=-1)
        probs = logprobs.exp()
        if sampling.top_p < 1.0:
            sorted_probs, order = probs.sort(dim=-1, descending=True)
            # Keep the smallest prefix whose mass reaches top_p (the first token always stays).
            drop = sorted_probs.cumsum(dim=-1) - sorted_probs >= sampling.top_p
            sorted_probs = sorted_probs.masked_fill(drop, 0.0)
            probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
        tokens = torch.multinomial(probs, 1, generator=rng).squeeze(-1)
    return tokens, logprobs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


class DecodeBatch:
    """The rows of one generator that are decoding together (see the module docstring).

    Args:
        generator: The :class:`~sparring.agents.hf_backend.HFGenerator` whose model, tokenizer
            and prefix cache the batch uses. The caller holds the generator's lock around calls.
    """

    def __init__(self, generator: Any):
        """Start with no rows."""
        self.gen = generator
        self.rows: list[_Row] = []
        self.cache: Any = None
        self.mask: torch.Tensor | None = None  # [rows, columns], 1 where a row has a token
        self.positions: torch.Tensor | None = None  # [rows, 1], position of the token fed next
        self.tokens: torch.Tensor | None = None  # [rows], the token each row sampled last

    @property
    def active(self) -> int:
        """Rows still decoding."""
        return len(self.rows)

    def add(self, requests: Sequence[Request]) -> list[tuple[Hashable, Generation]]:
        """Let ``requests`` join: one pass prefills them and decodes a token of every running row.

        Returns the rows (joining or running) that finished.
        """
        if not requests:
            return []
        if any(len(r.prompt) == 0 for r in requests):
            raise ValueError("cannot generate from an empty prompt")
        return self._forward(requests)

    def step(self) -> list[tuple[Hashable, Generation]]:
        """Feed every row the token it sampled last, sample the next; return the rows that finished."""
        if not self.rows:
            return []
        return self._forward([])

    # -- internals --------------------------------------------------------------------------

    def _forward(self, joining: Sequence[Request]) -> list[tuple[Hashable, Generation]]:
        """One packed pass (:func:`~sparring.agents.kv_cache.packed_forward`): a token of each running
        row, then the uncached tokens of each joining row; sample a token for every row."""
        gen = self.gen
        device = gen.device
        config = gen.model.config
        n0 = len(self.rows)
        ids: list[torch.Tensor] = []
        positions: list[torch.Tensor] = []
        if n0:
            assert self.tokens is not None and self.positions is not None
            ids.append(self.tokens)
            positions.append(self.positions[:, 0])
        plan_rows: list[tuple[int, int, int, int]] = []
        hits = []
        offset = n0
        for j, request in enumerate(joining):
            cached, states = gen.prefix_cache.lookup(request.prompt)
            new = len(request.prompt) - cached
            plan_rows.append((n0 + j, offset, new, cached))
            hits.append(states)
            ids.append(torch.tensor(list(request.prompt[cached:]), dtype=torch.long, device=device))
            positions.append(torch.arange(cached, len(request.prompt), device=device))
            offset += new
        if self.cache is None:
            self.cache = slot_cache(config)
        width = max((n + c for _, _, n, c in plan_rows), default=1)
        heads = config.num_key_value_heads
        dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        like = torch.empty((heads, 1, dim), dtype=gen.model.dtype, device=device)
        for index, layer in enumerate(self._slots()):
            layer.reserve(len(joining), width, like)
            for (row, _, n, _), states in zip(plan_rows, hits, strict=True):
                if states is not None:
                    layer.write_prefix(row, states[index][0], states[index][1], before=n)
        self._grow_mask(plan_rows)
        assert self.mask is not None
        groups = config.num_attention_heads // heads
        plan = make_plan(n0, plan_rows, self.mask, groups)
        last = list(range(n0)) + [o + n - 1 for _, o, n, _ in plan_rows]
        with torch.inference_mode(), packed_forward(gen.model, self.cache, plan) as extra:
            logits = gen.model(
                input_ids=torch.cat(ids).unsqueeze(0),
                position_ids=torch.cat(positions).unsqueeze(0),
                past_key_values=self.cache,
                use_cache=True,
                logits_to_keep=torch.tensor(last, device=device),  # the last position of each row only
                **extra,
            ).logits[0]
        joined = [torch.tensor([[len(r.prompt)]], device=device) for r in joining]
        self.positions = torch.cat(([self.positions + 1] if n0 and self.positions is not None else []) + joined)
        self.rows = self.rows + [_Row(r, _row_rng(r.sampling, device)) for r in joining]
        return self._sample(logits)

    def _grow_mask(self, joining: list[tuple[int, int, int, int]]) -> None:
        """The mask after a pass: a new column for the running rows, each joining row's own columns at the end."""
        layer = self._slots()[0]
        columns = layer.end + 1 - layer.start  # the window after the pass
        parts = []
        if self.mask is not None and self.rows:
            parts.append(_pad_left(torch.cat([self.mask, self.mask.new_ones((len(self.rows), 1))], dim=1), columns))
        for _, _, n, c in joining:
            row = torch.zeros((1, columns), dtype=torch.long, device=self.gen.device)
            row[0, columns - n - c :] = 1
            parts.append(row)
        self.mask = torch.cat(parts)

    def _sample(self, logits: torch.Tensor) -> list[tuple[Hashable, Generation]]:
        """Sample a token for every row (one row of ``logits`` each); drop and return those that finished."""
        rows = self.rows
        if all(r.request.sampling.greedy for r in rows):
            tokens, lps = sample_next(logits, rows[0].request.sampling, None)
        else:
            picked = [sample_next(logits[i : i + 1], r.request.sampling, r.rng) for i, r in enumerate(rows)]
            tokens = torch.cat([t for t, _ in picked])
            lps = torch.cat([lp for _, lp in picked])
        self.tokens = tokens
        done: list[int] = []
        eos = self.gen.eos_set
        for index, (row, tok, lp) in enumerate(zip(rows, tokens.tolist(), lps.tolist(), strict=True)):
            row.out_ids.append(int(tok))
            row.out_lp.append(float(lp))
            sampling = row.request.sampling
            if tok in eos or self.gen.hit_stop(row.out_ids, sampling.stop):
                row.finish = "stop"
                done.append(index)
            elif len(row.out_ids) >= sampling.max_new_tokens:
                done.append(index)
        return self._retire(done)

    def _retire(self, done: list[int]) -> list[tuple[Hashable, Generation]]:
        """Remember the finished rows' states, take them out of the batch, return their results.

        A leaving row's slot gets the batch's last row (one row's copy, see
        :class:`~sparring.agents.kv_cache.SlotLayer`); the rows' order changes the same way.
        """
        if not done:
            return []
        assert self.mask is not None and self.positions is not None and self.tokens is not None
        results = []
        for index in done:
            row = self.rows[index]
            self.gen.remember(list(row.request.prompt) + row.out_ids[:-1], self.cache, self.mask, index)
            results.append((row.request.key, self._result(row)))
        order = list(range(len(self.rows)))
        for index in sorted(done, reverse=True):
            order[index] = order[-1]
            order.pop()
            for layer in self._slots():
                layer.remove(index)
        self.rows = [self.rows[i] for i in order]
        if not order:
            self.mask = self.positions = self.tokens = None
            return results
        kept = torch.tensor(order, device=self.mask.device)
        self.mask, self.positions, self.tokens = self.mask[kept], self.positions[kept], self.tokens[kept]
        self._compact()
        return results

    def _compact(self) -> None:
        """Cut the leading padding that every remaining row has (when enough has piled up).

        Each row's own columns are one block that ends at the window's end (a joining row's cached
        prefix is written just before its new tokens), so leading padding is the only padding, and
        it goes by moving the start of the cache's window: no copy.
        """
        assert self.mask is not None
        unused = int(self.mask.argmax(dim=1).min())  # each row's first own column; the fewest leading pads
        if unused >= TRIM_COLUMNS:
            self.mask = self.mask[:, unused:]
            for layer in self._slots():
                layer.trim(unused)

    def _slots(self) -> list[SlotLayer]:
        return [layer for layer in self.cache.layers if isinstance(layer, SlotLayer)]

    def _result(self, row: _Row) -> Generation:
        return Generation(
            token_ids=row.out_ids,
            logprobs=row.out_lp,
            text=self.gen.tokenizer.decode(row.out_ids, skip_special_tokens=True),
            finish_reason="stop" if row.finish == "stop" else "length",
        )


def _pad_left(t: torch.Tensor, columns: int) -> torch.Tensor:
    """``t`` ``[rows, c]`` with zero columns prepended up to ``columns``."""
    missing = columns - t.shape[1]
    if missing == 0:
        return t
    return torch.cat([t.new_zeros((t.shape[0], missing)), t], dim=1)


def _row_rng(sampling: SamplingParams, device: str) -> torch.Generator | None:
    """The row's own sampler (None for greedy rows); seeded from the request, else at random."""
    if sampling.greedy:
        return None
    rng = torch.Generator(device=device)
    rng.manual_seed(sampling.seed if sampling.seed is not None else int(torch.randint(0, 2**62, ()).item()))
    return rng
