"""Build a generator by backend name (``--backend``).

This is the only module that knows every backend. It is kept apart from
:mod:`sparring.agents.generation` because each backend imports the contract types from there; a
factory in that module would make the contract and its implementations import each other.
Backends are imported only when chosen: torch and vLLM stay unloaded until a model is built.

Example:
    >>> from sparring.agents.factory import make_generator
    >>> generator = make_generator("http", base_url="http://127.0.0.1:8000/v1")  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from sparring import SparringError
from sparring.agents.generation import ChatGenerator, Generator

__all__ = ["BACKENDS", "make_generator"]

#: Backends by name, for ``--backend``.
BACKENDS = ("vllm", "hf", "http")


def make_generator(backend: str = "vllm", model: str | None = None, **options: Any) -> Generator | ChatGenerator:
    """Build a generator.

    Args:
        backend: ``"vllm"`` (vLLM in this process: the rollout engine), ``"hf"`` (the plain transformers
            reference) or ``"http"`` (an OpenAI-compatible server).
        model: Hub id or local path (None: the default SmolLM2 checkpoint). For ``http``, the tokenizer
            to use with the server (the server's model by default).
        **options: Backend options (``device``, ``base_url``, ``api_key``, ``chat_only``, ...).

    Raises:
        SparringError: ``backend`` is not one of :data:`BACKENDS`.
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
