"""Weight updates of the HF reference backend on the default model.

The backend keeps nothing derived from the weights between calls (no KV states, no packed copies),
so a change reaches the next call whichever way it is made; :meth:`HFGenerator.update_weights`
loads a state dict and counts versions.
"""

from __future__ import annotations

from typing import Any

import pytest

from sparring import SparringError
from sparring.agents.generation import SamplingParams
from sparring.agents.hf_backend import HFGenerator

pytestmark = [pytest.mark.model, pytest.mark.slow]

GREEDY = SamplingParams(temperature=0.0, max_new_tokens=8)
#: One layer's MLP output projection: its change reaches every later layer.
CHANGED = "model.layers.0.mlp.down_proj.weight"


def _prompt(tokenizer: Any) -> list[int]:
    """A chat prompt of a few dozen tokens."""
    question = "Please read this carefully. " * 4 + "Name three colours."
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True
    )
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _scaled(model: Any) -> dict[str, Any]:
    """The changed tensor, as a trainer's (partial) state dict would carry it."""
    return {CHANGED: model.get_parameter(CHANGED).detach() * 1.5}


def _built_on(state_dict: dict[str, Any], tokenizer: Any) -> HFGenerator:
    """A new generator on the default weights with ``state_dict`` loaded."""
    from sparring.agents.model import load_model

    model = load_model()
    model.load_state_dict(state_dict, strict=False)
    return HFGenerator(model_obj=model, tokenizer=tokenizer)


def _assert_same(a: Any, b: Any) -> None:
    assert a.token_ids == b.token_ids
    assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def _differ(a: Any, b: Any) -> bool:
    return a.token_ids != b.token_ids or max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) > 1e-2


@pytest.mark.timeout(600)
def test_an_in_place_change_reaches_the_next_call_and_state_dicts_load(tokenizer: Any) -> None:
    """A trainer's in-place step on a shared model is what the next call samples, before any
    ``update_weights()``; a state dict loads and the version counts both."""
    import torch

    generator = HFGenerator()  # its own copy of the model: this test changes the weights
    prompt = _prompt(tokenizer)
    original = {CHANGED: generator.model.get_parameter(CHANGED).detach().clone()}
    (before,) = generator.generate([prompt], GREEDY)
    changed = _scaled(generator.model)
    with torch.no_grad():  # in place, as an optimizer step does
        generator.model.get_parameter(CHANGED).copy_(changed[CHANGED])
    (after,) = generator.generate([prompt], GREEDY)  # not told yet: no stale copy to sample from
    (fresh,) = _built_on(changed, tokenizer).generate([prompt], GREEDY)
    _assert_same(after, fresh)
    assert _differ(after, before)
    assert generator.update_weights() == 1 == generator.weights_version

    assert generator.update_weights(original) == 2
    (restored,) = generator.generate([prompt], GREEDY)
    _assert_same(restored, before)


def test_update_refuses_unknown_tensors(hf_generator: Any) -> None:
    """The refusal changes nothing: the shared session generator keeps its weights and version."""
    import torch

    version = hf_generator.weights_version
    weight = hf_generator.model.get_parameter(CHANGED)
    kept = weight.detach().clone()
    with pytest.raises(SparringError, match="does not have"):
        hf_generator.update_weights({CHANGED: torch.zeros_like(kept), "not.a.weight": torch.zeros(1)})
    assert torch.equal(weight, kept)  # checked before loading: no tensor of a refused dict is copied
    assert hf_generator.weights_version == version
    # a tensor of another shape (which copying would broadcast into the weight) is refused the same way
    with pytest.raises(SparringError, match="has shape"):
        hf_generator.update_weights({CHANGED: torch.zeros_like(kept), "lm_head.weight": torch.zeros(kept.shape[-1])})
    assert torch.equal(weight, kept) and hf_generator.weights_version == version
