"""Held-out evaluation during a run: the current policy on tasks it never trains on, as curves.

With ``eval_every=N`` the run evaluates its policy after the warm start (step 0, the baseline) and
after every N-th self-play iteration, through ``sparring eval``'s own code
(:mod:`sparring.agents.evaluation`), greedy, on the first ``eval_limit`` instances of each game of
``eval_games``:

* ``search``: the corpus's held-out questions (exact match and F1, ``sparring eval search``);
* ``swe``: bugs of the held-out repositories (solve rate, ``sparring eval swe``; their images
  must be built: ``sparring setup --for eval``).

Turn and token limits are the run's own (``search_max_turns``/``swe_max_turns``,
``max_new_tokens``). Each evaluation's report lands in ``OUT/evals/GAME-step-NNNNNN/`` (report.md,
report.json, records.jsonl) and its headline figures are logged as ``eval/GAME/NAME`` with their
95% bootstrap interval as ``NAME_ci_low``/``NAME_ci_high`` (``eval/search/em``,
``eval/swe/solve_rate``, ...), so the metrics file, TensorBoard, the plot and ``summary.md`` show
the held-out curve beside the training curves. Only the main process evaluates; the other ranks
wait for it at the next metrics reduction.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from sparring.training.config import TrainConfig

__all__ = ["due", "eval_config", "evaluate", "preflight"]


def due(config: TrainConfig, step: int) -> bool:
    """Whether the run evaluates after ``step`` (0: after the warm start; then every ``eval_every``-th)."""
    return config.eval_every > 0 and bool(config.eval_games) and step % config.eval_every == 0


def eval_config(config: TrainConfig, game: str, step: int) -> Any:
    """The evaluation config of ``game`` at ``step``: held-out split, the run's limits, its folder."""
    from sparring.agents.evaluation import SearchEvalConfig, SWEEvalConfig

    common: dict[str, Any] = dict(
        model=f"{config.model}@step-{step}",
        split="heldout",
        max_new_tokens=config.max_new_tokens,
        concurrency=config.concurrency,
        max_seconds=config.episode_seconds,
        out=str(Path(config.out) / "evals" / f"{game}-step-{step:06d}"),
        plots=False,  # the run's own plot draws the curve; a report's panels would cost seconds per step
    )
    if game == "search":
        return SearchEvalConfig(**common, max_turns=config.search_max_turns, limit=config.eval_limit)
    return SWEEvalConfig(**common, max_turns=config.swe_max_turns, n_bugs=config.eval_limit, seed=config.seed)


def preflight(config: TrainConfig) -> None:
    """Refuse, before the model loads, an evaluation that cannot run (no held-out questions, no images).

    The SWE instance set is built here (its bugs generated on first use), not in the first evaluation.
    """
    if config.eval_every <= 0:
        return
    from sparring.agents.evaluation.search import search_instances
    from sparring.agents.evaluation.swe import instance_tasks

    for game in config.eval_games:
        if game == "search":
            search_instances(eval_config(config, game, 0))
        else:
            instance_tasks(eval_config(config, game, 0))


def _figures(game: str, report: dict[str, Any]) -> dict[str, float]:
    """A report's numeric headline figures as ``eval/GAME/NAME`` (intervals as ``_ci_low``/``_ci_high``)."""
    from sparring.agents.evaluation.reports import headline

    values: dict[str, float] = {}
    for name, value in headline(report).items():
        if name.endswith("_ci") and isinstance(value, list) and None not in value:
            values[f"eval/{game}/{name}_low"], values[f"eval/{game}/{name}_high"] = map(float, value)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            values[f"eval/{game}/{name}"] = float(value)
    return values


def evaluate(policy: Any, config: TrainConfig, step: int) -> dict[str, float]:
    """Evaluate ``policy`` (the trainer's generator) on each game of ``eval_games``; the figures to log.

    A folder left by an earlier process at this step (a resumed run plays the step again, with
    other weights) is removed first, so its records are not taken for this policy's.
    """
    from sparring.agents.evaluation import evaluate_search, evaluate_swe

    values: dict[str, float] = {}
    for game in config.eval_games:
        t0 = time.perf_counter()
        settings = eval_config(config, game, step)
        shutil.rmtree(settings.out, ignore_errors=True)
        report = (evaluate_search if game == "search" else evaluate_swe)(policy, settings)
        values |= _figures(game, report)
        values[f"eval/{game}/wall_seconds"] = time.perf_counter() - t0
    return values
