"""``sparring train``: warm start, then self-play iterations, with checkpoints, metrics and a summary.

The loop, per iteration: for each game, play (:func:`~sparring.training.game.play_iteration`),
write a few of its episodes to ``episodes.jsonl`` (:mod:`~sparring.training.samples`), update the
policy on that game's rollouts (:meth:`~sparring.training.trainer.Trainer.reinforce`), log; every
``eval_every`` iterations evaluate on held-out tasks (:mod:`~sparring.training.heldout`); then save
a checkpoint every ``checkpoint_every`` iterations. ``resume=True`` continues from the run folder's
latest checkpoint, so a crash loses at most the iteration in flight. At the end the summary table
is printed and saved (``summary.md``, ``summary.json``) with the plot (``summary.png``).
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from sparring import SparringError
from sparring.containers.engines import check_engines, use_docker_hosts
from sparring.training import heldout
from sparring.training.checkpoint import (
    latest_checkpoint,
    load_checkpoint,
    load_weights,
    save_checkpoint,
    start_checkpoint,
)
from sparring.training.config import TrainConfig
from sparring.training.demos import demonstrations
from sparring.training.game import GAMES
from sparring.training.memory import limit_arenas, peak_rss_gib, release
from sparring.training.metrics import MetricsLog, plot, read_log, summary_table, write_summary
from sparring.training.samples import EpisodeSampler
from sparring.training.trainer import Trainer, UpdateStats, check_launcher, training_device

__all__ = ["iteration_speeds", "run_training"]


def _update_metrics(prefix: str, stats: UpdateStats) -> dict[str, float]:
    values = {
        f"{prefix}/loss": stats.loss,
        f"{prefix}/tokens": stats.tokens,
        f"{prefix}/sequences": stats.sequences,
        f"{prefix}/seconds": stats.seconds,
        f"{prefix}/dropped_zero_variance_groups": stats.dropped_zero_variance,
    }
    values |= {f"{prefix}/{k}": v for k, v in (stats.extra or {}).items()}
    if stats.seconds:
        values["speed/train_tokens_per_s"] = stats.tokens / stats.seconds
    return values


def iteration_speeds(generated: float, play_seconds: float, trained: float, update_seconds: float) -> dict[str, float]:
    """An iteration's token rates over all its games: generated per second of play, trained per second of update.

    An iteration that trained on nothing (every group dropped) has no training rate, rather than a rate of 0.

    Example:
        >>> iteration_speeds(generated=400, play_seconds=10, trained=0, update_seconds=2)
        {'speed/generate_tokens_per_s': 40.0}
    """
    speeds = {"speed/generate_tokens_per_s": generated / play_seconds} if play_seconds > 0 else {}
    if trained > 0 and update_seconds > 0:
        speeds["speed/train_tokens_per_s"] = trained / update_seconds
    return speeds


def warm_start(trainer: Trainer, console: Console) -> dict[str, float]:
    """Supervised training on the scripted demonstrators' successful episodes (once per run); its metrics."""
    cfg = trainer.config
    t0 = time.perf_counter()
    demos, stats = demonstrations(cfg, trainer.generator, trainer.rng)
    trainer.generation_done()
    rates = ", ".join(f"{k} {stats.kept[k]}/{n}" for k, n in stats.played.items())
    console.print(f"warm start: {len(demos)} demonstrations kept ({rates}) in {time.perf_counter() - t0:.0f} s")
    for role, why in stats.failed.items():
        if why:
            common = "; ".join(f"{reason} x{n}" for reason, n in sorted(why.items(), key=lambda kv: -kv[1])[:3])
            console.print(f"  {role} not kept: {common}")
    values: dict[str, float] = {f"warm_start/kept/{k}": v for k, v in stats.kept.items()}
    values |= {f"warm_start/success_rate/{k}": v for k, v in stats.success_rate().items()}
    # Every rank trains when any kept a demonstration: supervised() meets the other ranks at each step.
    if trainer.reduce({"demos": float(len(demos))})["demos"] > 0:
        update = trainer.supervised(demos, cfg.warm_start_epochs, cfg.warm_start_lr)
        values |= _update_metrics("warm_start", update)
        console.print(f"warm start: {update.tokens} action tokens, final NLL {update.loss:.3f}, {update.seconds:.0f} s")
    else:
        console.print("[yellow]warm start: no scripted episode succeeded; self-play starts from the model as it is[/]")
    trainer.warm_started = True
    return trainer.reduce(values) | {"memory/peak_rss_gib": peak_rss_gib()}


