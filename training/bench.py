"""``sparring bench train``: our trainer against TRL's GRPO on the same solver env, model and budget.

Both sides run the same number of GRPO-style iterations on ``sparring/SearchAnswer-v0`` with the
same policy, and each iteration is: play ``tasks × group`` episodes (G attempts per task, the same
tasks on both sides), score them with the env's outcome reward, then one optimizer step.

- **ours**: the game's machinery with the solver role only (:func:`~sparring.training.game.play_iteration`
  on the generation backend ``backend`` names, stop strings ending each turn at its tool call), then
  :meth:`~sparring.training.trainer.Trainer.reinforce`. With ``hf`` (the plain HF reference)
  the generator shares the trained model; with ``vllm`` it is vLLM's engine in the same process, whose
  copy of the weights the trainer pushes after every update. That push is timed where it happens
  (``Trainer.sync_generator``, reported by ``reinforce`` as ``weight_sync_seconds``), inside the update.
- **trl**: ``trl.GRPOTrainer(environment_factory=...)`` through :mod:`sparring.envs.trl`, whose
  padded ``generate`` runs each turn to the end-of-turn token or the budget.

What is held equal: episodes and tasks per iteration, the group size, the turn limit, the sampling
(temperature 1, no top-k/top-p), the objective (PPO-clip 0.2 / 0.28 with a token-level mean, group
std scaling, no KL, one optimizer step, learning rate, gradient clip), float32 weights, activation
checkpointing (on by default, as both trainers default to), and every episode is trained on (ours
keeps zero-variance groups and overlong episodes, as TRL does). TRL has no per-turn token limit:
its budget ``max_completion_length`` is the episode's (``max_turns × max_new_tokens``, counting
tool results too), and ``max_tool_calling_iterations = max_turns − 1``. TRL ends a rollout at the first
message without a tool call, where our env answers it with an error and the episode goes on, so
the two sides may generate different numbers of turns and tokens: the JSON reports both, and
tokens/s beside the seconds.

Each side runs in a process of its own (spawned one after the other), so their peak resident
memory (``getrusage``) is their own; the first ``warmup`` iterations of each are not timed.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import typer

from sparring import SparringError, bench_machine, print_figures
from sparring.training.config import TrainConfig
from sparring.training.memory import peak_rss_gib

__all__ = ["bench_command", "bench_train"]

ENV_ID = "sparring/SearchAnswer-v0"
#: SmolLM2's own default system line (the ChatML tool template would otherwise name Qwen).
SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def _progress(side: str, index: int, iteration: dict[str, float]) -> None:
    """One line per iteration on stderr (a run under load takes a while)."""
    print(
        f"bench train: {side} iteration {index}: {iteration['seconds']:.1f} s "
        f"({iteration['generation_seconds']:.1f} s generating {iteration['generated_tokens']} tokens"
        + (f", {iteration['weight_sync_seconds']:.2f} s weight sync)" if "weight_sync_seconds" in iteration else ")"),
        file=sys.stderr,
        flush=True,
    )


def _side_figures(iterations: list[dict[str, float]], warmup: int) -> dict[str, Any]:
    """Per-iteration means over the timed iterations, and the rates they give."""
    timed = iterations[warmup:]

    def mean(key: str) -> float:
        return sum(it[key] for it in timed) / len(timed)

    figures: dict[str, Any] = {key: mean(key) for key in timed[0]}
    figures["generation_tokens_per_s"] = figures["generated_tokens"] / figures["generation_seconds"]
    figures["training_tokens_per_s"] = figures["trained_tokens"] / figures["training_seconds"]
    figures["iteration_seconds"] = [round(it["seconds"], 2) for it in timed]
    return figures


# ------------------------------------------------------------------------------------ ours


def _run_ours(settings: dict[str, Any]) -> dict[str, Any]:
    """Our trainer, solver role only (runs in a child process)."""
    import dataclasses
    import shutil
    import tempfile

    import torch

    from sparring.training.game import GAMES, play_iteration
    from sparring.training.trainer import Trainer

    torch.set_num_threads(settings["threads"])
    out = tempfile.mkdtemp(prefix="sparring-bench-train-")
    config = TrainConfig(
        model=settings["model"],
        games=["search"],
        search_group=settings["group"],
        drawn_tasks=settings["tasks"],
        search_max_turns=settings["max_turns"],
        max_new_tokens=settings["max_new_tokens"],
        temperature=1.0,
        concurrency=settings["tasks"] * settings["group"],
        lr=settings["lr"],
        drop_zero_variance=False,  # TRL trains on every group, flat ones too
        overlong="score",
        episode_seconds=24 * 3600.0,  # TRL has no time limit; a loaded machine must not cut episodes short
        warm_start=False,
        kl_coef=0.0,
        gradient_checkpointing=settings["checkpointing"],
        update_tokens_per_batch=settings["update_tokens_per_batch"],
        update_shared_prefix=settings["shared_prefix"],
        out=out,
        seed=settings["seed"],
        threads=settings["threads"],
        backend=settings["backend"],
        vllm_dtype=settings["vllm_dtype"],
    )
    trainer = Trainer(config)
    solver_only = dataclasses.replace(GAMES["search"], plays_proposer=lambda config: False)
    iterations, tasks = [], []
    for i in range(settings["warmup"] + settings["iterations"]):
        t0 = time.perf_counter()
        played = play_iteration(solver_only, trainer.generator, config, i, trainer.rng, trainer.replay["search"])
        t1 = time.perf_counter()
        update = trainer.reinforce(played.rollouts)
        t2 = time.perf_counter()
        episodes = [r.episode for r in played.rollouts]
        if len(episodes) != settings["tasks"] * settings["group"]:
            raise SparringError(f"only {len(episodes)} of the iteration's episodes finished; see the env errors.")
        by_group: dict[str, dict[str, Any]] = {}
        for r in played.rollouts:
            by_group.setdefault(r.group[2], r.episode.task)
        tasks.append(list(by_group.values()))
        iterations.append(
            {
                "seconds": t2 - t0,
                "generation_seconds": t1 - t0,
                "training_seconds": t2 - t1,
                "generated_tokens": sum(sum(ep.action_mask) for ep in episodes),
                "trained_tokens": sum(len(ep.token_ids) for ep in episodes),
                "turns": sum(len(ep.turns) for ep in episodes),
                "tool_calls": sum(1 for ep in episodes for t in ep.turns if t.tool),
                "reward_mean": sum(r.reward for r in played.rollouts) / len(played.rollouts),
                "weight_sync_seconds": (update.extra or {})["weight_sync_seconds"],
            }
        )
        _progress("ours", i, iterations[-1])
    shutil.rmtree(out, ignore_errors=True)
    return {"iterations": iterations, "tasks": tasks, "peak_rss_gib": peak_rss_gib()}


# ------------------------------------------------------------------------------------- TRL


def _run_trl(settings: dict[str, Any], tasks: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """TRL's GRPO on the same tasks (runs in a child process)."""
    import shutil
    import tempfile

    import torch

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from sparring.agents.model import checkpointing_argument, load_model, load_tokenizer
    from sparring.envs.trl import chatml_tool_template, trl_environment_factory

    torch.set_num_threads(settings["threads"])
    name = None if settings["model"] in ("", "default") else settings["model"]
    tokenizer = load_tokenizer(name)
    tokenizer.chat_template = chatml_tool_template()
    tokenizer.padding_side = "left"
    model = load_model(name)
    steps = settings["warmup"] + settings["iterations"]
    rows = [
        {"prompt": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": ""}], "task": task}
        for iteration in tasks[:steps]
        for task in iteration
    ]
    out = tempfile.mkdtemp(prefix="sparring-bench-trl-")
    args = GRPOConfig(
        output_dir=out,
        use_cpu=True,
        bf16=False,
        **checkpointing_argument(settings["checkpointing"]),
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        max_steps=steps,
        per_device_train_batch_size=settings["tasks"] * settings["group"],
        num_generations=settings["group"],
        max_completion_length=settings["max_turns"] * settings["max_new_tokens"],
        max_tool_calling_iterations=settings["max_turns"] - 1,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        learning_rate=settings["lr"],
        lr_scheduler_type="constant",
        epsilon=0.2,
        epsilon_high=0.28,
        beta=0.0,
        loss_type="dapo",
        scale_rewards="group",
        max_grad_norm=1.0,
        shuffle_dataset=False,
        seed=settings["seed"],
    )
    current: dict[str, float] = {}

    class TimedGRPO(GRPOTrainer):
        """Counts what each step generated and forwarded, and how long generation took."""

        def _generate_single_turn(self, prompt_ids: Any, *rest: Any, **kwargs: Any) -> Any:
            current["turns"] = current.get("turns", 0) + len(prompt_ids)
            return super()._generate_single_turn(prompt_ids, *rest, **kwargs)

        def _generate_and_score_completions(self, inputs: Any) -> Any:
            t0 = time.perf_counter()
            out = super()._generate_and_score_completions(inputs)
            current["generation_seconds"] = time.perf_counter() - t0
            completion = out["completion_mask"]
            sampled = completion * out["tool_mask"] if "tool_mask" in out else completion
            current["generated_tokens"] = int(sampled.sum())
            current["trained_tokens"] = int(out["prompt_mask"].sum() + completion.sum())
            return out

    iterations: list[dict[str, float]] = []

    class StepClock(TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            current.clear()
            current["start"] = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            seconds = time.perf_counter() - current.pop("start")
            iterations.append(
                current | {"seconds": seconds, "training_seconds": seconds - current["generation_seconds"]}
            )
            _progress("trl", state.global_step - 1, iterations[-1])

    environments: list[Any] = []
    factory = trl_environment_factory(ENV_ID, max_turns=settings["max_turns"])

    def environment() -> Any:
        environments.append(factory())
        return environments[-1]

    trainer = TimedGRPO(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        environment_factory=environment,
        callbacks=[StepClock()],
    )
    trainer.train()
    shutil.rmtree(out, ignore_errors=True)
    rewards = [log["rewards/TRLSearchAnswerEnv/mean"] for log in trainer.state.log_history if "step_time" in log]
    calls = [log.get("tools/call_frequency", 0.0) for log in trainer.state.log_history if "step_time" in log]
    episodes = settings["tasks"] * settings["group"]
    for it, reward, frequency in zip(iterations, rewards, calls, strict=True):
        it["reward_mean"] = float(reward)
        it["tool_calls"] = float(frequency) * episodes
    return {"iterations": iterations, "peak_rss_gib": peak_rss_gib()}


# ------------------------------------------------------------------------------------ both


def _quiet_stdout(function: Any, *args: Any) -> dict[str, Any]:
    """``function(*args)`` with this process's stdout sent to stderr (the bench's stdout is its JSON).

    The machine's load at the side's start and end goes with its figures: a shared machine's load
    can change between the two sides.
    """
    sys.stdout.flush()
    os.dup2(2, 1)
    start = os.getloadavg()[0]
    result = function(*args)
    return result | {"load_avg_1m": [round(start, 2), round(os.getloadavg()[0], 2)]}


def _in_child(function: Any, *args: Any) -> Any:
    """``function(*args)`` in a fresh spawned process: its own memory peak, threads and imports."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_quiet_stdout, function, *args).result()


def bench_train(
    *,
    model: str = "default",
    tasks: int = 2,
    group: int = 4,
    max_turns: int = 2,
    max_new_tokens: int = 32,
    iterations: int = 2,
    warmup: int = 1,
    lr: float = 1e-6,
    threads: int = 2,
    seed: int = 0,
    checkpointing: bool = True,
    update_tokens_per_batch: int = TrainConfig.update_tokens_per_batch,
    backend: str = TrainConfig.backend,
    vllm_dtype: str = TrainConfig.vllm_dtype,
    shared_prefix: bool = TrainConfig.update_shared_prefix,
) -> dict[str, Any]:
    """Run our trainer, then TRL's GRPO, on the same solver tasks; return the figures.

    Args:
        model: Policy: 'default' (SmolLM2-135M-Instruct), a hub id or a local folder.
        tasks: Solver tasks per iteration.
        group: Attempts per task (G).
        max_turns: Turn limit of an episode.
        max_new_tokens: Tokens per turn at most (ours); TRL's budget is ``max_turns`` times this per episode.
        iterations: Timed iterations per side.
        warmup: Untimed iterations first (model kernels, corpus index, first allocations).
        lr: Learning rate of both optimizers.
        threads: Torch CPU threads of each side.
        seed: Seed of task draws, sampling and updates.
        checkpointing: Recompute activations in the backward pass on both sides (ours' default and TRL's).
        update_tokens_per_batch: Ours: tokens per forward pass of the update (1: one episode per pass).
        backend: Ours: what generates, ``vllm`` (training's default: vLLM in process, weights pushed after every
            update; needs the vllm extra) or ``hf`` (the trained model itself, through the plain reference).
        vllm_dtype: Ours with ``vllm``: the engine's weights (``bfloat16`` or ``float32``).
        shared_prefix: Ours: a group's shared prompt once per row of the update (``update_shared_prefix``).
    """
    try:
        import trl  # noqa: F401
    except ImportError:
        raise SparringError(
            "TRL is not installed; install the training extras: pip install 'sparring[train]'."
        ) from None
    if min(tasks, group, max_turns, max_new_tokens, iterations, threads, update_tokens_per_batch) < 1 or warmup < 0:
        raise SparringError(
            "tasks, group, max-turns, max-new-tokens, iterations, threads and batch-tokens must be at least 1."
        )
    if group < 2:
        raise SparringError("--group must be at least 2: GRPO compares the attempts at one task.")
    if backend not in ("hf", "vllm") or vllm_dtype not in ("bfloat16", "float32"):
        raise SparringError(
            f"--backend must be hf or vllm (not {backend!r}) and --vllm-dtype bfloat16 or float32 (not {vllm_dtype!r})."
        )
    settings = {
        "model": model,
        "tasks": tasks,
        "group": group,
        "max_turns": max_turns,
        "max_new_tokens": max_new_tokens,
        "iterations": iterations,
        "warmup": warmup,
        "lr": lr,
        "threads": threads,
        "seed": seed,
        "checkpointing": checkpointing,
        "update_tokens_per_batch": update_tokens_per_batch,
        "backend": backend,
        "vllm_dtype": vllm_dtype,
        "shared_prefix": shared_prefix,
    }
    machine = bench_machine()
    ours = _in_child(_run_ours, settings)
    trl_run = _in_child(_run_trl, settings, ours["tasks"])
    sides = {"ours": _side_figures(ours["iterations"], warmup), "trl": _side_figures(trl_run["iterations"], warmup)}
    peaks = {"ours": ours["peak_rss_gib"], "trl": trl_run["peak_rss_gib"]}

    def both(key: str, digits: int = 2) -> dict[str, float]:
        return {side: round(float(figures[key]), digits) for side, figures in sides.items()}

    sync = sides["ours"]["weight_sync_seconds"]
    return {
        "bench": "train",
        "env": ENV_ID,
        "model": model,
        "backend": backend,
        "device": "cpu",
        "torch_threads": threads,
        **machine,
        "load_avg_1m_end": round(os.getloadavg()[0], 2),
        "compared": {
            "episodes_per_iteration": tasks * group,
            "tasks_per_iteration": tasks,
            "group_size": group,
            "max_turns": max_turns,
            "max_new_tokens_per_turn": max_new_tokens,
            "trl_max_completion_length": max_turns * max_new_tokens,
            "trl_max_tool_calling_iterations": max_turns - 1,
            "timed_iterations": iterations,
            "warmup_iterations": warmup,
            "same_tasks": True,
            "activation_checkpointing": checkpointing,
            "ours_update_tokens_per_batch": update_tokens_per_batch,
            "ours_update_shared_prefix": shared_prefix,
            "ours_generation": f"vllm in process, {vllm_dtype}" if backend == "vllm" else "hf, the trained model",
            "objective": "PPO-clip 0.2/0.28, token-level mean, group std scaling, no KL, 1 step per iteration",
            "lr": lr,
        },
        "seconds_per_iteration": both("seconds"),
        "ratio_vs_trl": round(sides["ours"]["seconds"] / sides["trl"]["seconds"], 3),
        # ours: the weight push after each update (vllm: into the engine; hf: the generator's caches dropped)
        "weight_sync_seconds": round(sync, 3),
        "weight_sync_share": round(sync / sides["ours"]["seconds"], 4),
        "generation_seconds_per_iteration": both("generation_seconds"),
        "training_seconds_per_iteration": both("training_seconds"),
        "generation_tokens_per_s": both("generation_tokens_per_s"),
        "training_tokens_per_s": both("training_tokens_per_s"),
        "generated_tokens_per_iteration": both("generated_tokens", 1),
        "trained_tokens_per_iteration": both("trained_tokens", 1),
        "turns_per_iteration": both("turns", 1),
        "tool_calls_per_iteration": both("tool_calls", 1),
        "reward_mean": both("reward_mean", 3),
        "iteration_seconds": {side: figures["iteration_seconds"] for side, figures in sides.items()},
        "peak_rss_gib": {side: round(peak, 2) for side, peak in peaks.items()},
        "load_avg_1m_start_end": {"ours": ours["load_avg_1m"], "trl": trl_run["load_avg_1m"]},
    }


def bench_command(
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    model: str = typer.Option("default", help="Hub id or local path of the policy."),
    tasks: int = typer.Option(2, help="Solver tasks per iteration."),
    group: int = typer.Option(4, help="Attempts per task (G)."),
    max_turns: int = typer.Option(2, help="Turn limit per episode."),
    max_new_tokens: int = typer.Option(32, help="Tokens per turn at most (TRL: max_turns times this per episode)."),
    iterations: int = typer.Option(2, help="Timed iterations per side."),
    warmup: int = typer.Option(1, help="Untimed iterations before them."),
    threads: int = typer.Option(2, help="Torch CPU threads of each side."),
    seed: int = typer.Option(0, help="Seed of task draws, sampling and updates."),
    checkpointing: bool = typer.Option(
        True, "--checkpointing/--no-checkpointing", help="Recompute activations in the backward pass (both sides)."
    ),
    update_tokens_per_batch: int = typer.Option(
        TrainConfig.update_tokens_per_batch,
        "--batch-tokens",
        help="Ours: tokens per forward pass of the update, the config's update_tokens_per_batch (1: one episode "
        "per pass, as before micro-batching).",
    ),
    backend: str = typer.Option(
        TrainConfig.backend, help="Ours: generate with vllm (training's default; weights pushed) or hf (the model)."
    ),
    vllm_dtype: str = typer.Option(TrainConfig.vllm_dtype, help="Ours with --backend vllm: the engine's weights."),
    shared_prefix: bool = typer.Option(
        TrainConfig.update_shared_prefix,
        "--shared-prefix/--no-shared-prefix",
        help="Ours: a group's shared prompt once per row of the update (the config's update_shared_prefix).",
    ),
) -> None:
    """Seconds per iteration of our trainer and of TRL's GRPO on the same solver env, model and budget."""

    result = bench_train(
        model=model,
        tasks=tasks,
        group=group,
        max_turns=max_turns,
        max_new_tokens=max_new_tokens,
        iterations=iterations,
        warmup=warmup,
        threads=threads,
        seed=seed,
        checkpointing=checkpointing,
        update_tokens_per_batch=update_tokens_per_batch,
        backend=backend,
        vllm_dtype=vllm_dtype,
        shared_prefix=shared_prefix,
    )
    print_figures(result, as_json)
