"""HF transformers backend: batched decoding with per-sequence stops, logprobs and seeds.

The decode loop is written out (rather than ``model.generate``) because the runner needs three
things per sequence that ``generate`` does not give together: its own stop strings, the behaviour
logprob of each sampled token under the unprocessed distribution, and a seeded sampler per
sequence. The loop itself is :class:`~sparring.agents.hf_batch.DecodeBatch`: finished sequences
leave the batch and new ones join it (:meth:`HFGenerator.stream`), so one long answer never makes
the others wait.

Two things here are copies of the weights: the prefix cache's KV states and, on CPU, the packed
linear layers. :meth:`HFGenerator.update_weights` is the one entry point that changes the weights
and rebuilds both, so a trainer cannot refresh one and forget the other.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from sparring import SparringError
from sparring.agents.generation import Generation, SamplingParams, StreamRequest, row_seed
from sparring.agents.prefix_cache import MIN_SHARED, PrefixCache

if TYPE_CHECKING:
    from sparring.agents.generation import StreamingGenerator
    from sparring.agents.hf_batch import DecodeBatch

__all__ = ["HFGenerator", "HFStream"]


class HFGenerator:
    """A transformers causal LM as a :class:`~sparring.agents.generation.StreamingGenerator`.

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
        prefix_cache_tokens: int = 16384,
        pack_linears: bool | None = None,
    ):
        """Load the model.

        Args:
            model: Hub id or local path (None: the default SmolLM2 checkpoint).
            device: Torch device.
            dtype: Torch dtype name of the weights.
            model_obj: An already loaded model to use instead (e.g. the trainer's policy).
            tokenizer: Its tokenizer, with ``model_obj``.
            prefix_cache_tokens: Tokens of KV states kept between calls so an episode's next turn prefills
                only its new tokens (0: off). :meth:`update_weights` drops them with the old weights.
            pack_linears: Run the linear layers through oneDNN with prepacked weights
                (:mod:`sparring.agents.cpu_linear`; about twice as fast on CPU, and a batch of rows
                costs little more than one). Inference only (the packed layers take no part in
                autograd), so the default (None) packs only a model this generator loaded itself on
                CPU, never a ``model_obj`` that a trainer also runs backward through.
        """
        from sparring.agents.model import load_model, load_tokenizer, resolve_model

        self.name = str(model or "default")
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(model)
        self.model = model_obj if model_obj is not None else load_model(model, device=device, dtype=dtype)
        if model_obj is None:
            self.name = resolve_model(model)
        self.device = device
        _require_full_attention(self.model, self.name)
        self.eos_ids = _eos_ids(self.tokenizer, self.model)
        self.eos_set = frozenset(self.eos_ids)
        # One decode at a time: the model is shared by the runner, the server and the trainer.
        self._lock = threading.Lock()
        self.prefix_cache = PrefixCache(prefix_cache_tokens)
        self._version = 0
        # Open streams, so a weight update can refuse while rows hold KV states of the old weights.
        self._streams: weakref.WeakSet[HFStream] = weakref.WeakSet()
        self._pack = pack_linears if pack_linears is not None else (model_obj is None and str(device) == "cpu")
        self.packed_linears = 0
        self._repack()

    @property
    def weights_version(self) -> int:
        """How many times :meth:`update_weights` has run (0 as built); recorded in every episode."""
        return self._version

    def update_weights(self, state_dict: Mapping[str, Any] | None = None) -> int:
        """Sample from new weights from now on: load them, drop cached KV states, repack the linears.

        Both caches are copies of the weights, so this is the only place that changes them: the
        prefix cache's states were computed by the old weights, and the packed linear layers hold
        their own reordered copy of each weight, which in-place changes to the parameters never reach.

        Args:
            state_dict: Tensors to copy into the model, by parameter name (the trainer's
                ``model.state_dict()``, or part of it). None: the caller already changed the
                model's parameters (an optimizer step or an in-place edit on a shared ``model_obj``).

        Returns:
            The new :attr:`weights_version`.

        Raises:
            SparringError: ``state_dict`` names tensors the model does not have.
            RuntimeError: A stream still has rows decoding; their KV states belong to the old weights.
        """
        with self._lock:
            busy = sum(stream.active for stream in self._streams)
            if busy:
                raise RuntimeError(
                    f"cannot update the weights while {busy} rows of a stream are decoding (their KV states come "
                    "from the old weights); update between runner runs, once every stream has finished."
                )
            if state_dict is not None:
                # Checked before loading: a refused update must leave the weights as they were.
                unknown = sorted(set(state_dict) - set(self.model.state_dict()))
                if unknown:
                    raise SparringError(
                        f"the state dict names {len(unknown)} tensors that {self.name} does not have "
                        f"({', '.join(unknown[:3])}, ...); pass the policy's own model.state_dict()."
                    )
            try:
                if state_dict is not None:  # a partial dict updates only the tensors it names
                    self.model.load_state_dict(dict(state_dict), strict=False)
            finally:  # a load that failed halfway (a shape mismatch) has still changed some weights
                self.prefix_cache.clear()
                self._repack()
                self._version += 1
            return self._version

    def _repack(self) -> None:
        """Pack the linear layers again from the current parameters (when this generator packs)."""
        if self._pack:
            from sparring.agents.cpu_linear import pack_linears

            self.packed_linears = pack_linears(self.model)

    def clear_cache(self) -> None:
        """Drop the cached KV states (a cold start, e.g. for a benchmark); the weights stay as they are.

        After changing the weights call :meth:`update_weights` instead: it also repacks the linears.
        """
        with self._lock:
            self.prefix_cache.clear()

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Generation]:
        """Continue every prompt (see :class:`~sparring.agents.generation.Generator`).

        Row ``i`` samples with the seed ``(sampling.seed, i)``, so a call is reproducible.
        """
        if not prompts:
            return []
        with self._lock:
            return self._generate(prompts, sampling)

    def stream(self) -> HFStream:
        """A continuous batch for a caller that adds prompts while others are decoding (the runner)."""
        stream = HFStream(self)
        self._streams.add(stream)
        return stream

    def _generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Generation]:
        from sparring.agents.hf_batch import DecodeBatch, Request

        requests = [Request(i, p, replace(sampling, seed=row_seed(sampling.seed, i))) for i, p in enumerate(prompts)]
        batch = DecodeBatch(self)
        results = dict(self._admit(batch, requests))
        while batch.active:
            results.update(batch.step())
        return [results[i] for i in range(len(prompts))]

    def _admit(self, batch: DecodeBatch, requests: Sequence[Any]) -> list[tuple[Hashable, Generation]]:
        """Prefill what the requests share once, then add them to ``batch``."""
        self._prefill_shared_prefix([r.prompt for r in requests])
        return batch.add(requests)

    def _prefill_shared_prefix(self, prompts: Sequence[Sequence[int]]) -> None:
        """Prefill once, into the prefix cache, the part that every prompt of a batch shares.

        Episodes of one env start with the same system prompt and instructions; without this a
        batch of them would prefill it once per row.
        """
        if len(prompts) < 2 or not self.prefix_cache.max_tokens:
            return
        first = np.asarray(prompts[0], dtype=np.int64)
        shared = min(len(p) for p in prompts) - 1  # every row keeps a token to feed
        for p in prompts[1:]:
            differ = np.flatnonzero(np.asarray(p[:shared], dtype=np.int64) != first[:shared])
            shared = int(differ[0]) if len(differ) else shared
        if shared - self.prefix_cache.lookup(prompts[0][:shared])[0] < MIN_SHARED:
            return  # nothing worth it beyond what is cached already
        # A one-token continuation of the shared part stores its states under exactly those ids.
        self._generate([prompts[0][:shared]], SamplingParams(temperature=0.0, max_new_tokens=1))

    def remember(self, ids: list[int], cache: Any, mask: Any, row: int) -> None:
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

    def hit_stop(self, ids: list[int], stop: Sequence[str]) -> bool:
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