def held_out(trainer: Trainer, step: int, console: Console) -> dict[str, float]:
    """The held-out evaluation's figures at ``step`` when one is due there (on the main process only)."""
    if not heldout.due(trainer.config, step):
        return {}
    if not trainer.accelerator.is_main_process:
        trainer.generation_done()  # an engine this rank runs with the main process's serves its evaluation
        return {}
    t0 = time.perf_counter()
    values = heldout.evaluate(trainer.generator, trainer.config, step)
    trainer.generation_done()
    scores = [
        f"{key} {value:.3f} [{values[key + '_ci_low']:.3f}, {values[key + '_ci_high']:.3f}]"
        for key, value in values.items()
        if f"{key}_ci_low" in values and key.endswith(("/em", "/solve_rate"))
    ]
    console.print(f"held-out evaluation at step {step}: {', '.join(scores)} ({time.perf_counter() - t0:.0f} s)")
    return values


def out_of_time(trainer: Trainer) -> bool:
    """Whether the next iteration, as long as the longest so far, would end past ``time_limit_minutes``.

    The same answer on every rank: it is taken from the ranks' mean clock.
    """
    limit = trainer.config.time_limit_minutes * 60
    if not limit:
        return False
    clock = trainer.reduce({"elapsed": trainer.elapsed(), "longest": trainer.longest_iteration})
    return clock["elapsed"] + clock["longest"] > limit


