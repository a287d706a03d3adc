"""The generation contract: token-id prompts in, sampled token ids and their logprobs out.

Every backend (HF transformers, vLLM in-process, an OpenAI-compatible server over HTTP) is a
:class:`Generator`. The runner keeps each episode's token buffer itself and asks the generator
only to continue it, so what the trainer sees is exactly what was sampled.

A behaviour logprob is ``log_softmax(logits / temperature)`` of the sampled token (raw logits when
``temperature == 0``), before top-p truncation: the same quantity the trainer recomputes. A
backend that cannot return exactly this for a request (vLLM's logprobs with ``top_p < 1`` are those
after truncation) refuses the request with a :class:`~sparring.SparringError`; it never hands on
another quantity (raw or truncated logprobs) in its place.

A trainer that changes the policy's weights says so through :meth:`Generator.update_weights`, which
bumps :attr:`Generator.weights_version` (recorded in every episode). Backends are built by name
with :func:`sparring.agents.factory.make_generator`, which lives apart so this contract imports no
backend.

A chat-only hosted API cannot take token ids; it is a :class:`ChatGenerator`, which plays episodes
for evaluation from messages and text. :func:`require_token_exact` refuses it for training.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from sparring import SparringError

__all__ = [
    "ChatGenerator",
    "Generation",
    "Generator",
    "SamplingParams",
    "require_token_exact",
    "row_seed",
    "weights_to_push",
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


def weights_to_push(generator: Any, state_dict: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """What a backend holding its own copy of the weights pushes on ``update_weights(state_dict)``:
    ``state_dict``, or (None) the current parameters of the trainer's model it mirrors (``generator.policy``).

    Raises:
        SparringError: No state dict was given and ``generator`` mirrors no model.
    """
    if state_dict is not None:
        return state_dict
    if generator.policy is None:
        name = type(generator).__name__
        raise SparringError(
            f"{name}.update_weights() without a state dict needs the trainer's model ({name}(policy=model)); "
            "pass the new weights as a state dict instead."
        )
    return dict(generator.policy.named_parameters())


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
    """Backend-specific details (e.g. the server's request id). ``"error"``: the backend could not
    generate for this prompt alone (a server refused it, say for its length); the runner ends that
    episode with an agent error and the others go on."""


@runtime_checkable
class Generator(Protocol):
    """A policy that continues token-id prompts (batched), and knows which weights it samples from."""

    tokenizer: Any
    """The HF tokenizer of the policy (chat template, decoding)."""
    name: str
    """The model name or path, for records."""

    @property
    def weights_version(self) -> int:
        """How many weight updates (:meth:`update_weights`) the policy has seen; 0 as built.

        The runner records it in every episode, so a trainer can tell how stale an episode is.
        """
        ...

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Generation]:
        """Continue every prompt; one :class:`Generation` per prompt, in order."""
        ...

    def update_weights(self, state_dict: Mapping[str, Any] | None = None) -> int:
        """The one way to tell a policy its weights changed; returns the new :attr:`weights_version`.

        Everything a backend derived from the old weights (cached KV states, packed copies) is
        dropped or rebuilt here, so no caller has to know what a backend caches.

        Args:
            state_dict: Tensors to load into the policy's weights, by parameter name (a partial dict
                updates only what it names; vLLM's, only whole layers, and after its sleep every weight).
                None: the caller changed the weights already (an optimizer step on a model it shares
                with the generator, a push to a server).

        Raises:
            NotImplementedError: The backend cannot take weights this way (the HTTP backend cannot
                send a state dict to its server; it still records a version bump for None).
        """
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
