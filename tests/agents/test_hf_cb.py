"""transformers' continuous batching behind the runner's stream (``agents/hf_cb.py``), the engine
``sparring bench rollout --engine compare`` measures against the slot cache."""

from __future__ import annotations

from typing import Any

import pytest

from sparring import SparringError
from sparring.agents import SamplingParams


def _prompt(tokenizer: Any, question: str) -> list[int]:
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True
    )
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_cb_greedy_turns_match_the_slot_cache_and_stop_strings_cut_the_ids(hf_generator: Any) -> None:
    """Same model object, greedy: the same ids and logprobs as the HF backend, cut at a stop string the
    same way; a sampled turn is refused (the engine has no per-request seed)."""
    from sparring.agents.hf_cb import CBGenerator

    tok = hf_generator.tokenizer
    prompts = [_prompt(tok, q) for q in ("What is the capital of France?", "Count from one to ten.")]
    cb = CBGenerator(model_obj=hf_generator.model, tokenizer=tok, cache_tokens=2048, max_batch_tokens=512)
    try:
        for sampling in (
            SamplingParams(temperature=0.0, max_new_tokens=12),
            SamplingParams(temperature=0.0, max_new_tokens=24, stop=("3.",)),
        ):
            hf_generator.clear_cache()
            ours = hf_generator.generate(prompts, sampling)
            theirs = cb.generate(prompts, sampling)
            for a, b in zip(ours, theirs, strict=True):
                assert b.token_ids == a.token_ids and b.finish_reason == a.finish_reason and b.text == a.text
                assert b.logprobs == pytest.approx(a.logprobs, abs=1e-3)
        assert theirs[1].text.endswith("3.") and theirs[1].finish_reason == "stop"
        with pytest.raises(SparringError, match="seed"):
            cb.generate(prompts[:1], SamplingParams(temperature=0.7, max_new_tokens=4, seed=1))
    finally:
        cb.close()
    assert cb.weights_version == 0 and cb.update_weights() == 1


def test_an_unknown_bench_engine_is_refused_in_one_sentence_before_loading_anything() -> None:
    from sparring.agents.bench import bench_rollout

    with pytest.raises(SparringError, match="unknown engine 'vllm'; use one of: slot, transformers-cb, compare"):
        bench_rollout(engine="vllm")
