"""Run by ``torchrun --nproc_per_node 2`` (or ``accelerate launch``): one multi-rank scenario, the ranks given
different work as in real runs.

Arguments: the scenario's name (or several, comma-separated, run one after the other), the JSON file rank 0 writes
(each scenario's results of every rank, in rank order), the tiny model's folder, then config overrides
(``distributed=fsdp``). The process group is opened with a short timeout first, so a collective that one rank
never joins fails the run instead of hanging it: gloo on CPU; on a CUDA machine (the trainer's ``device: auto``)
NCCL, with gloo beside it for the objects, as a GPU run has it. A machine with fewer GPUs than ranks (one GPU
lent to check these paths) shares them (:func:`share_gpus`).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from transformers import AutoModelForCausalLM

from sparring.agents.chat import append_tokens
from sparring.agents.model import load_tokenizer
from sparring.envs.core import Episode, Turn
from sparring.training.checkpoint import load_checkpoint, save_checkpoint
from sparring.training.config import load_config
from sparring.training.game import Rollout
from sparring.training.ranks import close_ranks, gather_objects
from sparring.training.sequences import action_logprobs, to_sequence
from sparring.training.trainer import Trainer
from tests.training.conftest import tiny_model

#: The config of every scenario's trainer, before its overrides.
SETTINGS = ["games=search", "backend=hf", "threads=1", "lr=0.01", "warm_start_batch=1", "max_grad_norm=0"]


def _episode(action: list[int], reward: float = 1.0) -> Episode:
    ep = Episode(env_id="toy", role="solver", domain="search", task_id="t", task={}, prompt="p")
    append_tokens(ep, [1, 2, 3], -1, action=False)
    append_tokens(ep, action, 0, action=True, logprobs=[-10.0] * len(action))
    ep.turns.append(Turn(action="a", observation="", reward=reward))
    ep.terminated = True
    return ep


def share_gpus() -> None:
    """Where this machine has fewer GPUs than the launch has ranks (every rank of a test runs on this machine, its
    "nodes" too), the ranks share them: a local rank r uses GPU r mod n. Call before the process group opens.

    Only for checking multi-rank code on a machine with one GPU: NCCL refuses two ranks of one host on one
    device, so each rank then names a host of its own (``NCCL_HOSTID``) and the ranks talk through loopback
    sockets, as ranks on separate nodes would (the same collectives, slower than NVLink).
    """
    count, ranks = torch.cuda.device_count(), int(os.environ.get("WORLD_SIZE", "1"))
    if 0 < count < ranks:
        os.environ["LOCAL_RANK"] = str(int(os.environ["LOCAL_RANK"]) % count)
        os.environ["NCCL_HOSTID"] = f"sparring-rank-{os.environ['RANK']}"
        os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")


def _checksum(trainer: Trainer) -> float:
    return float(sum(p.detach().double().sum() for p in trainer.model.parameters()))


def update(trainer: Trainer, rank: int) -> dict[str, Any]:
    """Each rank learns from its own episodes: without the gradient all-reduce the ranks would diverge."""
    group = ("search", "solver", f"g{rank}")
    rollouts = [
        Rollout(_episode([5 + rank, 6], 1.0), 1.0, [0.0], group, "done"),
        Rollout(_episode([9, 10 + rank], 0.0), 0.0, [0.0], group, "done"),
    ]
    trainer.reinforce(rollouts)
    return {"checksum": _checksum(trainer), "reduced": trainer.reduce({"rank": float(rank), "tokens": 4.0 + rank})}


def idle(trainer: Trainer, rank: int) -> dict[str, Any]:
    """Rank 1 has nothing to train on (every group dropped, or no episode finished)."""
    before = _checksum(trainer)
    group = ("search", "solver", "g")
    rollouts = [Rollout(_episode([5, 6], 1.0), 1.0, [0.0], group, "done"),
                Rollout(_episode([9, 10], 0.0), 0.0, [0.0], group, "done")]  # fmt: skip
    trainer.reinforce(rollouts if rank == 0 else [])
    return {"before": before, "checksum": _checksum(trainer)}


def keys(trainer: Trainer, rank: int) -> dict[str, Any]:
    """The ranks log different metrics, in number and in name."""
    values = {"a": 1.0, "b": 2.0} if rank == 0 else {"b": 4.0, "c": 6.0, "d": 8.0}
    return {"reduced": trainer.reduce(values)}


def warm(trainer: Trainer, rank: int) -> dict[str, Any]:
    """Rank 0 kept three demonstrations, rank 1 one: one optimizer step per demonstration."""
    demos = [_episode([5 + i, 6]) for i in range(3 if rank == 0 else 1)]
    stats = trainer.supervised(demos, epochs=1, lr=0.01)
    assert stats.extra is not None
    return {"checksum": _checksum(trainer), "steps": stats.extra["optimizer_steps"]}


def tokens(trainer: Trainer, rank: int) -> dict[str, Any]:
    """Rank 0 holds 2 action tokens, rank 1 holds 6: the step must follow the mean over all 8 tokens."""
    demos = {0: _episode([5, 6]), 1: _episode([7, 8, 9, 10, 11, 12])}
    seen: dict[str, torch.Tensor] = {}
    names = {id(p): n for n, p in trainer.policy_model.named_parameters()}

    def record(optimizer: Any, *_: Any) -> None:
        for group in optimizer.param_groups:
            for p in group["params"]:
                seen[names[id(p)]] = p.grad.detach().clone()

    inner = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
    inner.register_step_pre_hook(record)
    trainer.supervised([demos[rank]], epochs=1, lr=0.01)
    # The same loss in one process: a fresh copy of the starting weights, all 8 tokens, one token-level mean.
    reference = tiny_model(trainer.tokenizer, seed=0).to(trainer.accelerator.device)
    reference.train()
    total = sum(-action_logprobs(reference, to_sequence(ep)).sum() for ep in demos.values()) / 8
    total.backward()
    worst = 0.0
    for name, p in reference.named_parameters():
        if name in seen:
            scale = float(p.grad.abs().max()) or 1.0
            worst = max(worst, float((seen[name] - p.grad).abs().max()) / scale)
    return {"worst_relative_error": worst, "compared": len(seen)}


def resume(trainer: Trainer, rank: int) -> dict[str, Any]:
    """Save, draw, draw more, load: each rank must draw again what it drew right after the save."""

    cuda = trainer.accelerator.device.type == "cuda"

    def draws() -> list[float]:
        drawn = [float(trainer.rng.random()), random.random(), float(np.random.rand()), float(torch.rand(1))]
        return drawn + ([float(torch.rand(1, device=trainer.accelerator.device))] if cuda else [])

    folder = save_checkpoint(trainer)
    assert folder is not None
    after_save = draws()
    draws()
    load_checkpoint(trainer, folder)
    return {"after_save": after_save, "after_load": draws()}


def fsdp_demos(rank: int) -> list[Episode]:
    """Rank 0's three warm-start demonstrations or rank 1's one (one optimizer step: rank 1 pads with idle passes)."""
    return [_episode([5 + i, 6, 7 + i][: 2 + i % 2]) for i in range(3)] if rank == 0 else [_episode([20, 21, 22])]


def fsdp_rollouts(rank: int) -> list[Rollout]:
    """Each rank's own group, of different sizes and lengths, as ranks get them from their own episodes."""
    group = ("search", "solver", f"g{rank}")
    if rank == 0:
        return [Rollout(_episode([5, 6, 7], 1.0), 1.0, [0.0], group, "done"),
                Rollout(_episode([9, 10], 0.0), 0.0, [0.0], group, "done"),
                Rollout(_episode([11, 12, 13, 14], 1.0), 1.0, [0.0], group, "done")]  # fmt: skip
    return [Rollout(_episode([30, 31], 1.0), 1.0, [0.0], group, "done"),
            Rollout(_episode([32], 0.0), 0.0, [0.0], group, "done")]  # fmt: skip


