"""The HF backend's decoding machinery on the real SmolLM2: the slot KV cache, prepacked
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


def test_slot_cache_gives_the_dynamic_caches_logits(model: Any) -> None:
    import torch
    from transformers import DynamicCache

    from sparring.agents.kv_cache import SlotLayer, slot_cache

    cache = slot_cache(model.config)
    assert all(isinstance(layer, SlotLayer) for layer in cache.layers)
    for select_after in (None, 3):  # a batch select in the middle re-places the rows
        slotted = _decode_logits(model, slot_cache(model.config), 6, select_after)
        reference = _decode_logits(model, DynamicCache(config=model.config), 6, select_after)
        for a, b in zip(slotted, reference, strict=True):
            assert torch.allclose(a, b, atol=1e-4), (a - b).abs().max()


def test_slot_layer_places_removes_and_trims_rows() -> None:
    """Rows keep their own states through joins (right-aligned), swap-removal and trimming."""
    import torch

    from sparring.agents.kv_cache import SlotLayer

    layer = SlotLayer()
    a = torch.arange(1 * 2 * 3 * 4, dtype=torch.float32).reshape(1, 2, 3, 4) + 1
    b = -torch.arange(1 * 2 * 5 * 4, dtype=torch.float32).reshape(1, 2, 5, 4) - 1
    layer.place(a, a * 10)
    layer.place(b, b * 10)  # longer than the window: it widens leftwards, row a is left-padded
    assert layer.keys.shape == (2, 2, 5, 4) and layer.get_seq_length() == 5
    assert torch.equal(layer.keys[0, :, 2:], a[0]) and torch.equal(layer.keys[1], b[0])
    assert torch.equal(layer.values[1], b[0] * 10)
    step = torch.full((2, 2, 1, 4), 7.0)
    keys, _ = layer.update(step, step)
    assert keys.shape == (2, 2, 6, 4) and torch.equal(keys[:, :, -1:], step)
    c = torch.full((1, 2, 2, 4), 3.0)
    layer.place(c, c)
    layer.remove(0)  # row c moves into row a's slot
    assert layer.keys.shape == (2, 2, 6, 4)
    assert torch.equal(layer.keys[0, :, -2:], c[0]) and torch.equal(layer.keys[1, :, :5], b[0])
    layer.trim(3)
    assert torch.equal(layer.keys[1, :, :2], b[0, :, 3:]) and layer.get_seq_length() == 3
    for _ in range(300):  # past the spare columns: the buffers grow and keep every row's states
        layer.update(torch.ones(2, 2, 1, 4), torch.ones(2, 2, 1, 4))
    assert layer.get_seq_length() == 303 and torch.equal(layer.keys[0, :, 1:3], c[0])


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


def test_slot_layer_keeps_its_buffers_in_step_with_transformers_operations() -> None:
    """Row selection, beam reordering, repetition and crop act on the states the next update extends."""
    import torch

    from sparring.agents.kv_cache import SlotLayer

    layer = SlotLayer()
    layer.batch_select_indices(torch.tensor([0]))  # an empty layer: nothing to select, no error
    states = torch.arange(3 * 1 * 4 * 2, dtype=torch.float32).reshape(3, 1, 4, 2)
    layer.update(states, -states)
    layer.reorder_cache(torch.tensor([2, 0, 1]))
    assert torch.equal(layer.keys, states[[2, 0, 1]]) and torch.equal(layer.values, -states[[2, 0, 1]])
    layer.batch_select_indices(torch.tensor([1]))
    layer.batch_repeat_interleave(2)
    assert torch.equal(layer.keys, states[[0, 0]])
    layer.crop(-1)
    step = torch.full((2, 1, 1, 2), 9.0)
    keys, values = layer.update(step, step)
    assert torch.equal(keys, torch.cat([states[[0, 0], :, :3], step], dim=2)) and torch.equal(values[:, :, -1:], step)
    with pytest.raises(ValueError, match="negative"):
        layer.crop(2)


def test_a_model_with_sliding_window_layers_is_refused_in_one_sentence() -> None:
    from types import SimpleNamespace

    from transformers import MistralConfig

    from sparring import SparringError
    from sparring.agents.hf_backend import _require_full_attention

    with pytest.raises(SparringError, match=r"DynamicSlidingWindowLayer: sliding-window .* use the HTTP backend"):
        _require_full_attention(SimpleNamespace(config=MistralConfig(num_hidden_layers=2, sliding_window=8)), "m")


def test_packed_pass_of_joining_and_decoding_rows_matches_the_plain_forward(hf_generator: Any) -> None:
    """Rows that join (one from a cached prefix) in the same pass as others decode get the logprobs
    that one plain forward of their whole sequence gives."""
    tok = hf_generator.tokenizer
    prompts = {k: _prompt(tok, q) for k, q in (("a", "Name a colour."), ("b", "Count to five."))}
    prompts["c"] = _prompt(tok, "Describe the sea in one sentence. " * 6)
    prompts["d"] = _prompt(tok, "What is the capital of Italy?")
    greedy = SamplingParams(temperature=0.0, max_new_tokens=12)
    hf_generator.clear_cache()
    # c's first 40 tokens get cached states; its turn then prefills only the rest.
    hf_generator.generate([prompts["c"][:40]], SamplingParams(temperature=0.0, max_new_tokens=1))
    hits = hf_generator.prefix_cache.reused_tokens
    stream = hf_generator.stream()
    done = dict(stream.add([("a", prompts["a"], greedy), ("b", prompts["b"], greedy)]))
    done.update(stream.step())
    done.update(stream.add([("c", prompts["c"], greedy), ("d", prompts["d"], greedy)]))  # a, b decode in this pass
    assert stream.active == 4 and hf_generator.prefix_cache.reused_tokens - hits >= 40
    while stream.active:
        done.update(stream.step())
    for key, prompt in prompts.items():
        got = done[key]
        recomputed = hf_generator.logprobs([prompt + got.token_ids], [len(prompt)])[0]
        assert max(abs(x - y) for x, y in zip(got.logprobs, recomputed, strict=True)) < 1e-3, key


def test_slot_layer_reserves_room_by_moving_its_window_before_reallocating() -> None:
    """A packed pass's rows land in their slots; a wider joiner moves the window inside the buffers
    (same buffers, states kept) and only more rows than the buffers hold reallocate them."""
    import torch

    from sparring.agents.kv_cache import PackedPlan, SlotLayer

    layer = SlotLayer()
    like = torch.zeros(2, 1, 4)

    def packed(decoding: int, joining: list[tuple[int, int, int, int]], tokens: torch.Tensor) -> None:
        layer.plan = PackedPlan(decoding, joining)
        layer.update(tokens[None], -tokens[None])
        layer.plan = None

    first = torch.arange(2 * 6 * 4, dtype=torch.float32).reshape(2, 6, 4) + 1  # [heads, tokens, dim]
    layer.reserve(2, 3, like)
    packed(0, [(0, 0, 3, 0), (1, 3, 3, 0)], first)  # two rows of 3 tokens join an empty batch
    assert torch.equal(layer.keys[1], first[:, 3:]) and torch.equal(layer.values[0], -first[:, :3])
    layer.remove(1)
    buffer = layer._kbuf
    for i in range(2 * buffer.shape[2]):  # decode past the buffers' end, trimming as rows leave padding
        layer.reserve(0, 1, like)
        packed(1, [], torch.full((2, 1, 4), float(i)))
        if layer.end - layer.start > 8:
            layer.trim(4)
    assert layer._kbuf is buffer  # the window moved back within the buffers instead of reallocating
    steps = 2 * buffer.shape[2]
    assert torch.equal(layer.keys[0, 0, -3:, 0], torch.arange(steps - 3, steps, dtype=torch.float32))
    # Row 1 joins with 5 cached columns and 4 new tokens while row 0 decodes its next token.
    prefix = torch.full((2, 5, 4), 5.0)
    new = torch.full((2, 5, 4), 9.0)  # [row 0's token, row 1's 4 tokens]
    new[:, 0] = -1.0
    layer.reserve(1, 9, like)
    layer.write_prefix(1, prefix, -prefix, before=4)
    packed(1, [(1, 1, 4, 5)], new)
    assert layer._kbuf is buffer and layer.keys.shape[:3] == (2, 2, max(9, layer.end - layer.start))
    assert torch.equal(layer.keys[0, :, -1], new[:, 0]) and layer.keys[0, 0, -2, 0] == steps - 1
    assert torch.equal(layer.keys[1, :, -9:-4], prefix) and torch.equal(layer.values[1, :, -9:-4], -prefix)
    assert torch.equal(layer.keys[1, :, -4:], new[:, 1:]) and torch.equal(layer.values[1, :, -4:], -new[:, 1:])
    layer.reserve(1, 2, like)  # a third row: more than the buffers hold
    assert layer._kbuf is not buffer and layer._kbuf.shape[0] >= 3 and layer.rows == 3
    assert torch.equal(layer.keys[1, :, -9:-4], prefix) and torch.equal(layer.keys[0, :, -1], new[:, 0])
