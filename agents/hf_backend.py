"""HF transformers backend: the plain reference generator, on public transformers API only.

vLLM is the rollout engine (``backend=vllm``, docs/benchmarks.md); this backend is what the others
are checked against, and what tests and small runs use where starting an engine costs more than the
work: a batched decode loop over the model's own forward with a public ``DynamicCache``. The loop is
written out (rather than ``model.generate``) because the runner needs three things per sequence that
``generate`` does not give together: its own stop strings, the behaviour logprob of each sampled token
under the unprocessed distribution (the contract of :mod:`sparring.agents.generation`), and a seeded
sampler per sequence.

Prompts are left-padded to one width and masked; positions are explicit, so padding never shifts
them. A finished sequence leaves the batch (``DynamicCache.batch_select_indices``), so the others
decode without it. Nothing derived from the weights is kept between calls: a weight change
(an optimizer step on a shared model, or :meth:`HFGenerator.update_weights`) reaches the next call.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparring import SparringError
from sparring.agents.generation import Generation, SamplingParams, row_seed

if TYPE_CHECKING:
    from sparring.agents.generation import Generator

__all__ = ["HFGenerator", "sample_next"]


class HFGenerator:
    """A transformers causal LM as a :class:`~sparring.agents.generation.Generator`.

    Example:
        >>> gen = HFGenerator()  # the default SmolLM2 checkpoint, on CPU
        >>> out = gen.generate([gen.tokenizer("Hello")["input_ids"]], SamplingParams(max_new_tokens=8))
        >>> gen.update_weights(trainer_model.state_dict())  # the next turn samples from the new weights
        1
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        device: str = "cpu",
        dtype: str = "float32",
        model_obj: Any = None,
        tokenizer: Any = None,
    ):
        """Load the model.

        Args:
            model: Hub id or local path (None: the default SmolLM2 checkpoint).
            device: Torch device.
            dtype: Torch dtype name of the weights.
            model_obj: An already loaded model to use instead (e.g. the trainer's policy, shared: an
                optimizer step on it is what the next call samples from).
            tokenizer: Its tokenizer, with ``model_obj``.
        """
        from sparring.agents.model import load_model, load_tokenizer, resolve_model

        self.name = str(model or "default")
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(model)
        self.model = model_obj if model_obj is not None else load_model(model, device=device, dtype=dtype)
        if model_obj is None:
            self.name = resolve_model(model)
        self.device = device
        self.eos_set = frozenset(_eos_ids(self.tokenizer, self.model))
        # One decode at a time: the model is shared by the runner, the server and the trainer.
        self._lock = threading.Lock()
        self._version = 0

    @property
    def weights_version(self) -> int:
        """How many times :meth:`update_weights` has run (0 as built); recorded in every episode."""
        return self._version

    def update_weights(self, state_dict: Mapping[str, Any] | None = None) -> int:
        """Sample from new weights from now on; returns the new :attr:`weights_version`.

        Args:
            state_dict: Tensors to copy into the model, by parameter name (the trainer's
                ``model.state_dict()``, or part of it). Each is read once, in the mapping's order, and
                copied before the next is read (a sharded policy's weights, gathered as they are read,
                are never all whole at once). None: the caller already changed the model's parameters
                (an optimizer step on a shared ``model_obj``); nothing here holds a copy of them, so only
                the version moves.

        Raises:
            SparringError: ``state_dict`` names tensors the model does not have, or of other shapes.
        """
        import torch

        with self._lock:
            if state_dict is not None:
                own = self.model.state_dict()
                # Checked before loading: a refused update must leave the weights as they were.
                unknown = sorted(set(state_dict) - set(own))
                if unknown:
                    raise SparringError(
                        f"the state dict names {len(unknown)} tensors that {self.name} does not have "
                        f"({', '.join(unknown[:3])}, ...); pass the policy's own model.state_dict()."
                    )
                if isinstance(state_dict, dict):  # its tensors are at hand (a mapping's may be gathered on reading)
                    for name, value in state_dict.items():
                        self._check_shape(name, value, own[name])
                with torch.no_grad():
                    for name in state_dict:  # a partial dict: only what it names
                        value = state_dict[name]
                        self._check_shape(name, value, own[name])
                        own[name].copy_(value)  # copied before the next is read
                        del value
            self._version += 1
            return self._version

    def _check_shape(self, name: str, value: Any, own: Any) -> None:
        """Refuse a tensor of another shape than the weight it would go into (copying would broadcast it)."""
        if tuple(value.shape) != tuple(own.shape):
            raise SparringError(
                f"the state dict's {name} has shape {tuple(value.shape)}, {self.name}'s {tuple(own.shape)}; pass "
                "the policy's own model.state_dict()."
            )

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Generation]:
        """Continue every prompt (see :class:`~sparring.agents.generation.Generator`).

        Row ``i`` samples with the seed ``(sampling.seed, i)``, so a call is reproducible.

        Raises:
            ValueError: A prompt is empty.
        """
        if not prompts:
            return []
        if any(len(p) == 0 for p in prompts):
            raise ValueError("cannot generate from an empty prompt")
        with self._lock:
            return self._decode(prompts, sampling)

    def _decode(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Generation]:
        """Prefill every prompt in one left-padded pass, then decode one token of every unfinished row per pass."""
        import torch
        from transformers import DynamicCache

        device = self.device
        width = max(len(p) for p in prompts)
        ids = torch.zeros((len(prompts), width), dtype=torch.long, device=device)
        mask = torch.zeros((len(prompts), width), dtype=torch.long, device=device)
        for i, prompt in enumerate(prompts):
            ids[i, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
            mask[i, width - len(prompt) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        rows = [_Row(i, _row_rng(sampling, row_seed(sampling.seed, i), device)) for i in range(len(prompts))]
        cache = DynamicCache(config=self.model.config)
        done: dict[int, Generation] = {}
        with torch.inference_mode():
            while rows:
                logits = self.model(
                    input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                    use_cache=True, logits_to_keep=1,
                ).logits[:, -1]  # fmt: skip
                tokens = self._sample(logits, rows, sampling)
                keep = [k for k, row in enumerate(rows) if not self._finished(row, sampling, done)]
                if len(keep) < len(rows):
                    index = torch.tensor(keep, dtype=torch.long, device=device)
                    cache.batch_select_indices(index)
                    rows = [rows[k] for k in keep]
                    tokens, mask, positions = tokens[index], mask[index], positions[index]
                ids = tokens.unsqueeze(-1)
                mask = torch.cat([mask, mask.new_ones((len(rows), 1))], dim=1)
                positions = positions[:, -1:] + 1
        return [done[i] for i in range(len(prompts))]

    def _sample(self, logits: Any, rows: list[_Row], sampling: SamplingParams) -> Any:
        """Sample each row's next token with its own generator; append it and its logprob to the row."""
        import torch

        if sampling.greedy:
            tokens, lps = sample_next(logits, sampling, None)
        else:
            picked = [sample_next(logits[k : k + 1], sampling, row.rng) for k, row in enumerate(rows)]
            tokens, lps = torch.cat([t for t, _ in picked]), torch.cat([lp for _, lp in picked])
        for row, token, lp in zip(rows, tokens.tolist(), lps.tolist(), strict=True):
            row.ids.append(int(token))
            row.logprobs.append(float(lp))
        return tokens

    def _finished(self, row: _Row, sampling: SamplingParams, done: dict[int, Generation]) -> bool:
        """Whether ``row``'s turn ended with its last token; if so its :class:`Generation` goes into ``done``."""
        stopped = row.ids[-1] in self.eos_set or self._hit_stop(row.ids, sampling.stop)
        if not stopped and len(row.ids) < sampling.max_new_tokens:
            return False
        text = self.tokenizer.decode(row.ids, skip_special_tokens=True)
        done[row.index] = Generation(row.ids, row.logprobs, text, "stop" if stopped else "length")
        return True

    def _hit_stop(self, ids: list[int], stop: Sequence[str]) -> bool:
        """Whether the text of ``ids`` now contains a stop string."""
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


@dataclass
class _Row:
    """One prompt being continued: its place in the call, its sampler, what it has sampled."""

    index: int
    rng: Any
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)


def sample_next(logits: Any, sampling: SamplingParams, rng: Any) -> tuple[Any, Any]:
    """Pick the next token of every row; return (token ids, their behaviour logprobs).

    The logprob is that of the tempered distribution before top-p truncation (the contract of
    :mod:`sparring.agents.generation`); top-p only narrows what is drawn.

    Args:
        logits: ``[batch, vocab]`` logits of the last position.
        sampling: Temperature and top-p.
        rng: A ``torch.Generator`` for sampling (None when greedy).
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


def _row_rng(sampling: SamplingParams, seed: int | None, device: str) -> Any:
    """A row's own sampler (None when greedy), seeded with its row seed, else at random."""
    import torch

    if sampling.greedy:
        return None
    rng = torch.Generator(device=device)
    rng.manual_seed(seed if seed is not None else int(torch.randint(0, 2**62, ()).item()))
    return rng


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


if TYPE_CHECKING:  # mypy holds the backend to the contract the runner relies on
    _contract: type[Generator] = HFGenerator