def fsdp_update(trainer: Trainer, rank: int) -> dict[str, Any]:
    """A warm-start step, the KL reference frozen, a self-play step; the gathered weights go to ``weights.pt``."""
    from sparring.training.fsdp import full_state_dict, is_sharded, resident_bytes

    trainer.supervised(fsdp_demos(rank), epochs=1, lr=0.01)
    trainer.freeze_reference()
    assert trainer.reference is not None
    seq = to_sequence(fsdp_rollouts(0)[0].episode)  # the same on every rank: the passes meet the other ranks
    with torch.no_grad():
        ours, reference = action_logprobs(trainer.policy_model, seq), action_logprobs(trainer.reference, seq)
    with _gathers_counted() as gathered:  # the HF copy takes each weight as it is gathered, then the next
        trainer.reinforce(fsdp_rollouts(rank))
    weights = full_state_dict(trainer.policy_model)
    if rank == 0:
        torch.save(weights, trainer.out / "weights.pt")
    sampled = trainer.generator.model.state_dict()  # type: ignore[attr-defined]
    return {
        "gathered": gathered["count"],
        "gathered_alive_most": gathered["alive_most"],
        "weights": len(weights),
        "copy_is_the_policy": all(torch.equal(sampled[k], v) for k, v in weights.items()),
        "sharded": is_sharded(trainer.policy_model),
        "reference_sharded": is_sharded(trainer.reference),
        "reference_error": float((ours - reference).abs().max()),  # the frozen copy scores as the policy did
        "reference_bytes": resident_bytes(trainer.reference, trainer.optimizer)["parameters"],
        "bytes": resident_bytes(trainer.policy_model, trainer.optimizer),
    }


