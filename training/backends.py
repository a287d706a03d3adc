"""The trainer's generator by ``config.backend``: what samples the self-play episodes.

``hf`` shares the trainer's model object (an optimizer step is visible at once; the generator only
drops what it derived from the old weights). ``vllm`` runs vLLM's engine in the trainer's process
with its own copy of the weights, which :meth:`~sparring.agents.generation.Generator.update_weights`
refreshes from the trainer's parameters after every update (vLLM's ``reload_weights``). ``server``
samples from a ``vllm serve`` process (other GPUs, another machine), whose weights are pushed
after every update through a shared folder and the server's ``reload_weights`` endpoint. Several
ranks share one server: every rank holds the same weights after an update, so rank 0 alone pushes
them, and every rank waits at a barrier until that push is done before it samples again.
"""

from __future__ import annotations

from typing import Any

from sparring.agents.generation import Generator
from sparring.training.config import TrainConfig

__all__ = ["build_generator"]


def build_generator(config: TrainConfig, model: Any, tokenizer: Any, device: str) -> Generator:
    """The generator of ``config.backend`` over the trainer's ``model`` (already on ``device``).

    Raises:
        SparringError: vLLM is missing (``vllm``), or the server cannot be used (``server``).
    """
    generator: Any
    if config.backend == "hf":
        from sparring.agents.hf_backend import HFGenerator

        generator = HFGenerator(model_obj=model, tokenizer=tokenizer, device=device)
    elif config.backend == "vllm":
        from sparring.agents.vllm_backend import VLLMGenerator

        generator = VLLMGenerator(
            None if config.model in ("", "default") else config.model,
            policy=model,
            tokenizer=tokenizer,
            dtype=config.vllm_dtype,
            max_model_len=config.max_context_tokens + config.max_new_tokens,
            gpu_memory_utilization=config.vllm_gpu_memory_utilization,
        )
    else:
        from pathlib import Path

        from sparring.agents.http_backend import VLLMServerGenerator
        from sparring.training.ranks import barrier, rank

        generator = VLLMServerGenerator(
            config.server_url,
            config.server_weights_dir or Path(config.out) / "server_weights",
            policy=model,
            tokenizer=tokenizer,
            timeout=config.server_timeout,
            pushes=rank() == 0,
            wait=barrier,
        )
        return generator  # its name is the served model's, which every request names
    generator.name = str(config.model)
    return generator
