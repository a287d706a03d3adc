"""Fixtures of the trainer tests: SmolLM2's tokenizer with a tiny random Llama, saved as a local model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require


def tiny_model(tokenizer: Any, seed: int = 0, **settings: Any) -> Any:
    """A two-layer Llama with SmolLM2's vocabulary: real code paths, milliseconds per step (``settings``: more
    LlamaConfig fields, e.g. ``attention_dropout``)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
        max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **settings,
    )
    return LlamaForCausalLM(config)


def tiny_vllm_model(tokenizer: Any, folder: Path, tied: bool = True) -> Path:
    """A two-layer Llama with SmolLM2's vocabulary and a head size vLLM's CPU attention supports (32), saved with
    the tokenizer in ``folder`` (``tied=False``: an output layer of its own, as a CPU vLLM server needs)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=tied, max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def smol_tokenizer() -> Any:
    """SmolLM2's tokenizer (and chat template), from the model setup converted."""
    from sparring.agents.model import default_model_present, load_tokenizer

    require(default_model_present(), "the default model (SmolLM2-135M-Instruct)")
    return load_tokenizer(None)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory, smol_tokenizer: Any) -> Path:
    """The tiny model and the tokenizer saved as a local folder, for ``model=PATH`` runs."""
    folder = tmp_path_factory.mktemp("tiny-model")
    tiny_model(smol_tokenizer).save_pretrained(folder)
    smol_tokenizer.save_pretrained(folder)
    return folder