def fsdp_checkpoint(trainer: Trainer, rank: int) -> dict[str, Any]:
    """Save after a step, step again, load: the gathered weights are the saved ones again."""
    from sparring.training.fsdp import full_state_dict

    trainer.reinforce(fsdp_rollouts(rank))
    folder = save_checkpoint(trainer)
    assert folder is not None
    saved = full_state_dict(trainer.policy_model)
    if rank == 0:
        torch.save(saved, trainer.out / "weights.pt")
    trainer.reinforce(fsdp_rollouts(rank))
    moved = full_state_dict(trainer.policy_model)
    load_checkpoint(trainer, folder)
    loaded = full_state_dict(trainer.policy_model)
    return {
        "folder": str(folder),
        "moved": any(not torch.equal(moved[k], saved[k]) for k in saved),
        "reloaded": all(torch.equal(loaded[k], saved[k]) for k in saved),
        "generator": all(torch.equal(v, saved[k]) for k, v in trainer.generator.model.state_dict().items()),
    }


def memory(trainer: Trainer, rank: int) -> dict[str, Any]:
    """Bytes of parameters and optimizer state this rank holds after a step (SmolLM2's shapes, 2 layers)."""
    from sparring.training.fsdp import resident_bytes

    trainer.reinforce(fsdp_rollouts(rank))
    return resident_bytes(trainer.policy_model, trainer.optimizer)


def _greedy_against_own_scores(trainer: Trainer, prompt: list[int]) -> tuple[list[float], float]:
    """The generator's greedy logprobs of a 4-token turn, and their largest difference from the policy's own scores."""
    from sparring.agents.generation import SamplingParams

    out = trainer.generator.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=4))[0]
    with torch.no_grad():
        logits = trainer.policy_model(torch.tensor([prompt + out.token_ids])).logits[0, len(prompt) - 1 : -1].float()
    own = torch.log_softmax(logits, -1).gather(-1, torch.tensor(out.token_ids)[:, None]).squeeze(-1)
    return out.logprobs, float((torch.tensor(out.logprobs) - own).abs().max())


