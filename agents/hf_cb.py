"""transformers' own continuous batching behind the runner's stream interface, for comparison only.

transformers (5.x) ships a continuous-batching engine: ``model.init_continuous_batching()`` returns a
``ContinuousBatchingManager`` whose background thread schedules prefill and decode tokens of many
requests into packed forward passes over a paged KV cache (``generate_batch`` is the one-shot
wrapper). :class:`CBGenerator` drives that manager turn by turn, with the same interface as
:class:`~sparring.agents.hf_backend.HFGenerator` (``generate``, ``stream()``), so ``sparring bench
rollout --engine compare`` can play the same episodes through both engines (docs/agents.md has
what was measured and why the project keeps its own slot cache).

What the engine gives and what this adapter adds or refuses:

- greedy decoding, per-token logprobs (``return_logprobs``: the log of the softmax of the
  processed scores; for greedy rows that is ``log_softmax`` of the raw logits, the runner's
  behaviour logprob) and end-of-turn ids;
- stop strings are not part of the engine: every request streams its tokens, the adapter checks
  the decoded tail after each one, cuts the ids at the token that completes a stop string and
  cancels the request (a token or two more may already be computed, then discarded);
- no per-request sampler: a sampled row draws from the process-wide torch RNG
  (``torch.multinomial`` over the whole batch, seeded once per manager), so a sampled turn depends
  on which other requests share its passes. :class:`CBGenerator` therefore refuses
  ``temperature > 0`` instead of returning turns that a seed cannot reproduce;
- prefix reuse is by whole pages (``page_size`` tokens): a finished turn's complete pages stay
  cached and the next turn of the episode shares them.

The adapter is not a backend of ``make_generator``; it exists so the comparison can be rerun.
"""

from __future__ import annotations

import itertools
import queue
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sparring import SparringError
from sparring.agents.generation import Generation, SamplingParams

__all__ = ["CBGenerator", "CBStream"]


@dataclass
class _Pending:
    key: Hashable
    sampling: SamplingParams
    checked: int = 0  # tokens already looked at for stop strings
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)


class CBGenerator:
    """Greedy generation through transformers' ``ContinuousBatchingManager`` (module docstring).

    Args:
        model: Hub id or local path (None: the default SmolLM2 checkpoint), unless ``model_obj``.
        model_obj: An already loaded model to share (e.g. an ``HFGenerator``'s, packed linears
            included, so a comparison runs the same kernels); ``tokenizer`` comes with it.
        page_size: Tokens per page of the paged cache (prefix sharing works by whole pages).
        cache_tokens: Size of the paged cache in tokens (live requests and cached pages).
        max_batch_tokens: Most tokens (prefill and decode) in one forward pass.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        device: str = "cpu",
        dtype: str = "float32",
        model_obj: Any = None,
        tokenizer: Any = None,
        page_size: int = 32,
        cache_tokens: int = 16384,
        max_batch_tokens: int = 2048,
    ):
        """Load (or take) the model; the manager starts on first use."""
        from sparring.agents.model import load_model, load_tokenizer, resolve_model

        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(model)
        self.model = model_obj if model_obj is not None else load_model(model, device=device, dtype=dtype)
        self.name = resolve_model(model) if model_obj is None else str(model or "default")
        eos: list[int] = []
        for source in (getattr(self.model.generation_config, "eos_token_id", None), self.tokenizer.eos_token_id):
            if source is not None:
                eos.extend([source] if isinstance(source, int) else list(source))
        self.eos_ids = sorted(set(int(i) for i in eos))
        self.page_size = page_size
        self.cache_tokens = cache_tokens
        self.max_batch_tokens = max_batch_tokens
        self._manager: Any = None
        self._ids = itertools.count()
        self._version = 0

    # -- the manager ------------------------------------------------------------------------

    def manager(self) -> Any:
        """The running ``ContinuousBatchingManager`` (created and started on first call)."""
        if self._manager is None:
            from transformers import GenerationConfig
            from transformers.generation.configuration_utils import ContinuousBatchingConfig

            gen_config = GenerationConfig(
                do_sample=False,
                max_new_tokens=64,
                eos_token_id=self.eos_ids,
                pad_token_id=self.tokenizer.pad_token_id,
            )
            cb_config = ContinuousBatchingConfig(
                page_size=self.page_size,
                num_blocks=max(1, self.cache_tokens // self.page_size),
                max_batch_tokens=self.max_batch_tokens,
                return_logprobs=True,
                allow_block_sharing=True,
                auto_switch_to_flash=False,
            )
            manager = self.model.init_continuous_batching(
                generation_config=gen_config, continuous_batching_config=cb_config
            )
            manager.warmup()  # builds the batch processor and its paged cache now, not in the first timed pass
            # The cache is zero-allocated lazily: touch its pages once (as the slot cache's warm-up does).
            manager.batch_processor.cache.cache_tensor.fill_(0)
            manager.start()
            self._manager = manager
        return self._manager

    def close(self) -> None:
        """Stop the manager's thread and free its cache (the model's attention is restored)."""
        if self._manager is not None:
            self._manager.stop(block=True, timeout=30)
            self._manager.destroy()
            self._manager = None

    def clear_cache(self) -> None:
        """Drop the pages kept for prefix sharing (a cold start); the manager and its memory stay."""
        manager = self._manager
        if manager is not None and manager.is_running() and manager.batch_processor is not None:
            with manager.pause():
                manager.batch_processor.cache.evict_cached_blocks()

    @property
    def weights_version(self) -> int:
        """How many times :meth:`update_weights` has run (0 as built)."""
        return self._version

    def update_weights(self, state_dict: Mapping[str, Any] | None = None) -> int:
        """Load ``state_dict`` (None: the caller changed the weights) and drop the pages of the old ones."""
        self.close()
        if state_dict is not None:
            self.model.load_state_dict(dict(state_dict), strict=False)
        self._version += 1
        return self._version

    # -- the Generator contract -------------------------------------------------------------

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Generation]:
        """Continue every prompt greedily (see :class:`~sparring.agents.generation.Generator`)."""
        stream = self.stream()
        done = dict(stream.add([(i, p, sampling) for i, p in enumerate(prompts)]))
        while stream.active:
            done.update(stream.step())
        return [done[i] for i in range(len(prompts))]

    def stream(self) -> CBStream:
        """A stream with :class:`~sparring.agents.hf_backend.HFStream`'s interface (``add``, ``step``, ``active``)."""
        return CBStream(self)

    def hit_stop(self, ids: list[int], stop: Sequence[str]) -> bool:
        """Whether the text of ``ids`` now contains a stop string (the HF backend's rule)."""
        if not stop:
            return False
        tail = self.tokenizer.decode(ids[-16:], skip_special_tokens=False)
        return any(s in tail for s in stop)


