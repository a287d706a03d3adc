"""``sparring demo``: the main job until the trainer lands — one round of every available game.

For each game (search, SWE) whose envs can be built here, the policy plays through the runner:

1. proposer episodes (``SearchPropose-v0``: a question for a seed answer, validated by the policy
   itself answering from the evidence; ``SWEInject-v0``: a bug with its artifact);
2. solver episodes on every valid proposed task (``solver_attempts`` each), which give the
   proposers their rewards from the solve rate, plus solver episodes on tasks drawn by the env;
3. a summary table: episodes, rewards per role, valid-task rate with the rejection reasons,
   solve rate. A game whose env cannot be built (no corpus, no bug store, no Docker) is listed
   as skipped with the reason.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from sparring import SparringError
from sparring.agents.episodes import Episode, write_jsonl
from sparring.agents.factory import make_generator
from sparring.agents.generation import SamplingParams
from sparring.agents.runner import EpisodeRunner, EpisodeSpec, RunnerConfig

__all__ = ["DemoConfig", "Game", "GAMES", "run_demo", "summarize"]


@dataclass
class DemoConfig:
    """Settings of the demo (small budgets: it must finish in minutes on two CPU cores)."""

    model: str | None = None
    """Hub id or local path of the policy (None: SmolLM2-135M-Instruct)."""
    backend: str = "hf"
    """Generation backend: hf, http or vllm."""
    base_url: str | None = None
    """Server URL for the http backend."""
    episodes: int = 4
    """Episodes per role and game."""
    max_turns: int = 3
    """Turn limit per episode."""
    max_new_tokens: int = 64
    """Generated tokens per turn at most."""
    concurrency: int = 8
    """Episodes played at once."""
    temperature: float = 0.7
    """Sampling temperature."""
    solver_attempts: int = 2
    """Solver episodes per valid proposed task (its solve rate sets the proposer's reward)."""
    seed: int = 0
    """Seed of task draws and sampling."""
    out: Path | None = None
    """Also write every episode to this JSONL file."""
    threads: int | None = None
    """Torch CPU threads (None: torch's choice)."""


def _search_proposer_kwargs(generator: Any) -> dict[str, Any]:
    from sparring.agents.answering import generator_answer_fn
    from sparring.envs.search.validation import PolicyValidator

    return {"validator": PolicyValidator(generator_answer_fn(generator))}


def _search_solver_task(outcome: dict[str, Any]) -> dict[str, Any] | None:
    if not outcome.get("valid") or not outcome.get("question"):
        return None
    return {
        "id": f"proposed:{outcome['question'][:60]}",
        "question": outcome["question"],
        "answers": [outcome["answer"]],
    }


def _search_proposer_reward(solve_rate: float) -> float:
    from sparring.envs.search.rewards import proposer_reward

    return proposer_reward(solve_rate)


def _swe_proposer_reward(solve_rate: float) -> float:
    """The injector's reward for a valid bug (only valid bugs have solvers and a pending reward)."""
    from sparring.envs.swe.rewards import injector_reward

    return injector_reward(True, solve_rate)


@dataclass(frozen=True)
class Game:
    """A proposer/solver pair of envs and how the demo links them."""

    domain: str
    proposer: str
    solver: str
    proposer_kwargs: Callable[[Any], dict[str, Any]] = lambda generator: {}
    """Extra env kwargs of the proposer, given the generator (e.g. a validator using the policy)."""
    solver_task: Callable[[dict[str, Any]], dict[str, Any] | None] = lambda outcome: outcome.get("solver_task")
    """The solver task a proposer outcome defines (None: not valid)."""
    proposer_reward: Callable[[float], float] = _swe_proposer_reward
    """Proposer reward from the solve rate of its valid task."""


GAMES: list[Game] = [
    Game(
        "search",
        "sparring/SearchPropose-v0",
        "sparring/SearchAnswer-v0",
        _search_proposer_kwargs,
        _search_solver_task,
        _search_proposer_reward,
    ),
    Game("swe", "sparring/SWEInject-v0", "sparring/SWERepair-v0"),
]


@dataclass
class _Row:
    env_id: str
    role: str
    episodes: list[Episode] = field(default_factory=list)
    skipped: str | None = None


def _maker(env_id: str, max_turns: int, kwargs: dict[str, Any]) -> Callable[[], Any]:
    import gymnasium as gym

    return lambda: gym.make(env_id, max_turns=max_turns, **kwargs)


def _probe(make: Callable[[], Any], seed: int) -> str | None:
    """None if the env builds and resets here, else the reason it cannot."""
    try:
        env = make()
    except (SparringError, ImportError, ModuleNotFoundError, OSError) as e:
        return str(e) or type(e).__name__
    try:
        env.reset(seed=seed)
    except (SparringError, OSError) as e:
        return str(e) or type(e).__name__
    finally:
        env.close()
    return None


def _solved(ep: Episode) -> bool:
    return ep.error is None and ep.reward > 0


def play_game(game: Game, generator: Any, config: DemoConfig, console: Console) -> list[_Row]:
    """One round of ``game``: proposers, solvers on their valid tasks, solvers on drawn tasks."""
    rows = [_Row(game.proposer, "proposer"), _Row(game.solver, "solver")]
    sampling = SamplingParams(temperature=config.temperature, max_new_tokens=config.max_new_tokens, seed=config.seed)
    runner = EpisodeRunner(generator, RunnerConfig(concurrency=config.concurrency, sampling=sampling))
    seeds = [config.seed + i for i in range(config.episodes)]

    make_proposer = _maker(game.proposer, config.max_turns, game.proposer_kwargs(generator))
    make_solver = _maker(game.solver, config.max_turns, {})
    why_not = _probe(make_proposer, config.seed)
    if why_not:
        rows[0].skipped = why_not
    else:
        console.print(f"[bold]{game.domain}[/]: {config.episodes} proposer episodes ({game.proposer})")
        rows[0].episodes = runner.run([EpisodeSpec(make_proposer, seed=s, env_id=game.proposer) for s in seeds])

    why_not = _probe(make_solver, config.seed)
    if why_not:
        rows[1].skipped = why_not
        return rows
    proposed = [(ep, game.solver_task(ep.outcome)) for ep in rows[0].episodes if ep.error is None]
    proposed = [(ep, task) for ep, task in proposed if task]
    specs = [
        EpisodeSpec(make_solver, seed=config.seed, options={"task": task}, env_id=game.solver)
        for _, task in proposed
        for _ in range(config.solver_attempts)
    ]
    specs += [EpisodeSpec(make_solver, seed=s, env_id=game.solver) for s in seeds]
    console.print(
        f"[bold]{game.domain}[/]: {len(specs)} solver episodes ({len(proposed)} proposed tasks x "
        f"{config.solver_attempts} + {len(seeds)} drawn)"
    )
    solved = runner.run(specs)
    rows[1].episodes = solved
    for k, (proposer_ep, _) in enumerate(proposed):
        attempts = solved[k * config.solver_attempts : (k + 1) * config.solver_attempts]
        rate = sum(_solved(ep) for ep in attempts) / max(1, len(attempts))
        proposer_ep.outcome["solve_rate"] = rate
        if proposer_ep.outcome.pop("reward_pending", False) and proposer_ep.turns:
            reward = game.proposer_reward(rate)
            proposer_ep.turns[-1].reward += reward
            proposer_ep.reward += reward
    return rows


def summarize(rows: list[_Row]) -> Table:
    """The summary table of a demo round."""
    table = Table(title="sparring demo")
    for col in ("env", "role", "episodes", "failed", "mean reward", "valid tasks", "solve rate", "turns", "notes"):
        table.add_column(col)
    for row in rows:
        if row.skipped is not None:
            table.add_row(
                row.env_id.removeprefix("sparring/"), row.role, "0", "", "", "", "", "", f"skipped: {row.skipped}"
            )
            continue
        eps = row.episodes
        n = len(eps)
        failed = [ep for ep in eps if ep.error]
        mean = sum(ep.reward for ep in eps) / n if n else 0.0
        turns = sum(len(ep.turns) for ep in eps) / n if n else 0.0
        valid, solve, notes = "", "", ""
        if row.role == "proposer":
            ok = sum(bool(ep.outcome.get("valid")) for ep in eps)
            reasons: Counter[str] = Counter()
            for ep in eps:
                if ep.error:
                    reasons[f"error: {ep.error[:60]}"] += 1
                elif not ep.outcome.get("valid"):
                    reasons.update(str(r) for r in ep.outcome.get("reasons") or [ep.outcome.get("status", "invalid")])
            valid = f"{ok}/{n} ({ok / n:.0%})" if n else "-"
            notes = "; ".join(f"{reason} x{count}" for reason, count in reasons.most_common(4))
        else:
            ok = sum(_solved(ep) for ep in eps)
            solve = f"{ok}/{n} ({ok / n:.0%})" if n else "-"
            if failed:
                notes = "; ".join(
                    f"{e} x{c}" for e, c in Counter((ep.error or "")[:60] for ep in failed).most_common(3)
                )
        table.add_row(
            row.env_id.removeprefix("sparring/"),
            row.role,
            str(n),
            str(len(failed)),
            f"{mean:+.3f}",
            valid,
            solve,
            f"{turns:.1f}",
            notes,
        )
    return table


def run_demo(config: DemoConfig, games: list[Game] | None = None) -> list[Episode]:
    """Play every available game once with the policy; print and return everything."""
    console = Console(stderr=True)
    t0 = time.perf_counter()
    options = {"base_url": config.base_url} if config.backend == "http" and config.base_url else {}
    generator = make_generator(config.backend, None if config.model in (None, "default") else config.model, **options)
    console.print(f"policy: {generator.name} ({config.backend}), loaded in {time.perf_counter() - t0:.1f} s")
    rows: list[_Row] = []
    for game in games or GAMES:
        rows.extend(play_game(game, generator, config, console))
    episodes = [ep for row in rows for ep in row.episodes]
    out = Console()
    if not out.is_terminal:  # a pipe or a log file: do not squeeze the table into 80 columns
        out = Console(width=200)
    out.print(summarize(rows))
    tokens = sum(sum(ep.action_mask) for ep in episodes)
    wall = time.perf_counter() - t0
    console.print(f"{len(episodes)} episodes, {tokens} generated tokens, {wall:.0f} s ({tokens / wall:.1f} tokens/s)")
    if config.out is not None:
        console.print(f"episodes written to {write_jsonl(episodes, config.out)}")
    return episodes
