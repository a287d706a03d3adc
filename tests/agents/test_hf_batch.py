"""The HF backend's decoding machinery on the real SmolLM2: the growing KV cache, prepacked
linear layers, and the continuous batch whose rows join and leave while others decode."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from sparring.agents import EpisodeRunner, EpisodeSpec, RunnerConfig, SamplingParams
from sparring.agents.model import default_model_present
from tests.agents.conftest import ShownSumEnv
from tests.conftest import require

pytestmark = [pytest.mark.model, pytest.mark.slow]


@pytest.fixture(scope="module")
def model() -> Any:
    """A second, unpacked copy of the default model (the generator fixture's is packed)."""
    require(default_model_present(), "the default model (SmolLM2-135M-Instruct)")
    from sparring.agents.model import load_model

    return load_model(None)


def _prompt(tokenizer: Any, question: str) -> list[int]:
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True
    )
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _decode_logits(model: Any, cache: Any, steps: int, select_after: int | None = None) -> list[Any]:
    """Prefill two rows, decode ``steps`` greedy steps; optionally keep only row 1 after some steps."""
    import torch

    ids = torch.tensor([[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12]]) + 500
    mask = torch.ones_like(ids)
    out = []
    with torch.inference_mode():
        logits = model(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True).logits[:, -1]
        for step in range(steps):
            if step == select_after:
                cache.batch_select_indices(torch.tensor([1]))
                logits, mask = logits[1:], mask[1:]
            token = logits.argmax(-1, keepdim=True)
            mask = torch.cat([mask, torch.ones_like(token)], dim=1)
            logits = model(input_ids=token, attention_mask=mask, past_key_values=cache, use_cache=True).logits[:, -1]
            out.append(logits.clone())
    return out


def test_growing_cache_gives_the_dynamic_caches_logits(model: Any) -> None:
    import torch
    from transformers import DynamicCache

    from sparring.agents.kv_cache import GrowingLayer, growing_cache

    cache = growing_cache(model.config)
    assert all(isinstance(layer, GrowingLayer) for layer in cache.layers)
    for select_after in (None, 3):  # a batch select in the middle makes the layer reallocate
        grown = _decode_logits(model, growing_cache(model.config), 6, select_after)
        reference = _decode_logits(model, DynamicCache(config=model.config), 6, select_after)
        for a, b in zip(grown, reference, strict=True):
            assert torch.allclose(a, b, atol=1e-4), (a - b).abs().max()


def test_packed_linears_match_and_unpack(model: Any) -> None:
    import torch

    from sparring.agents.cpu_linear import pack_linears, unpack_linears

    ids = torch.tensor([[500 + i for i in range(40)]])
    with torch.inference_mode():
        plain = model(input_ids=ids).logits
        packed_count = pack_linears(model)
        packed = model(input_ids=ids).logits
        unpack_linears(model)
        again = model(input_ids=ids).logits
    assert packed_count == 7 * model.config.num_hidden_layers + 1  # q, k, v, o, gate, up, down; lm_head
    assert (packed - plain).abs().max() < 1e-3
    assert torch.equal(again, plain)  # the modules' own forward is back


def test_rows_joining_and_leaving_mid_decode_match_alone(hf_generator: Any) -> None:
    """A row that joins a running batch, or decodes beside others that leave, samples what it would alone."""
    from sparring.agents.hf_batch import TRIM_COLUMNS

    tok = hf_generator.tokenizer
    long_prompt = _prompt(tok, "Please read this carefully. " * 30 + "What is two plus two?")
    short_a = _prompt(tok, "Name a colour.")
    short_b = _prompt(tok, "What is the capital of France?")
    greedy = SamplingParams(temperature=0.0, max_new_tokens=10)
    quick = SamplingParams(temperature=0.0, max_new_tokens=2)

    hf_generator.clear_cache()
    alone = {
        "long": hf_generator.generate([long_prompt], quick)[0],
        "a": hf_generator.generate([short_a], greedy)[0],
        "b": hf_generator.generate([short_b], greedy)[0],
    }
    hf_generator.clear_cache()
    stream = hf_generator.stream()
    done = dict(stream.add([("a", short_a, greedy), ("long", long_prompt, quick)]))
    widest = stream._batch.mask.shape[1]
    done.update(stream.step())  # "long" finishes here and leaves its padding behind
    assert "long" in done and stream.active == 1
    assert widest - stream._batch.mask.shape[1] >= TRIM_COLUMNS  # columns nobody uses were cut
    done.update(stream.add([("b", short_b, greedy)]))  # joins while "a" is mid-answer
    assert stream.active == 2
    while stream.active:
        done.update(stream.step())
    for key, expected in alone.items():
        got = done[key]
        assert got.token_ids == expected.token_ids, key
        assert got.finish_reason == expected.finish_reason
        assert max(abs(x - y) for x, y in zip(got.logprobs, expected.logprobs, strict=True)) < 1e-3


@pytest.mark.timeout(900)
def test_sampled_episodes_do_not_depend_on_the_batch(hf_generator: Any) -> None:
    """Each episode's turn samples with its own seed: 8 at once equals one by one, sampling included."""
    sampling = SamplingParams(temperature=1.0, max_new_tokens=10, seed=7)
    specs = [EpisodeSpec(lambda: ShownSumEnv(max_turns=2), seed=s) for s in range(8)]
    together = EpisodeRunner(hf_generator, RunnerConfig(concurrency=8, sampling=sampling, progress=False)).run(specs)
    alone = EpisodeRunner(hf_generator, RunnerConfig(concurrency=1, sampling=sampling, progress=False)).run(specs)
    assert [ep.token_ids for ep in together] == [ep.token_ids for ep in alone]
    again = EpisodeRunner(hf_generator, RunnerConfig(concurrency=8, sampling=sampling, progress=False)).run(specs)
    assert [ep.token_ids for ep in again] == [ep.token_ids for ep in together]
    other = replace(sampling, seed=8)
    changed = EpisodeRunner(hf_generator, RunnerConfig(concurrency=8, sampling=other, progress=False)).run(specs)
    assert [ep.token_ids for ep in changed] != [ep.token_ids for ep in together]
