"""Weight updates of the HF backend on the default model.

The generator holds two copies of the weights: the prefix cache's KV states and the packed linear
layers. Each test first shows that a change the generator is not told about leaves it sampling
from a stale copy, then that :meth:`HFGenerator.update_weights` makes it sample exactly what a
generator freshly built on the new weights samples.
"""

from __future__ import annotations

from typing import Any

import pytest

from sparring import SparringError
from sparring.agents.generation import SamplingParams
from sparring.agents.hf_backend import HFGenerator

pytestmark = [pytest.mark.model, pytest.mark.slow]

GREEDY = SamplingParams(temperature=0.0, max_new_tokens=8)
#: One layer's MLP output projection: its change reaches every later layer's KV states, and it is packed.
CHANGED = "model.layers.0.mlp.down_proj.weight"


def _prompt(tokenizer: Any) -> list[int]:
    """A chat prompt well over the prefix cache's minimum share, so its states are cached and reused."""
    question = "Please read this carefully. " * 4 + "Name three colours."
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True
    )
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _scaled(model: Any) -> dict[str, Any]:
    """The changed tensor, as a trainer's (partial) state dict would carry it."""
    return {CHANGED: model.get_parameter(CHANGED).detach() * 1.5}


def _built_on(state_dict: dict[str, Any], tokenizer: Any, *, pack: bool) -> HFGenerator:
    """A new generator (empty caches, packed from scratch) on the default weights with ``state_dict`` loaded."""
    from sparring.agents.model import load_model

    model = load_model()
    model.load_state_dict(state_dict, strict=False)
    return HFGenerator(model_obj=model, tokenizer=tokenizer, pack_linears=pack)


def _assert_same(a: Any, b: Any) -> None:
    assert a.token_ids == b.token_ids
    assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def _differ(a: Any, b: Any) -> bool:
    return a.token_ids != b.token_ids or max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) > 1e-2


@pytest.mark.timeout(600)
def test_in_place_change_then_update_refreshes_packed_linears_and_prefix_states(tokenizer: Any) -> None:
    """A trainer's in-place step on the parameters, then ``update_weights()`` with no argument."""
    import torch

    generator = HFGenerator()  # its own copy of the model: this test changes the weights
    assert generator.packed_linears > 0 and generator.weights_version == 0
    prompt = _prompt(tokenizer)
    (before,) = generator.generate([prompt], GREEDY)
    assert generator.prefix_cache.lookup(prompt)[0] == len(prompt) - 1  # the prompt's states are cached
    changed = _scaled(generator.model)
    with torch.no_grad():  # in place, as an optimizer step does
        generator.model.get_parameter(CHANGED).copy_(changed[CHANGED])

    # Not told: every linear layer still runs its packed copy of the old weights, over old prefix states.
    (stale,) = generator.generate([prompt], GREEDY)
    _assert_same(stale, before)

    assert generator.update_weights() == 1 == generator.weights_version
    assert len(generator.prefix_cache) == 0
    (after,) = generator.generate([prompt], GREEDY)
    (fresh,) = _built_on(changed, tokenizer, pack=True).generate([prompt], GREEDY)
    _assert_same(after, fresh)
    assert _differ(after, before)


@pytest.mark.timeout(600)
def test_state_dict_update_drops_prefix_states_of_the_old_weights(tokenizer: Any) -> None:
    """Without packing, the prefix cache alone goes stale; ``update_weights(state_dict)`` loads and drops it."""
    generator = HFGenerator(pack_linears=False)
    prompt = _prompt(tokenizer)
    original = {CHANGED: generator.model.get_parameter(CHANGED).detach().clone()}
    (before,) = generator.generate([prompt], GREEDY)
    changed = _scaled(generator.model)

    assert generator.update_weights(changed) == 1
    (after,) = generator.generate([prompt], GREEDY)  # fills the prefix cache with the new weights' states
    (fresh,) = _built_on(changed, tokenizer, pack=False).generate([prompt], GREEDY)
    _assert_same(after, fresh)
    assert _differ(after, before)

    # Not told: the original weights are back, but the prompt's cached states are the changed weights'.
    generator.model.load_state_dict(original, strict=False)
    (stale,) = generator.generate([prompt], GREEDY)
    assert _differ(stale, before)
    assert generator.update_weights() == 2
    (restored,) = generator.generate([prompt], GREEDY)
    _assert_same(restored, before)


def test_update_refuses_unknown_tensors_and_rows_still_decoding(hf_generator: Any, tokenizer: Any) -> None:
    """Neither refusal changes anything: the shared session generator keeps its weights and version."""
    import torch

    version = hf_generator.weights_version
    weight = hf_generator.model.get_parameter(CHANGED)
    kept = weight.detach().clone()
    with pytest.raises(SparringError, match="does not have"):
        hf_generator.update_weights({CHANGED: torch.zeros_like(kept), "not.a.weight": torch.zeros(1)})
    assert torch.equal(weight, kept)  # checked before loading: no tensor of a refused dict is copied
    stream = hf_generator.stream()
    stream.add([("a", _prompt(tokenizer), SamplingParams(temperature=0.0, max_new_tokens=4))])
    assert stream.active == 1
    with pytest.raises(RuntimeError, match="rows of a stream are decoding"):
        hf_generator.update_weights()
    while stream.active:
        stream.step()
    assert hf_generator.weights_version == version