class CBStream:
    """Requests in flight in the manager; ``step`` waits for the next tokens and returns finished turns."""

    def __init__(self, generator: CBGenerator):
        """An empty stream over ``generator``'s manager."""
        self.gen = generator
        self.pending: dict[str, _Pending] = {}

    @property
    def active(self) -> int:
        """Requests still generating."""
        return len(self.pending)

    def add(
        self, requests: Sequence[tuple[Hashable, Sequence[int], SamplingParams]]
    ) -> list[tuple[Hashable, Generation]]:
        """Submit ``(key, prompt ids, sampling)`` requests; return the turns that finished meanwhile."""
        manager = self.gen.manager()
        for key, prompt, sampling in requests:
            if not sampling.greedy:
                raise SparringError(
                    "transformers' continuous batching samples every row from one process-wide RNG, so a "
                    "sampled turn cannot be reproduced from its seed; CBGenerator plays greedy turns only."
                )
            if len(prompt) == 0:
                raise ValueError("cannot generate from an empty prompt")
            request_id = f"sparring_{next(self.gen._ids)}"
            self.pending[request_id] = _Pending(key, sampling)
            manager.add_request(
                list(prompt),
                request_id=request_id,
                max_new_tokens=sampling.max_new_tokens,
                streaming=True,
                eos_token_id=self.gen.eos_ids,
            )
        return self._drain(block=False)

    def step(self) -> list[tuple[Hashable, Generation]]:
        """Wait for the next token of any request, take every output already there; return finished turns."""
        if not self.pending:
            return []
        return self._drain(block=True)

    def _drain(self, block: bool) -> list[tuple[Hashable, Generation]]:
        manager = self.gen.manager()
        outputs = manager.output_router.output_queue
        finished: list[tuple[Hashable, Generation]] = []
        first = True
        while True:
            try:
                if first and block:
                    out = outputs.get(timeout=60)
                else:
                    out = outputs.get_nowait()
            except queue.Empty:
                if first and block:
                    raise SparringError(
                        "transformers' continuous batching produced no token in 60 s; its thread is "
                        f"{'alive' if manager.is_running() else 'dead'}."
                    ) from None
                return finished
            first = False
            done = self._take(out)
            if done is not None:
                finished.append(done)

    def _take(self, out: Any) -> tuple[Hashable, Generation] | None:
        """Fold one streamed output into its request; a finished turn comes back as ``(key, Generation)``."""
        state = self.pending.get(out.request_id)
        if state is None:  # a request already cut at a stop string (or not ours)
            return None
        if out.error:
            del self.pending[out.request_id]
            raise SparringError(f"transformers' continuous batching failed a request: {out.error}")
        tokens = list(out.generated_tokens)
        logprobs = list(out.logprobs)
        stop = state.sampling.stop
        eos = set(self.gen.eos_ids)
        reason: Literal["stop", "length"] | None = None
        for n in range(state.checked + 1, len(tokens) + 1):
            if tokens[n - 1] in eos or self.gen.hit_stop(tokens[:n], stop):
                tokens, logprobs, reason = tokens[:n], logprobs[:n], "stop"
                break
        state.checked = len(tokens)
        if reason is None and (out.is_finished() or len(tokens) >= state.sampling.max_new_tokens):
            reason = "length"
        if reason is None:
            return None
        del self.pending[out.request_id]
        if not out.is_finished():
            self.gen.manager().cancel_request(out.request_id)
        text = self.gen.tokenizer.decode(tokens, skip_special_tokens=True)
        return state.key, Generation(token_ids=tokens, logprobs=logprobs, text=text, finish_reason=reason)
