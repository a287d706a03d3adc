"""The trainer's generator by ``config.backend``: what samples the self-play episodes.

``hf`` shares the trainer's model object (an optimizer step is visible at once; the generator only
drops what it derived from the old weights). ``vllm`` runs vLLM's engine in the trainer's process
with its own copy of the weights, which :meth:`~sparring.agents.generation.Generator.update_weights`
refreshes from the trainer's parameters after every update (vLLM's ``reload_weights``). ``server``
samples from a ``vllm serve`` process (other GPUs, another machine), whose weights are pushed
after every update through a shared folder and the server's ``reload_weights`` endpoint. Several
ranks share one server, or each of several servers (:func:`server_for_rank`): every rank holds the
same weights after an update, so one rank per server pushes them, and every rank waits at a barrier
until the pushes are done before it samples again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sparring import SparringError
from sparring.agents.generation import Generator
from sparring.training.config import TrainConfig

__all__ = ["build_generator", "server_for_rank"]


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
            tensor_parallel_size=config.vllm_tensor_parallel_size,
        )
    else:
        from sparring.agents.http_backend import VLLMServerGenerator
        from sparring.training.ranks import barrier

        url, weights_dir, pushes = server_for_rank(config)
        generator = VLLMServerGenerator(
            url, weights_dir, policy=model, tokenizer=tokenizer, timeout=config.server_timeout, pushes=pushes,
            wait=barrier,
        )  # fmt: skip
        return generator  # its name is the served model's, which every request names
    generator.name = str(config.model)
    return generator


def server_for_rank(config: TrainConfig) -> tuple[str, Path, bool]:
    """This rank's server of ``config.server_url`` (several, comma-separated: rank r samples from the
    (r mod n)-th of n), the folder its weights are written to, and whether this rank pushes them.

    Every rank holds the same weights after an update, so each server needs one push: rank i pushes to
    server i (the first rank of the ones sampling from it), the others skip it and wait at the barrier.
    With one server that is rank 0 and ``server_weights_dir`` itself; with several, each server has a
    folder of its own in it (ranks push at once; one file would be written by several).

    Raises:
        SparringError: More servers than ranks (a server no rank would push to or sample from).
    """
    from sparring.training.ranks import rank, world_size

    urls = [url.strip() for url in config.server_url.split(",") if url.strip()]
    if not urls:
        raise SparringError("server_url is empty; give the vLLM server's URL, /v1 included (several: comma-separated).")
    ranks = world_size()
    if len(urls) > ranks:
        raise SparringError(
            f"server_url names {len(urls)} servers but the run has {ranks} rank(s): each server is a rank's; name "
            f"at most {ranks}, or start more ranks."
        )
    me = rank()
    folder = Path(config.server_weights_dir or Path(config.out) / "server_weights")
    if len(urls) > 1:
        folder = folder / f"server-{me % len(urls)}"
    return urls[me % len(urls)], folder, me < len(urls)