def server(trainer: Trainer, rank: int) -> dict[str, Any]:
    """The ranks sample from a vLLM server (``backend=server``; one for both, or one each), update on their own
    episodes, sample again."""
    from safetensors.torch import load_file

    generator: Any = trainer.generator
    pushes: list[float] = []
    push = generator._push

    def counted(state_dict: Any) -> None:  # the real push, counted
        pushes.append(1.0)
        push(state_dict)

    generator._push = counted
    prompt = trainer.tokenizer.encode(f"Rank {rank} asks a question of its own.")
    before, error_before = _greedy_against_own_scores(trainer, prompt)
    with _gathers_counted() as gathered:  # under fsdp each weight is gathered as the push reads it
        update(trainer, rank)  # each rank's own episodes; the gradient all-reduce keeps the replicas equal
    after, error_after = _greedy_against_own_scores(trainer, prompt)
    # what the server reloaded (the pushing rank's folder, its last push's alone), read after the barrier
    folders = sorted(p for p in generator.weights_dir.iterdir() if p.is_dir())
    files = sorted(folders[-1].glob("*.safetensors"))
    pushed: dict[str, Any] = {}
    for file in files:
        pushed.update(load_file(str(file)))
    from sparring.training.fsdp import full_state_dict, is_sharded

    model = trainer.policy_model  # every rank reads every weight (gathers under fsdp), then compares
    whole = full_state_dict(model) if is_sharded(model) else {n: p.detach() for n, p in model.named_parameters()}
    return {
        "pushes": len(pushes),
        "version": generator.weights_version,
        "checksum": _checksum(trainer),
        "error_before": error_before,
        "error_after": error_after,
        "changed": before != after,
        "whole_checksum": float(sum(t.double().sum() for t in whole.values())),
        "files": len(files),
        "folders": [p.name for p in folders],
        "file_is_the_policy": set(pushed) == set(whole) and all(torch.equal(pushed[n], t) for n, t in whole.items()),
        "server": str(generator.admin.base_url),
        "gathered": gathered["count"],
        "gathered_alive_most": gathered["alive_most"],
        "weights": len(trainer.policy_model.state_dict()),
    }


@contextlib.contextmanager
def _gathers_counted() -> Iterator[dict[str, int]]:
    """Count the whole weights a sharded model's DTensors are gathered into, and how many live at once at most."""
    import weakref

    from torch.distributed.tensor import DTensor

    gathered: list[Any] = []
    seen = {"count": 0, "alive_most": 0}
    full_tensor = DTensor.full_tensor

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        whole = full_tensor(self, *args, **kwargs)
        gathered.append(weakref.ref(whole))
        seen["count"] = len(gathered)
        seen["alive_most"] = max(seen["alive_most"], sum(ref() is not None for ref in gathered))
        return whole

    DTensor.full_tensor = counted  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        DTensor.full_tensor = full_tensor  # type: ignore[method-assign]


def colocated(trainer: Trainer, rank: int) -> dict[str, Any]:
    """Each rank samples from its own in-process vLLM engine (``backend=vllm``), updates on its own episodes and
    pushes the new weights into its engine; the ranks' engines must not join each other's collectives."""
    from sparring.agents.generation import SamplingParams

    prompt = trainer.tokenizer.encode(f"Rank {rank} asks a question of its own.")
    before, error_before = _greedy_against_own_scores(trainer, prompt)  # one policy forward on every rank (fsdp)
    # Different work per rank: rank 1's engine samples three more turns before the update (the engine alone: under
    # fsdp each forward of the policy is a collective, which the update's own passes keep in step).
    for _ in range(3 * rank):
        trainer.generator.generate([prompt], SamplingParams(temperature=1.0, max_new_tokens=8, seed=rank))
    # under fsdp the push gathers each weight as the engine's reload reads it: how many whole ones live at once
    with _gathers_counted() as gathered:
        update(trainer, rank)
    after, error_after = _greedy_against_own_scores(trainer, prompt)
    from sparring.training.fsdp import full_state_dict, is_sharded

    whole = full_state_dict(trainer.policy_model) if is_sharded(trainer.policy_model) else None  # a collective
    return {
        "sharded": whole is not None,
        "gathered": gathered["count"],
        "gathered_alive_most": gathered["alive_most"],
        "weights": len(trainer.policy_model.state_dict()),  # a tied output layer's name too
        "whole_checksum": float(sum(t.double().sum() for t in whole.values())) if whole else _checksum(trainer),
        "engine": type(trainer.generator).__name__,
        "executor": trainer.generator.llm.llm_engine.vllm_config.parallel_config.distributed_executor_backend,
        "version": trainer.generator.weights_version,
        "error_before": error_before,
        "error_after": error_after,
        "changed": before != after,
    }