class HFStream:
    """A continuous batch over an :class:`HFGenerator` (see :mod:`sparring.agents.hf_batch`).

    The :class:`~sparring.agents.generation.GenerationStream` of the HF backend: ``add`` prefills
    prompts and lets them join; ``step`` decodes one token for every row. Both return the
    ``(key, Generation)`` of the rows that finished. Each request's sampling carries its own seed.
    The generator's lock is held during each call, not between calls.

    Example:
        >>> stream = HFGenerator().stream()
        >>> done = stream.add([("a", ids, SamplingParams(max_new_tokens=8))])
        >>> while stream.active:
        ...     done += stream.step()
    """

    def __init__(self, generator: HFGenerator):
        """Start an empty batch."""
        from sparring.agents.hf_batch import DecodeBatch

        self.generator = generator
        self._batch = DecodeBatch(generator)

    @property
    def active(self) -> int:
        """Rows still decoding."""
        return self._batch.active

    def add(self, requests: Sequence[StreamRequest]) -> list[tuple[Hashable, Generation]]:
        """Prefill ``(key, prompt ids, sampling)`` requests and let them join the batch."""
        from sparring.agents.hf_batch import Request

        with self.generator._lock:
            return self.generator._admit(self._batch, [Request(k, p, s) for k, p, s in requests])

    def step(self) -> list[tuple[Hashable, Generation]]:
        """Decode one token of every row."""
        with self.generator._lock:
            return self._batch.step()


def _require_full_attention(model: Any, name: str) -> None:
    """Refuse, in one sentence, a model whose KV cache has layers the continuous batch cannot hold."""
    from sparring.agents.kv_cache import SlotLayer, slot_cache

    kinds = {type(layer).__name__ for layer in slot_cache(model.config).layers if not isinstance(layer, SlotLayer)}
    if kinds:
        raise SparringError(
            f"model {name} has cache layers the HF backend cannot batch ({', '.join(sorted(kinds))}: sliding-window "
            "or linear attention); serve it with vLLM (`vllm serve`) and use the HTTP backend instead."
        )


if TYPE_CHECKING:  # mypy holds the backend to the contract the runner relies on
    _contract: type[StreamingGenerator] = HFGenerator
