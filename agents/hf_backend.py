"""HF transformers backend: batched decoding with left padding, per-sequence stops and logprobs.

The decode loop is written out (rather than ``model.generate``) because the runner needs three
things per sequence that ``generate`` does not give together: its own stop strings, the behaviour
logprob of each sampled token under the unprocessed distribution, and a seeded sampler per call.
Finished sequences leave the batch (their KV-cache rows are dropped), so one long answer does not
make the others pay for its length.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from sparring.agents.generation import Generation, SamplingParams
from sparring.agents.prefix_cache import PrefixCache

__all__ = ["HFGenerator", "sample_next"]


def sample_next(logits: Any, sampling: SamplingParams, rng: Any) -> tuple[Any, Any]:
    """Pick the next token of every row; return (token ids, their behaviour logprobs).

    Args:
        logits: ``[batch, vocab]`` float logits of the last position.
        sampling: Temperature and top-p.
        rng: A ``torch.Generator`` for sampling.
    """
    import torch

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


class HFGenerator:
    """A transformers causal LM as a :class:`~sparring.agents.generation.Generator`.

    Example:
        >>> gen = HFGenerator()  # the default SmolLM2 checkpoint, on CPU
        >>> out = gen.generate([gen.tokenizer("Hello")["input_ids"]], SamplingParams(max_new_tokens=8))
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        device: str = "cpu",
        dtype: str = "float32",
        model_obj: Any = None,
        tokenizer: Any = None,
        prefix_cache_tokens: int = 16384,
    ):
        """Load the model.

        Args:
            model: Hub id or local path (None: the default SmolLM2 checkpoint).
            device: Torch device.
            dtype: Torch dtype name of the weights.
            model_obj: An already loaded model to use instead (e.g. the trainer's policy).
            tokenizer: Its tokenizer, with ``model_obj``.
            prefix_cache_tokens: Tokens of KV states kept between calls so an episode's next turn prefills
                only its new tokens (0: off). Call :meth:`clear_cache` after changing the weights.
        """
        from sparring.agents.model import load_model, load_tokenizer, resolve_model

        self.name = str(model or "default")
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(model)
        self.model = model_obj if model_obj is not None else load_model(model, device=device, dtype=dtype)
        if model_obj is None:
            self.name = resolve_model(model)
        self.device = device
        self.eos_ids = _eos_ids(self.tokenizer, self.model)
        self.pad_id = int(self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_ids[0])
        # One decode at a time: the model is shared by the runner, the server and the trainer.
        self._lock = threading.Lock()
        self.prefix_cache = PrefixCache(prefix_cache_tokens)

    def clear_cache(self) -> None:
        """Drop cached KV states (they belong to the weights that computed them)."""
        with self._lock:
            self.prefix_cache.clear()

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Generation]:
        """Continue every prompt (see :class:`~sparring.agents.generation.Generator`)."""
        if not prompts:
            return []
        with self._lock:
            return self._generate(prompts, sampling)

    def _generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Generation]:
        import torch

        n = len(prompts)
        if any(len(p) == 0 for p in prompts):
            raise ValueError("cannot generate from an empty prompt")
        hits = [self.prefix_cache.lookup(p) for p in prompts]
        cached = max(c for c, _ in hits)
        width = max(len(p) - c for p, (c, _) in zip(prompts, hits, strict=True))
        # Row layout: [pad | cached prefix | pad | new tokens]; padding anywhere is masked out.
        input_ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((n, cached + width), dtype=torch.long)
        positions = torch.zeros((n, width), dtype=torch.long)
        for i, (p, (c, _)) in enumerate(zip(prompts, hits, strict=True)):
            new = len(p) - c
            input_ids[i, width - new :] = torch.tensor(list(p[c:]), dtype=torch.long)
            positions[i, width - new :] = torch.arange(c, len(p))
            mask[i, cached - c : cached] = 1
            mask[i, cached + width - new :] = 1
        input_ids, mask, positions = input_ids.to(self.device), mask.to(self.device), positions.to(self.device)
        rng = torch.Generator(device=self.device)
        rng.manual_seed(sampling.seed if sampling.seed is not None else int(torch.randint(0, 2**62, ()).item()))

        out_ids: list[list[int]] = [[] for _ in range(n)]
        out_lp: list[list[float]] = [[] for _ in range(n)]
        finish: list[str] = ["length"] * n
        active = list(range(n))  # original index of each row still in the batch
        cache = self._seed_cache(hits, cached)
        eos = set(self.eos_ids)
        with torch.inference_mode():
            logits = self.model(
                input_ids=input_ids,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,  # the vocabulary projection of every prompt position would dominate prefill
            ).logits[:, -1, :]
            for _ in range(sampling.max_new_tokens):
                tokens, lps = sample_next(logits, sampling, rng)
                keep: list[int] = []
                for row, (tok, lp) in enumerate(zip(tokens.tolist(), lps.tolist(), strict=True)):
                    i = active[row]
                    out_ids[i].append(int(tok))
                    out_lp[i].append(float(lp))
                    if tok in eos or self._hit_stop(out_ids[i], sampling.stop):
                        finish[i] = "stop"
                    elif len(out_ids[i]) < sampling.max_new_tokens:
                        keep.append(row)
                for row in range(len(active)):
                    if row not in keep:
                        i = active[row]
                        self._remember(list(prompts[i]) + out_ids[i][:-1], cache, mask, row)
                if not keep:
                    break
                if len(keep) < len(active):
                    index = torch.tensor(keep, device=self.device)
                    cache.batch_select_indices(index)
                    tokens, mask, positions = tokens[index], mask[index], positions[index]
                    active = [active[r] for r in keep]
                mask = torch.cat([mask, torch.ones((len(active), 1), dtype=mask.dtype, device=self.device)], dim=1)
                positions = positions[:, -1:] + 1
                logits = self.model(
                    input_ids=tokens.unsqueeze(-1),
                    attention_mask=mask,
                    position_ids=positions,
                    past_key_values=cache,
                    use_cache=True,
                ).logits[:, -1, :]
        return [
            Generation(
                token_ids=out_ids[i],
                logprobs=out_lp[i],
                text=self.tokenizer.decode(out_ids[i], skip_special_tokens=True),
                finish_reason="stop" if finish[i] == "stop" else "length",
            )
            for i in range(n)
        ]

    def _seed_cache(self, hits: list[tuple[int, Any]], cached: int) -> Any:
        """A KV cache holding each row's cached prefix, right-aligned at column ``cached``."""
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        if cached == 0:
            return cache
        template = next(states for c, states in hits if states is not None)
        for layer, (k0, v0) in enumerate(template):
            keys = k0.new_zeros((len(hits), k0.shape[0], cached, k0.shape[-1]))
            values = v0.new_zeros((len(hits), v0.shape[0], cached, v0.shape[-1]))
            for i, (c, states) in enumerate(hits):
                if states is not None:
                    keys[i, :, cached - c :] = states[layer][0]
                    values[i, :, cached - c :] = states[layer][1]
            cache.update(keys, values, layer)
        return cache

    def _remember(self, ids: list[int], cache: Any, mask: Any, row: int) -> None:
        """Store a finished row's KV states (its unmasked columns) under the ids that were fed."""
        if not self.prefix_cache.max_tokens:
            return
        columns = mask[row].nonzero().squeeze(-1)
        if len(columns) != len(ids):  # the layout is off; never store states under the wrong ids
            return
        states = [
            (layer.keys[row][:, columns].clone(), layer.values[row][:, columns].clone()) for layer in cache.layers
        ]
        self.prefix_cache.store(ids, states)

    def _hit_stop(self, ids: list[int], stop: Sequence[str]) -> bool:
        if not stop:
            return False
        # A stop string spans at most a few tokens; decoding a short tail keeps this cheap.
        tail = self.tokenizer.decode(ids[-16:], skip_special_tokens=False)
        return any(s in tail for s in stop)

    def logprobs(self, sequences: Sequence[Sequence[int]], starts: Sequence[int], temperature: float = 0.0) -> list:
        """Logprob of each token of each sequence from position ``start`` on, by one full forward pass.

        This is what a trainer computes; tests compare it with the behaviour logprobs.
        """
        import torch

        results = []
        with torch.inference_mode():
            for seq, start in zip(sequences, starts, strict=True):
                ids = torch.tensor([list(seq)], dtype=torch.long, device=self.device)
                logits = self.model(input_ids=ids).logits[0, :-1].float()
                if temperature > 0:
                    logits = logits / temperature
                lp = torch.log_softmax(logits, dim=-1).gather(-1, ids[0, 1:].unsqueeze(-1)).squeeze(-1)
                results.append(lp[start - 1 :].tolist())
        return results


def _eos_ids(tokenizer: Any, model: Any) -> list[int]:
    """Every id that ends a turn: the tokenizer's eos and the generation config's."""
    ids: list[int] = []
    for source in (getattr(getattr(model, "generation_config", None), "eos_token_id", None), tokenizer.eos_token_id):
        if source is None:
            continue
        ids.extend([source] if isinstance(source, int) else list(source))
    if not ids:
        raise ValueError("the tokenizer has no end-of-sequence token")
    return sorted(set(int(i) for i in ids))
