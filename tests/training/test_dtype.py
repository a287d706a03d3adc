"""The weights' type (config key ``dtype``): the model loads in it and trains in it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sparring import SparringError
from sparring.agents.chat import append_tokens
from sparring.envs.core import Episode, Turn
from sparring.training.config import load_config
from sparring.training.trainer import Trainer


def _demo(action: list[int]) -> Episode:
    ep = Episode(env_id="toy", role="solver", domain="search", task_id="t", task={}, prompt="p")
    append_tokens(ep, [1, 2, 3], -1, action=False)
    append_tokens(ep, action, 0, action=True, logprobs=[0.0] * len(action))
    ep.turns.append(Turn(action="a", observation="", reward=1.0))
    return ep


@pytest.mark.parametrize(("setting", "expected"), [("auto", torch.float32), ("bfloat16", torch.bfloat16)])
def test_the_policy_loads_and_trains_in_the_configured_dtype(
    tiny_model_dir: Path, tmp_path: Path, setting: str, expected: torch.dtype
) -> None:
    config = load_config(None, [f"out={tmp_path}", "games=search", "backend=hf", "threads=1", f"model={tiny_model_dir}",
                                f"dtype={setting}"])  # fmt: skip
    trainer = Trainer(config)
    if setting == "auto" and trainer.accelerator.device.type == "cuda" and torch.cuda.is_bf16_supported():
        expected = torch.bfloat16  # auto: bfloat16 on a GPU that has it, float32 on a CPU
    assert {p.dtype for p in trainer.policy_model.parameters()} == {expected}
    before = [p.detach().clone() for p in trainer.policy_model.parameters()]
    stats = trainer.supervised([_demo([5, 6, 7])], epochs=1, lr=0.01)
    assert stats.tokens == 3
    after = list(trainer.policy_model.parameters())
    assert all(p.dtype == expected for p in after)
    assert any(not torch.equal(a, b) for a, b in zip(after, before, strict=True))


def test_an_unknown_dtype_is_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(SparringError, match="dtype"):
        load_config(None, [f"out={tmp_path}", "dtype=fp8"])
