"""``sparring bench rollout``: throughput of the episode runner, concurrent vs one by one.

The same episodes (same seeds, greedy, so both runs do identical work) are played twice in one
process: ``concurrency`` at once (a continuous decode batch across envs, env steps in the thread
pool) and one by one. The figures are those of the concurrent run; ``speedup_vs_sequential`` is
the ratio of the two wall times. ``speedup_ceiling`` bounds it: the concurrent run cannot end
before its slowest episode would alone (every pass of that episode costs at least what it costs
with no other rows beside it), so the sequential wall time over that episode's own wall time in
the sequential run is the most any batching could give on this workload.

``engine`` picks what decodes: ``"slot"`` (the default) is the HF backend's own continuous batch
over its slot KV cache; ``"transformers-cb"`` plays the same episodes through transformers'
``ContinuousBatchingManager`` (:class:`~sparring.agents.hf_cb.CBGenerator`, paged cache) on the
same model object, packed linear layers included. :func:`bench_rollout_compare` (``--engine
compare``) plays the concurrent run of both engines alternately in one process, and reports the
tokens/s ratio and how many episodes came out token-identical.

``backend="vllm"`` plays the same episodes (same seeds) on vLLM's engine in this process instead
(:class:`~sparring.agents.vllm_backend.VLLMGenerator`, the training ``backend=vllm``), so the two
backends' tokens/s, wall time and peak memory compare directly (docs/benchmarks.md). Peak memory is
the process's peak resident set, model loading included: run one backend per process.
"""

from __future__ import annotations

import resource
import time
from typing import Any

from sparring import bench_machine
from sparring.agents.generation import SamplingParams
from sparring.agents.runner import EpisodeRunner, EpisodeSpec, RunnerConfig

__all__ = ["BACKENDS", "ENGINES", "bench_rollout", "bench_rollout_compare"]

#: What ``--backend`` takes.
BACKENDS = ("hf", "vllm")