def placement(trainer: Trainer, rank: int) -> dict[str, Any]:
    """Where the launcher put this rank (its node is torchrun's ``GROUP_RANK``), then :func:`update`'s own work."""
    return {
        "rank": rank,
        "local": trainer.accelerator.local_process_index,
        "node": int(os.environ.get("GROUP_RANK", "-1")),
        "world": trainer.accelerator.num_processes,
        **update(trainer, rank),
    }


def async_run(trainer: Trainer, rank: int) -> dict[str, Any]:
    """``sparring train``'s loop with ``async_rollouts`` on real search envs: each rank plays its own tasks (its own
    random stream), so the ranks' plays differ in episodes, tokens and time while their updates meet in the
    collectives, each update in the worker thread beside the rank's next play."""
    import dataclasses
    import threading
    import time

    from sparring.training.run import run_training

    updates: list[dict[str, Any]] = []
    plays: list[tuple[float, float]] = []
    real_update, real_play = trainer.update, trainer.play

    def update(rollouts: list[Rollout], *args: Any) -> Any:
        # The tiny model answers nothing right: a reward from each episode's own last token gives its groups a
        # spread, so every update moves the weights, by gradients that differ per rank.
        rollouts = [
            dataclasses.replace(r, reward=float(r.episode.token_ids[-1] % 2)) if r.episode.token_ids else r
            for r in rollouts
            if not r.masked
        ] + [r for r in rollouts if r.masked]
        start = time.perf_counter()
        versions = [r.episode.weights_version for r in rollouts]
        generator = trainer.generator.weights_version
        result = real_update(rollouts, *args)
        updates.append({
            "main_thread": threading.current_thread() is threading.main_thread(),
            "generator": generator, "episodes": versions, "tokens": sum(len(r.episode.token_ids) for r in rollouts),
            "span": (start, time.perf_counter()),
        })  # fmt: skip
        return result

    def play(game: str, iteration: int | None = None) -> Any:
        start = time.perf_counter()
        result = real_play(game, iteration)
        if iteration is not None:  # a real play (the pipeline's take of a unit played ahead passes no iteration)
            plays.append((start, time.perf_counter()))
        return result

    trainer.update, trainer.play = update, play  # type: ignore[method-assign]
    before = _checksum(trainer)
    summary = run_training(trainer.config, trainer=trainer)
    overlapped = [any(s < u["span"][1] and u["span"][0] < e for s, e in plays) for u in updates]
    from sparring.training.fsdp import full_state_dict, is_sharded

    policy = trainer.policy_model
    whole = full_state_dict(policy) if is_sharded(policy) else policy.state_dict()
    vllm = trainer.config.backend == "vllm"
    sampled = {} if vllm else dict(trainer.sampled_model.state_dict())
    prompt = trainer.tokenizer.encode(f"Rank {rank} asks a question of its own.")
    return {
        "iterations": summary["iterations"],
        "moved": _checksum(trainer) != before,
        "updates": [{k: v for k, v in u.items() if k != "span"} for u in updates],
        "overlapped": overlapped,
        "version": trainer.generator.weights_version,
        "whole_checksum": float(sum(t.double().sum() for t in whole.values())),
        # the HF backend's copy holds the policy's weights; vLLM's engine samples them (one policy forward: fsdp's
        # collective, on every rank)
        "generator_is_policy": vllm or all(torch.equal(sampled[k], v.to(sampled[k].device)) for k, v in whole.items()),
        "engine_error": _greedy_against_own_scores(trainer, prompt)[1] if vllm else 0.0,
    }


def tensor_parallel(trainer: Trainer, rank: int) -> dict[str, Any]:
    """The two ranks' engines run as one (``vllm_tensor_parallel_size=2``), each rank with its own prompts and its
    own number of engine calls; then an update and its push, then ``sparring train``'s overlapped loop (with a
    held-out evaluation on the main process alone) on that engine."""
    from sparring.agents.generation import SamplingParams

    llm = trainer.generator.llm
    prompt = trainer.tokenizer.encode(f"Rank {rank} asks a question of its own." + " More." * rank)
    before, error_before = _greedy_against_own_scores(trainer, prompt)
    # rank 1 samples three more times (unseeded: its rank draws the seed the group samples with); rank 0 has ended its
    # play and serves those calls until rank 1 ends too
    extra = [
        trainer.generator.generate([prompt] * (1 + k), SamplingParams(temperature=1.0, max_new_tokens=6))
        for k in range(3 * rank)
    ]
    trainer.generation_done()
    update(trainer, rank)
    after, error_after = _greedy_against_own_scores(trainer, prompt)
    return {
        "tensor_parallel_size": llm.llm_engine.vllm_config.parallel_config.tensor_parallel_size,
        "group": trainer.generator.group.ranks,
        "error_before": error_before,
        "error_after": error_after,
        "changed": before != after,
        "extra": [[len(g.token_ids) for g in call] for call in extra],
        "run": async_run(trainer, rank),
    }


