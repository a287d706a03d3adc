"""``sparring bench rollout``: throughput of the episode runner, concurrent vs one by one.

The same episodes (same seeds, greedy, so both runs do identical work) are played twice in one
process: ``concurrency`` at once (generation batched across envs, env steps in the thread pool)
and one by one. The figures are those of the concurrent run; ``speedup_vs_sequential`` is
the ratio of the two wall times. ``speedup_ceiling`` bounds it: the concurrent run cannot end
before its slowest episode would alone (every pass of that episode costs at least what it costs
with no other rows beside it), so the sequential wall time over that episode's own wall time in
the sequential run is the most any batching could give on this workload.

``backend`` picks the generator: ``"vllm"`` (the default, vLLM's engine in this process,
:class:`~sparring.agents.vllm_backend.VLLMGenerator`, the training ``backend=vllm``) or ``"hf"`` (the
plain transformers reference, :class:`~sparring.agents.hf_backend.HFGenerator`). Both play the same
episodes (same seeds), so their tokens/s, wall time and peak memory compare directly
(docs/benchmarks.md). Peak memory is the process's peak resident set, model loading included: run
one backend per process.
"""

from __future__ import annotations

import resource
import time
from typing import Any

from sparring import bench_machine
from sparring.agents.generation import SamplingParams
from sparring.agents.runner import EpisodeRunner, EpisodeSpec, RunnerConfig

__all__ = ["BACKENDS", "DTYPES", "bench_rollout"]

#: What ``--backend`` takes.
BACKENDS = ("vllm", "hf")
#: Each backend's weights when ``dtype`` is not given: vLLM's engine in bfloat16 (as training runs it), the
#: reference in float32 (greedy ids that do not depend on the batch).
DTYPES = {"vllm": "bfloat16", "hf": "float32"}


def bench_rollout(
    *,
    env_id: str = "sparring/SearchAnswer-v0",
    model: str | None = None,
    episodes: int = 8,
    concurrency: int = 8,
    max_turns: int = 3,
    max_new_tokens: int = 64,
    device: str = "cpu",
    env_kwargs: dict[str, Any] | None = None,
    dtype: str | None = None,
    backend: str = "vllm",
) -> dict[str, Any]:
    """Play ``episodes`` episodes concurrently and then sequentially; return the figures.

    ``env_kwargs`` go to ``gym.make`` (e.g. ``{"topk": 2}`` for shorter search results).
    ``backend``: ``"vllm"`` or ``"hf"`` (module docstring); ``dtype``: the weights (None: the
    backend's own, :data:`DTYPES`).
    """
    import torch

    from sparring import SparringError

    if backend not in BACKENDS:
        raise SparringError(f"unknown backend {backend!r}; use one of: {', '.join(BACKENDS)}.")
    dtype = dtype or DTYPES[backend]
    generator = _generator(model, device, dtype, episodes, concurrency, backend)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)
    specs = _specs(env_id, episodes, max_turns, env_kwargs)
    # Warm-up, outside the timings: open the env's shared resources (corpus, index) and the model's
    # kernels, and touch the memory of a full batch's KV buffers once. Fresh memory costs a page
    # fault per page on first use (about 0.4 s for 8 rows): the concurrent run, which comes first,
    # would pay it and the sequential run would reuse the freed pages, so the warm-up plays a full
    # batch to keep the two runs even.
    warm = RunnerConfig(concurrency, sampling=SamplingParams(0.0, max_new_tokens=2), max_turns=1, progress=False)
    EpisodeRunner(generator, warm).run(specs[:concurrency])

    runs = {}
    for label, at_once in (("concurrent", concurrency), ("sequential", 1)):
        getattr(generator, "clear_cache", lambda: None)()  # both runs start cold (vLLM's prefix cache)
        runner = EpisodeRunner(generator, RunnerConfig(concurrency=at_once, sampling=sampling, progress=False))
        t0 = time.perf_counter()
        eps = runner.run(specs)
        wall = time.perf_counter() - t0
        failed = [ep.error for ep in eps if ep.error]
        if failed:
            raise SparringError(f"{len(failed)} rollout episode(s) failed, e.g. {failed[0]}; fix the env, then rerun.")
        runs[label] = (runner.stats, wall, eps)

    stats, wall, eps = runs["concurrent"]
    seq_stats, seq_wall, seq_eps = runs["sequential"]
    same = all(a.token_ids == b.token_ids for a, b in zip(eps, seq_eps, strict=True))
    return {
        "bench": "rollout",
        "env": env_id,
        "env_kwargs": env_kwargs or {},
        "model": generator.name.rsplit("/", 1)[-1],
        "backend": backend,
        "device": device,
        "dtype": dtype,
        "torch_threads": torch.get_num_threads(),
        **bench_machine(),
        "episodes": episodes,
        "concurrency": concurrency,
        "max_turns": max_turns,
        "max_new_tokens": max_new_tokens,
        "turns": sum(len(ep.turns) for ep in eps),
        "generated_tokens": stats.generated_tokens,
        "longest_episode_tokens": max(sum(ep.action_mask) for ep in eps),
        "prompt_and_observation_tokens": sum(ep.action_mask.count(False) for ep in eps),
        "tokens_per_s": round(stats.generated_tokens / wall, 2),
        "episodes_per_min": round(60 * len(eps) / wall, 2),
        "env_wait_fraction": round(stats.env_wait_seconds / wall, 4),
        "generate_fraction": round(stats.generate_seconds / wall, 4),
        "generate_calls": stats.generate_calls,
        "wall_s": round(wall, 2),
        "sequential_wall_s": round(seq_wall, 2),
        "sequential_tokens_per_s": round(seq_stats.generated_tokens / seq_wall, 2),
        "speedup_vs_sequential": round(seq_wall / wall, 2),
        "speedup_ceiling": round(seq_wall / max(ep.timings["wall"] for ep in seq_eps), 2),
        "same_episodes": same,
        "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),  # KiB on Linux
    }


def _generator(model: str | None, device: str, dtype: str, episodes: int, concurrency: int, backend: str) -> Any:
    """The generator under test: vLLM's engine, or the HF reference backend (``backend="hf"``), on one checkpoint."""
    from sparring import SparringError

    if dtype not in ("float32", "bfloat16", "float16"):
        raise SparringError(f"unknown dtype {dtype!r}; use float32, bfloat16 or float16.")
    if episodes < 1 or concurrency < 1:
        raise SparringError(f"--episodes and --concurrency must each be at least 1 (got {episodes} and {concurrency}).")
    name = None if model in (None, "default") else model
    if backend == "vllm":
        from sparring.agents.vllm_backend import VLLMGenerator

        return VLLMGenerator(name, dtype=dtype)
    from sparring.agents.hf_backend import HFGenerator

    return HFGenerator(name, device=device, dtype=dtype)


def _specs(env_id: str, episodes: int, max_turns: int, env_kwargs: dict[str, Any] | None) -> list[EpisodeSpec]:
    import gymnasium as gym

    import sparring  # noqa: F401  (registers the envs)

    return [
        EpisodeSpec(lambda: gym.make(env_id, max_turns=max_turns, **(env_kwargs or {})), seed=s, env_id=env_id)
        for s in range(episodes)
    ]