#: What ``--engine`` takes.
ENGINES = ("slot", "transformers-cb", "compare")
#: transformers' continuous batching samples every row from the process-wide torch RNG (docs/agents.md).
CB_PER_REQUEST_SEEDS = False


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
    dtype: str = "float32",
    engine: str = "slot",
    pairs: int = 2,
    backend: str = "hf",
) -> dict[str, Any]:
    """Play ``episodes`` episodes concurrently and then sequentially; return the figures.

    ``env_kwargs`` go to ``gym.make`` (e.g. ``{"topk": 2}`` for shorter search results).
    ``engine``: ``"slot"`` or ``"transformers-cb"`` (module docstring); ``"compare"`` is
    :func:`bench_rollout_compare` with ``pairs``. ``backend``: ``"hf"`` or ``"vllm"`` (its own engine;
    ``engine`` must stay ``"slot"``).
    """
    import torch

    from sparring import SparringError

    if engine not in ENGINES:
        raise SparringError(f"unknown engine {engine!r}; use one of: {', '.join(ENGINES)}.")
    if backend not in BACKENDS or (backend == "vllm" and engine != "slot"):
        raise SparringError(
            f"unknown backend {backend!r} or an --engine with --backend vllm; use --backend hf (with any --engine) "
            "or --backend vllm (its own engine)."
        )
    if engine == "compare":
        return bench_rollout_compare(
            env_id=env_id,
            model=model,
            episodes=episodes,
            concurrency=concurrency,
            max_turns=max_turns,
            max_new_tokens=max_new_tokens,
            device=device,
            env_kwargs=env_kwargs,
            dtype=dtype,
            pairs=pairs,
        )
    hf = _hf_generator(model, device, dtype, episodes, concurrency, backend)
    generator: Any = hf if engine == "slot" else _cb_generator(hf, engine)
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
    try:
        for label, at_once in (("concurrent", concurrency), ("sequential", 1)):
            generator.clear_cache()  # both runs start cold
            runner = EpisodeRunner(generator, RunnerConfig(concurrency=at_once, sampling=sampling, progress=False))
            t0 = time.perf_counter()
            eps = runner.run(specs)
            wall = time.perf_counter() - t0
            failed = [ep.error for ep in eps if ep.error]
            if failed:
                raise SparringError(
                    f"{len(failed)} rollout episode(s) failed, e.g. {failed[0]}; fix the env, then rerun."
                )
            runs[label] = (runner.stats, wall, eps)
    finally:
        if generator is not hf:
            generator.close()

    stats, wall, eps = runs["concurrent"]
    seq_stats, seq_wall, seq_eps = runs["sequential"]
    same = all(a.token_ids == b.token_ids for a, b in zip(eps, seq_eps, strict=True))
    return {
        "bench": "rollout",
        "env": env_id,
        "env_kwargs": env_kwargs or {},
        "model": hf.name.rsplit("/", 1)[-1],
        "backend": backend,
        "engine": engine,
        "device": device,
        "dtype": dtype,
        "torch_threads": torch.get_num_threads(),
        **bench_machine(),
        "episodes": episodes,
        "concurrency": concurrency,
        "packed_linears": getattr(hf, "packed_linears", 0),
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


def bench_rollout_compare(
    *,
    env_id: str = "sparring/SearchAnswer-v0",
    model: str | None = None,
    episodes: int = 8,
    concurrency: int = 8,
    max_turns: int = 3,
    max_new_tokens: int = 64,
    device: str = "cpu",
    env_kwargs: dict[str, Any] | None = None,
    dtype: str = "float32",
    pairs: int = 2,
    cb_page_size: int = 32,
    cb_max_batch_tokens: int = 2048,
) -> dict[str, Any]:
    """The concurrent run of both engines, alternately (slot, transformers-cb, slot, ...), ``pairs`` times.

    Both engines decode with the same model object (packed linear layers included) and play the
    same episodes greedily. Figures: each run's generated tokens/s, wall and CPU time, the ratio
    transformers-cb / slot of each pair (tokens per wall second, and per CPU second, which the
    load of other processes moves less) and their medians, and token exactness: the share of
    episodes (and of turns) whose ids are identical to the slot engine's in the same pair, and the
    largest behaviour-logprob difference on identical episodes.
    """
    import statistics

    import torch
    import transformers

    from sparring import SparringError
    from sparring.agents.hf_cb import CBGenerator

    if pairs < 1:
        raise SparringError(f"--pairs must be at least 1 (got {pairs}).")
    hf = _hf_generator(model, device, dtype, episodes, concurrency, "hf")
    cb = CBGenerator(
        hf.name,
        model_obj=hf.model,
        tokenizer=hf.tokenizer,
        page_size=cb_page_size,
        max_batch_tokens=cb_max_batch_tokens,
    )
    sampling = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)
    specs = _specs(env_id, episodes, max_turns, env_kwargs)
    warm = RunnerConfig(concurrency, sampling=SamplingParams(0.0, max_new_tokens=2), max_turns=1, progress=False)
    for generator in (hf, cb):  # as in bench_rollout: shared resources, kernels, a full batch's memory
        EpisodeRunner(generator, warm).run(specs[:concurrency])
    runs: list[dict[str, Any]] = []
    try:
        for _ in range(pairs):
            pair = {}
            for label, generator in (("slot", hf), ("transformers-cb", cb)):
                generator.clear_cache()  # both start cold: no cached prefix or pages
                runner = EpisodeRunner(
                    generator, RunnerConfig(concurrency=concurrency, sampling=sampling, progress=False)
                )
                t0, c0 = time.perf_counter(), time.process_time()
                eps = runner.run(specs)
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                failed = [ep.error for ep in eps if ep.error]
                if failed:
                    raise SparringError(
                        f"{len(failed)} {label} episode(s) failed, e.g. {failed[0]}; fix it, then rerun."
                    )
                pair[label] = (runner.stats.generated_tokens, wall, eps, cpu)
            runs.append(pair)
    finally:
        cb.close()

    def figures(label: str) -> dict[str, list[float]]:
        return {
            "tokens_per_s": [round(p[label][0] / p[label][1], 2) for p in runs],
            "wall_s": [round(p[label][1], 2) for p in runs],
            "cpu_s": [round(p[label][3], 2) for p in runs],
            "generated_tokens": [p[label][0] for p in runs],
        }

    ratios = [(p["transformers-cb"][0] / p["transformers-cb"][1]) / (p["slot"][0] / p["slot"][1]) for p in runs]
    # The process's CPU seconds per run (both engines' threads, the envs'): on a machine that others
    # share, wall time swings with their load, while the work an engine does stays put.
    cpu_ratios = [(p["slot"][3] / p["slot"][0]) / (p["transformers-cb"][3] / p["transformers-cb"][0]) for p in runs]
    same_eps = same_turns = turns = 0
    lp_diff = 0.0
    for p in runs:
        for a, b in zip(p["slot"][2], p["transformers-cb"][2], strict=True):
            if a.token_ids == b.token_ids:
                same_eps += 1
                lp_diff = max([lp_diff, *(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True))])
            ta, tb = _turn_ids(a), _turn_ids(b)
            turns += max(len(ta), len(tb))
            same_turns += sum(x == y for x, y in zip(ta, tb, strict=False))
    ratio = statistics.median(ratios)
    identical = same_eps / (pairs * episodes)
    return {
        "bench": "rollout-compare",
        "env": env_id,
        "env_kwargs": env_kwargs or {},
        "model": hf.name.rsplit("/", 1)[-1],
        "device": device,
        "dtype": dtype,
        "transformers": transformers.__version__,
        "torch": torch.__version__.split("+")[0],
        "torch_threads": torch.get_num_threads(),
        **bench_machine(),
        "episodes": episodes,
        "concurrency": concurrency,
        "max_turns": max_turns,
        "max_new_tokens": max_new_tokens,
        "pairs": pairs,
        "packed_linears": getattr(hf, "packed_linears", 0),
        "cb_attention": hf.model.config._attn_implementation,
        "cb_page_size": cb_page_size,
        "cb_max_batch_tokens": cb_max_batch_tokens,
        "slot": figures("slot"),
        "transformers_cb": figures("transformers-cb"),
        "cb_over_slot_tokens_per_s": [round(r, 3) for r in ratios],
        "cb_over_slot_median": round(ratio, 3),
        "cb_over_slot_tokens_per_cpu_s": [round(r, 3) for r in cpu_ratios],
        "cb_over_slot_cpu_median": round(statistics.median(cpu_ratios), 3),
        "identical_episodes": round(identical, 4),
        "identical_turns": round(same_turns / max(1, turns), 4),
        "max_logprob_diff_identical": round(lp_diff, 6),
        # What the engine offers for the rest of the contract (see sparring.agents.hf_cb).
        "cb_per_request_seeds": CB_PER_REQUEST_SEEDS,
        "cb_logprobs": True,
        "cb_stop_strings": "emulated by the adapter (stream, cut, cancel)",
        # The bar for replacing the slot cache: token-exact, per-episode seeds, within 10% of its tokens/s.
        "meets_switch_bar": identical == 1.0 and ratio >= 0.9 and CB_PER_REQUEST_SEEDS,
    }


