"""Continuous batching for the HF backend: rows join after their prefill and leave when they finish.

A :class:`DecodeBatch` holds the rows that are decoding together: one KV cache, one attention
mask, each row's next position and the token it sampled last. :meth:`DecodeBatch.add` prefills
new prompts (reusing cached prefixes) and merges them into the running batch; :meth:`DecodeBatch.step`
feeds every row its last token and samples the next. A row whose turn ends leaves at once, so an
episode waiting on the env never waits for another episode's long answer, and its next turn can
join while the others are still decoding (what vLLM calls continuous batching).

Layout: every row of the cache has the same number of columns; the columns a row does not use
are padding, masked out (before its tokens, and between a cached prefix and its new tokens).
Positions are explicit, so padding never shifts them. The cache's rows live in fixed slots
(:class:`~sparring.agents.kv_cache.SlotLayer`): a joining row is written into a free slot, a
leaving row's slot gets the last row. When rows leave, padding that no remaining row needs is cut:
leading padding by moving the window, padding in the middle of rows by packing each row's columns
to the right.

Each row samples with its own ``torch.Generator`` seeded from its request, so a sampled turn is
reproducible whatever else shares the batch (up to float rounding of batched matmuls).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from sparring.agents.generation import Generation, SamplingParams
from sparring.agents.kv_cache import SlotLayer, slot_cache

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
        """Prefill ``requests`` together and let them join; return those already finished."""
        if not requests:
            return []
        if any(len(r.prompt) == 0 for r in requests):
            raise ValueError("cannot generate from an empty prompt")
        gen = self.gen
        device = gen.device
        prompts = [r.prompt for r in requests]
        hits = [gen.prefix_cache.lookup(p) for p in prompts]
        cached = max(c for c, _ in hits)
        width = max(len(p) - c for p, (c, _) in zip(prompts, hits, strict=True))
        # Row layout: [pad | cached prefix | pad | new tokens]; padding anywhere is masked out.
        input_ids = torch.full((len(prompts), width), gen.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), cached + width), dtype=torch.long)
        positions = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, (p, (c, _)) in enumerate(zip(prompts, hits, strict=True)):
            new = len(p) - c
            input_ids[i, width - new :] = torch.tensor(list(p[c:]), dtype=torch.long)
            positions[i, width - new :] = torch.arange(c, len(p))
            mask[i, cached - c : cached] = 1
            mask[i, cached + width - new :] = 1
        input_ids, mask, positions = input_ids.to(device), mask.to(device), positions.to(device)
        cache = self._seed_cache(hits, cached, len(prompts))
        with torch.inference_mode():
            logits = gen.model(
                input_ids=input_ids,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,  # the vocabulary projection of every prompt position would dominate prefill
            ).logits[:, -1, :]
        rows = [_Row(r, _row_rng(r.sampling, device)) for r in requests]
        self._merge(rows, cache, mask, positions[:, -1:] + 1)
        return self._sample(logits, first=len(self.rows) - len(rows))

    def step(self) -> list[tuple[Hashable, Generation]]:
        """Feed every row the token it sampled last, sample the next; return the rows that finished."""
        if not self.rows:
            return []
        assert self.mask is not None and self.positions is not None and self.tokens is not None
        self.mask = torch.cat([self.mask, self.mask.new_ones((len(self.rows), 1))], dim=1)
        with torch.inference_mode():
            logits = self.gen.model(
                input_ids=self.tokens.unsqueeze(-1),
                attention_mask=self.mask,
                position_ids=self.positions,
                past_key_values=self.cache,
                use_cache=True,
            ).logits[:, -1, :]
        self.positions = self.positions + 1
        return self._sample(logits, first=0)

    # -- internals --------------------------------------------------------------------------

    def _sample(self, logits: torch.Tensor, first: int) -> list[tuple[Hashable, Generation]]:
        """Sample for rows ``first..`` (whose logits these are); drop and return those that finished."""
        rows = self.rows[first:]
        if all(r.request.sampling.greedy for r in rows):
            tokens, lps = sample_next(logits, rows[0].request.sampling, None)
        else:
            picked = [sample_next(logits[i : i + 1], r.request.sampling, r.rng) for i, r in enumerate(rows)]
            tokens = torch.cat([t for t, _ in picked])
            lps = torch.cat([lp for _, lp in picked])
        if self.tokens is None or first == 0:
            self.tokens = tokens
        else:
            self.tokens = torch.cat([self.tokens[:first], tokens])
        done: list[int] = []
        eos = self.gen.eos_set
        for offset, (row, tok, lp) in enumerate(zip(rows, tokens.tolist(), lps.tolist(), strict=True)):
            row.out_ids.append(int(tok))
            row.out_lp.append(float(lp))
            sampling = row.request.sampling
            if tok in eos or self.gen.hit_stop(row.out_ids, sampling.stop):
                row.finish = "stop"
                done.append(first + offset)
            elif len(row.out_ids) >= sampling.max_new_tokens:
                done.append(first + offset)
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
        """Cut the padding columns that the remaining rows do not need (when enough have piled up).

        Leading padding that every row has goes by moving the start of the cache's window (no
        copy). Padding in the middle of rows (between a cached prefix and a row's new tokens) is
        cut by packing each row's own columns to the right, in order (one copy of the rows).
        """
        assert self.mask is not None
        unused = int(self.mask.argmax(dim=1).min())  # each row's first own column; the fewest leading pads
        if unused >= TRIM_COLUMNS:
            self.mask = self.mask[:, unused:]
            for layer in self._slots():
                layer.trim(unused)
        width = int(self.mask.sum(dim=1).max())
        if self.mask.shape[1] - width < TRIM_COLUMNS:
            return
        # A stable sort puts a row's padding columns first and its own after them, each in order.
        columns = torch.sort(self.mask, dim=1, stable=True).indices[:, -width:]
        self.mask = self.mask.gather(1, columns)
        for layer in self._slots():
            layer.repack(columns)

    def _slots(self) -> list[SlotLayer]:
        return [layer for layer in self.cache.layers if isinstance(layer, SlotLayer)]

    def _result(self, row: _Row) -> Generation:
        return Generation(
            token_ids=row.out_ids,
            logprobs=row.out_lp,
            text=self.gen.tokenizer.decode(row.out_ids, skip_special_tokens=True),
            finish_reason="stop" if row.finish == "stop" else "length",
        )

    def _seed_cache(self, hits: list[tuple[int, Any]], cached: int, n: int) -> Any:
        """A KV cache holding each new row's cached prefix, right-aligned at column ``cached``."""
        from transformers import DynamicCache

        cache = DynamicCache(config=self.gen.model.config)
        if cached == 0:
            return cache
        template = next(states for c, states in hits if states is not None)
        for layer, (k0, v0) in enumerate(template):
            keys = k0.new_zeros((n, k0.shape[0], cached, k0.shape[-1]))
            values = v0.new_zeros((n, v0.shape[0], cached, v0.shape[-1]))
            for i, (c, states) in enumerate(hits):
                if states is not None:
                    keys[i, :, cached - c :] = states[layer][0]
                    values[i, :, cached - c :] = states[layer][1]
            cache.update(keys, values, layer)
        return cache

    def _merge(self, rows: list[_Row], cache: Any, mask: torch.Tensor, positions: torch.Tensor) -> None:
        """Copy freshly prefilled rows into the batch's slots; left-pad whichever mask has fewer columns."""
        if self.cache is None:
            self.cache = slot_cache(self.gen.model.config)
        for slots, new in zip(self.cache.layers, cache.layers, strict=True):
            slots.place(new.keys, new.values)
        if not self.rows:
            self.rows, self.mask, self.positions = rows, mask, positions
            return
        assert self.mask is not None and self.positions is not None
        columns = max(self.mask.shape[1], mask.shape[1])
        self.mask = torch.cat([_pad_left(self.mask, columns), _pad_left(mask, columns)])
        self.positions = torch.cat([self.positions, positions])
        self.rows = self.rows + rows


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