def smol_shaped(tokenizer: Any) -> Any:
    """SmolLM2-135M's configuration (vocabulary, width, heads, tied head) with 2 of its 30 layers, random weights."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from sparring.agents.model import resolve_model

    config = AutoConfig.from_pretrained(resolve_model(None))
    config.num_hidden_layers = 2
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config)


SCENARIOS = {
    f.__name__: f
    for f in (
        update, idle, keys, warm, tokens, resume, fsdp_update, fsdp_checkpoint, memory, server, colocated, placement,
        async_run,
    )
} | {"async_vllm": async_run, "tensor_parallel": tensor_parallel}  # fmt: skip
#: A scenario's own config overrides, after the launch's (scenarios that need none share a launch with it).
SCENARIO_OVERRIDES: dict[str, list[str]] = {
    "fsdp_update": ["warm_start_batch=8", "kl_coef=0.1", "max_grad_norm=1.0"],
    # three iterations of the search game on the tiny model, overlapped (tests/training/test_async.py's settings)
    "async_run": (
        "async_rollouts=true iterations=3 warm_start=false proposals=1 search_group=2 drawn_tasks=1 search_max_turns=1 "
        "max_new_tokens=4 drop_zero_variance=false log_episodes=0"
    ).split(),
}
SCENARIO_OVERRIDES["async_vllm"] = SCENARIO_OVERRIDES["async_run"]
SCENARIO_OVERRIDES["tensor_parallel"] = [
    *SCENARIO_OVERRIDES["async_run"], "vllm_tensor_parallel_size=2", "eval_every=2", "eval_limit=2"
]
def _saved(_: Any, folder: str) -> Any:
    """The model in ``folder`` in float32: what a vLLM engine or server loads, so both start from the same weights."""
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)


#: The model a scenario trains when not the tiny one: ``(tokenizer, model folder)`` to the model.
MODELS: dict[str, Callable[[Any, str], Any]] = {
    "memory": lambda tokenizer, _: smol_shaped(tokenizer),
    **dict.fromkeys(("server", "colocated", "async_vllm", "tensor_parallel"), _saved),
}


def main() -> None:
    names, out, model_dir, overrides = sys.argv[1].split(","), Path(sys.argv[2]), sys.argv[3], sys.argv[4:]
    cuda = torch.cuda.is_available() and "device=cpu" not in overrides
    if cuda:
        share_gpus()
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("cuda:nccl,cpu:gloo" if cuda else "gloo", timeout=timedelta(seconds=60))
    tokenizer = load_tokenizer(model_dir)
    results: dict[str, list[dict[str, Any]]] = {}
    # Several scenarios share one launch (the ranks' start costs more than most scenarios): each gets a trainer of its
    # own, with its own model and run folder, in the order given.
    for scenario in names:
        folder = out.parent / "run" if len(names) == 1 else out.parent / scenario / "run"
        config = load_config(None, [f"out={folder}", *SETTINGS, *overrides, *SCENARIO_OVERRIDES.get(scenario, [])])
        model = MODELS.get(scenario, lambda t, _: tiny_model(t, seed=0))(tokenizer, model_dir)
        trainer = Trainer(config, model=model, tokenizer=tokenizer)
        results[scenario] = gather_objects(SCENARIOS[scenario](trainer, trainer.rank))
        dist.barrier()
        del trainer, model  # as `sparring train` drops its trainer before the ranks close (close_ranks)
    if dist.get_rank() == 0:
        out.write_text(json.dumps({"scenarios": results}))
    close_ranks()  # as `sparring train` ends


if __name__ == "__main__":
    main()