def _hf_generator(model: str | None, device: str, dtype: str, episodes: int, concurrency: int, backend: str) -> Any:
    """The generator under test: the HF backend, or vLLM's engine (``backend="vllm"``) on the same checkpoint."""
    from sparring import SparringError
    from sparring.agents.hf_backend import HFGenerator

    if dtype not in ("float32", "bfloat16", "float16"):
        raise SparringError(f"unknown dtype {dtype!r}; use float32, bfloat16 or float16.")
    if episodes < 1 or concurrency < 1:
        raise SparringError(f"--episodes and --concurrency must each be at least 1 (got {episodes} and {concurrency}).")
    name = None if model in (None, "default") else model
    if backend == "vllm":
        from sparring.agents.vllm_backend import VLLMGenerator

        return VLLMGenerator(name, dtype=dtype)
    return HFGenerator(name, device=device, dtype=dtype)


def _cb_generator(hf: Any, engine: str) -> Any:
    from sparring.agents.hf_cb import CBGenerator

    return CBGenerator(hf.name, model_obj=hf.model, tokenizer=hf.tokenizer)


def _specs(env_id: str, episodes: int, max_turns: int, env_kwargs: dict[str, Any] | None) -> list[EpisodeSpec]:
    import gymnasium as gym

    import sparring  # noqa: F401  (registers the envs)

    return [
        EpisodeSpec(lambda: gym.make(env_id, max_turns=max_turns, **(env_kwargs or {})), seed=s, env_id=env_id)
        for s in range(episodes)
    ]


def _turn_ids(episode: Any) -> list[list[int]]:
    """The sampled ids of each turn of an episode."""
    turns: dict[int, list[int]] = {}
    for token, turn, action in zip(episode.token_ids, episode.token_turn, episode.action_mask, strict=True):
        if action:
            turns.setdefault(turn, []).append(token)
    return [turns[t] for t in sorted(turns)]
