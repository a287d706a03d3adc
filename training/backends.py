"""The trainer's generator by ``config.backend``: what samples the self-play episodes.

``hf`` shares the trainer's model object (an optimizer step is visible at once; the generator only
drops what it derived from the old weights). ``vllm`` runs vLLM's engine in the trainer's process
with its own copy of the weights, which :meth:`~sparring.agents.generation.Generator.update_weights`
refreshes from the trainer's parameters after every update (vLLM's ``reload_weights``). ``server``
(a vLLM server on other GPUs) is not supported yet and is refused in one sentence.
"""

from __future__ import annotations

from typing import Any

from sparring import SparringError
from sparring.agents.generation import Generator
from sparring.training.config import TrainConfig

__all__ = ["build_generator"]


def build_generator(config: TrainConfig, model: Any, tokenizer: Any, device: str) -> Generator:
    """The generator of ``config.backend`` over the trainer's ``model`` (already on ``device``).

    Raises:
        SparringError: ``backend`` is ``server`` (not supported yet) or vLLM is missing.
    """
    generator: Any
    if config.backend == "hf":
        from sparring.agents.hf_backend import HFGenerator

        generator = HFGenerator(
            model_obj=model,
            tokenizer=tokenizer,
            device=device,
            pack_linears=device == "cpu",
            prefix_cache_tokens=config.prefix_cache_tokens,
        )
    elif config.backend == "vllm":
        from sparring.agents.vllm_backend import VLLMGenerator

        generator = VLLMGenerator(
            None if config.model in ("", "default") else config.model,
            policy=model,
            tokenizer=tokenizer,
            dtype=config.vllm_dtype,
            max_model_len=config.max_context_tokens + config.max_new_tokens,
        )
    else:
        raise SparringError(
            "backend=server (a vLLM server on other GPUs, weights pushed after each update) is not supported yet; "
            "use backend=hf or backend=vllm."
        )
    generator.name = str(config.model)
    return generator
