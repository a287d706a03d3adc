"""The generation contract: token-id prompts in, sampled token ids and their logprobs out.

Every backend (HF transformers, vLLM in-process, an OpenAI-compatible server over HTTP) is a
:class:`Generator`. The runner keeps each episode's token buffer itself and asks the generator
only to continue it, so what the trainer sees is exactly what was sampled.

A behaviour logprob is ``log_softmax(logits / temperature)`` of the sampled token (raw logits when
``temperature == 0``), before top-p truncation: the same quantity the trainer recomputes.

A chat-only hosted API cannot take token ids; it is a :class:`ChatGenerator`, which plays episodes
for evaluation from messages and text. :func:`require_token_exact` refuses it for training.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from sparring import SparringError

__all__ = [
    "BACKENDS",
    "ChatGenerator",
    "Generation",
    "Generator",
    "SamplingParams",
    "make_generator",
    "require_token_exact",
    "row_seed",
]

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one turn."""

    temperature: float = 1.0
    """Softmax temperature; 0 means greedy."""
    top_p: float = 1.0
    """Nucleus sampling mass (1.0 keeps the whole distribution)."""
    max_new_tokens: int = 128
    """Upper bound on generated tokens per turn."""
    stop: tuple[str, ...] = ()
    """Generation of a sequence ends once its text contains one of these (the stop string is kept)."""
    seed: int | None = None
    """Seed of the sampler for this call (None: not reproducible)."""

    @property
    def greedy(self) -> bool:
        """Whether sampling is deterministic argmax."""
        return self.temperature <= 0.0


def row_seed(seed: int | None, row: int) -> int | None:
    """Row ``row``'s own seed, derived from a call's ``seed`` (None stays None: not reproducible).

    Every backend seeds each prompt of a batch with this, so two identical prompts in one call
    sample two different continuations, and a call with the same seed samples the same ones.
    """
    return None if seed is None else (seed * 1_000_003 + row) % 2**62


@dataclass
class Generation:
    """What a generator produced for one prompt."""

    token_ids: list[int]
    """The sampled ids, in order, including an end-of-turn token if one was sampled."""
    logprobs: list[float]
    """Behaviour logprob of each sampled id (same length as ``token_ids``)."""
    text: str
    """The decoded text, without special tokens."""
    finish_reason: FinishReason = "length"
    """``"stop"``: an end-of-turn token or a stop string ended it; ``"length"``: ``max_new_tokens``."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Backend-specific details (e.g. the server's request id)."""


@runtime_checkable
class Generator(Protocol):
    """A policy that continues token-id prompts (batched)."""

    tokenizer: Any
    """The HF tokenizer of the policy (chat template, decoding)."""
    name: str
    """The model name or path, for records."""

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Generation]:
        """Continue every prompt; one :class:`Generation` per prompt, in order."""
        ...


@runtime_checkable
class ChatGenerator(Protocol):
    """A policy reachable only through chat messages (a hosted API): text in, text out."""

    name: str

    def chat(
        self, conversations: Sequence[list[dict[str, Any]]], sampling: SamplingParams, tools: Any = None
    ) -> list[Generation]:
        """Answer every conversation; token fields of the results are empty."""
        ...


def require_token_exact(generator: Any, purpose: str = "training") -> Generator:
    """Return ``generator`` if it yields token ids and logprobs, else raise a clear error.

    Raises:
        SparringError: The generator is chat-only (a hosted API).
    """
    if isinstance(generator, Generator):
        return generator
    raise SparringError(
        f"{purpose} needs the sampled token ids and logprobs, but {getattr(generator, 'name', generator)!r} is a "
        "chat-only endpoint; use --backend hf or vllm, or an OpenAI-compatible server whose completions API takes "
        "token-id prompts (vllm serve, sparring serve-policy)."
    )


#: Backends by name, for ``--backend``.
BACKENDS = ("hf", "http", "vllm")


def make_generator(backend: str = "hf", model: str | None = None, **options: Any) -> Generator | ChatGenerator:
    """Build a generator.

    Args:
        backend: ``"hf"`` (transformers, CPU default), ``"http"`` (OpenAI-compatible server) or ``"vllm"``.
        model: Hub id or local path (None: the default SmolLM2 checkpoint). For ``http``, the tokenizer
            to use with the server (the server's model by default).
        **options: Backend options (``device``, ``base_url``, ``api_key``, ``chat_only``, ...).
    """
    if backend == "hf":
        from sparring.agents.hf_backend import HFGenerator

        return HFGenerator(model, **options)
    if backend == "http":
        from sparring.agents.http_backend import connect

        return connect(model=model, **options)
    if backend == "vllm":
        from sparring.agents.vllm_backend import VLLMGenerator

        return VLLMGenerator(model, **options)
    raise SparringError(f"unknown generation backend {backend!r}; use one of: {', '.join(BACKENDS)}.")