def run_training(config: TrainConfig, resume: bool = False, trainer: Trainer | None = None) -> dict[str, Any]:
    """Run ``config`` to the end (or on from its latest checkpoint); returns the summary.

    Args:
        config: The run's settings.
        resume: Continue from the latest checkpoint in ``config.out`` (an error if there is none).
        trainer: A trainer built by the caller (tests pass one with a tiny model).
    """
    check_launcher(config, training_device(config.device))  # before anything, as the Trainer does
    limit_arenas()
    console = Console(stderr=True)
    out = Path(config.out)
    checkpoint = latest_checkpoint(out) if resume else None
    if resume and checkpoint is None:
        raise SparringError(f"no checkpoint to resume in {out / 'checkpoints'}; run without --resume to start.")
    if not resume and latest_checkpoint(out) is not None:
        raise SparringError(f"{out} already holds a run; pass --resume to continue it or out=NEW_FOLDER to start anew.")
    use_docker_hosts(config.docker_hosts)  # every sandbox of the run: its games, demonstrations and evaluations
    if config.docker_hosts and "swe" in {*config.games, *config.eval_games}:
        check_engines()  # an engine that does not answer stops the run here, in one sentence
    for name in config.games:  # what the envs need, before minutes of loading and playing
        GAMES[name].preflight(config)
    heldout.preflight(config)
    t0 = time.perf_counter()
    trainer = trainer or Trainer(config)
    main = trainer.accelerator.is_main_process
    metrics = MetricsLog(out, enabled=main)
    samples = EpisodeSampler(out, config.log_episodes, config.seed, metrics, trainer.tokenizer, enabled=main)
    if checkpoint is not None:
        load_checkpoint(trainer, checkpoint)
        samples.resume(trainer.iteration)
        console.print(f"resumed from {checkpoint} (iteration {trainer.iteration})")
    console.print(
        f"policy: {config.model}, games: {', '.join(config.games)}, loaded in {time.perf_counter() - t0:.0f} s"
    )
    warming = config.warm_start and not trainer.warm_started
    start = warm_start(trainer, console) if warming else {}
    release()
    if checkpoint is None:  # step 0: the baseline evaluation, in the warm start's row
        start |= held_out(trainer, 0, console)
    if start:
        metrics.log(0, start)
    if warming:
        save_checkpoint(trainer)
        release()
    trainer.warm_started = True
    if config.kl_coef > 0 and trainer.iteration == 0 and start_checkpoint(out) is None:
        save_checkpoint(trainer)  # the policy at the start of self-play: the KL reference of a resumed run too
    reference = start_checkpoint(out)
    trainer.freeze_reference(None if reference is None else lambda model: load_weights(model, reference))
    progress = Progress(
        TextColumn("[bold]iteration"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console,
        disable=not main,
    )  # fmt: skip
    with progress:
        bar = progress.add_task("train", total=config.iterations, completed=trainer.iteration)
        saved, stopped = trainer.iteration, False
        while trainer.iteration < config.iterations:
            if out_of_time(trainer):
                console.print(
                    f"time limit: {trainer.elapsed() / 60:.1f} of {config.time_limit_minutes:g} min used and an "
                    f"iteration takes up to {trainer.longest_iteration / 60:.1f} min; stopping after iteration "
                    f"{trainer.iteration} of {config.iterations}."
                )
                stopped = True
                break
            t_iteration = time.perf_counter()
            values: dict[str, float] = {}
            totals = dict(generated=0.0, play_seconds=0.0, trained=0.0, update_seconds=0.0)
            for game in config.games:
                t_play = time.perf_counter()
                rollouts, stats = trainer.play(game)
                # async_rollouts: played during the last update, in the time it reports
                play_seconds = stats.pop("seconds_play", time.perf_counter() - t_play)
                values |= {f"{game}/{k}": v for k, v in stats.items()}
                values[f"{game}/seconds_play"] = play_seconds
                generated = sum(sum(r.episode.action_mask) for r in rollouts)
                values[f"{game}/generated_tokens"] = generated
                samples.add(rollouts, trainer.iteration + 1, trainer)
                release()  # the finished episodes' caches
                update = trainer.reinforce(rollouts)
                del rollouts
                release()
                values |= {f"{game}/{k}": v for k, v in _update_metrics("update", update).items()}
                totals["generated"] += generated
                totals["play_seconds"] += play_seconds
                totals["trained"] += update.tokens
                totals["update_seconds"] += update.seconds
            values |= iteration_speeds(**totals)  # over every game: one game's rate alone would hide the other's
            values["memory/peak_rss_gib"] = peak_rss_gib()
            values["weights_version"] = trainer.generator.weights_version
            trainer.iteration += 1
            values["seconds_iteration"] = seconds = time.perf_counter() - t_iteration
            trainer.longest_iteration = max(trainer.longest_iteration, seconds)
            evaluated: dict[str, float] = {}
            if heldout.due(config, trainer.iteration):  # after the iteration's time: the evaluation is optional
                progress.stop()  # the evaluation draws its own progress bar
                evaluated = held_out(trainer, trainer.iteration, console)
                progress.start()
            metrics.log(trainer.iteration, trainer.reduce(values) | evaluated)
            progress.update(bar, completed=trainer.iteration)
            if trainer.iteration % max(1, config.checkpoint_every) == 0 or trainer.iteration == config.iterations:
                save_checkpoint(trainer)
                saved = trainer.iteration
                release()
    if saved != trainer.iteration:  # stopped by the time limit between checkpoints
        save_checkpoint(trainer)
    if trainer.pipeline is not None:
        trainer.pipeline.close()
    metrics.close()
    rows = read_log(out)
    summary: dict[str, Any] = {"iterations": trainer.iteration, "seconds": time.perf_counter() - t0, "out": str(out)}
    summary["stopped_by_time_limit"] = stopped
    if main:
        table = summary_table(rows)
        Console(stderr=True, width=120).print(table)
        picture = plot(rows, out / "summary.png")
        summary["plot"] = str(picture) if picture else None
        latest = latest_checkpoint(out)
        summary["checkpoint"] = str(latest / "model") if latest else None
        wall = trainer.elapsed()
        facts = {"model": config.model, "games": ",".join(config.games), "iterations": trainer.iteration,
                 "of_iterations": config.iterations, "stopped_by_time_limit": stopped,
                 "wall_clock": f"{int(wall // 3600)}:{int(wall % 3600 // 60):02d}:{int(wall % 60):02d}",
                 "wall_clock_seconds": round(wall, 1), "this_process_seconds": round(summary["seconds"], 1),
                 "finished_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                 "episodes": str(samples.path) if samples.path.is_file() else None,
                 "plot": summary["plot"], "checkpoint": summary["checkpoint"]}  # fmt: skip
        written = write_summary(out, rows, facts)
        summary["summary"] = [str(p) for p in written]
        console.print(
            f"done in {summary['seconds']:.0f} s; summary: {written[0]}; plot: {summary['plot']}; "
            f"model: {summary['checkpoint']}"
        )
    return summary
