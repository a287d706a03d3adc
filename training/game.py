"""The self-play game: one iteration of proposers, validation, solver groups and rewards, per domain.

Per game and iteration (docs/training.md, "Formulas", has the rewards and advantages):

1. proposer episodes (``SearchPropose-v0`` / ``SWEInject-v0``) — the env validates each proposal;
2. the solver tasks: every valid proposal's task, holes left by invalid ones filled from a replay
   buffer of earlier valid tasks (cleared every ``replay_clear_every`` iterations), plus tasks drawn
   from the solver env's own source (training questions, the procedural bug store);
3. G solver episodes per task (one group per task);
4. judges (``judge_episodes`` > 0): a sample of the finished solver episodes, both outcomes alike, each
   shown to the judge env of its game without its grade (:mod:`sparring.training.judging`);
5. rewards, assigned here once the results are in — never patched into the finished episodes: a
   solver's is its env outcome reward; a proposer's is the formula of its task's solve rate in the
   game's reward object, the one its envs were given (search: ``1 − s`` for a valid question,
   ``search_proposer_invalid`` else; SWE: the injector formula of :mod:`sparring.envs.swe.rewards`).
   A runner truncation scores the env's turn-limit reward of its role, or is masked
   (:mod:`sparring.training.outcomes`). A judge's is its verdict's class-balanced agreement with the
   real outcome over the iteration's judged episodes; its assessments become the judged solver's turn
   rewards (``judge_turn_weight``), and the search game can add its gold-retrieval turn reward
   (``search_gold_turn_reward``). Turn rewards shape credit only: no judge decides an outcome reward.

Roles are data (:class:`Role`): each says which env it plays, how its episodes are planned from
what the iteration has so far, how their credit groups are formed and how their rewards follow.
The judges of one game and iteration are one credit group: the batch their rewards are balanced over.

Failure semantics: every episode ends with a reason (:func:`end_reason`). An episode that ended in
an infrastructure error is played again with a fresh env up to ``retries`` times; a group that
still has a failed episode is dropped whole and counted, never trained on as a biased partial
group. A task's solve rate counts only attempts that ended by the policy's own doing (a
submission, the env's turn limit, a scored runner truncation): a dropped group has none, and its
proposal gets no reward at all — it is masked out of the loss, counted as
``proposer/masked_dropped_group`` — so a proposer is never paid for its solvers' crashes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sparring.agents.generation import SamplingParams
from sparring.agents.runner import EpisodeRunner, EpisodeSpec, RunnerConfig
from sparring.envs.core import Episode, reason_name
from sparring.envs.search.judge_env import gold_turns, search_judge_task
from sparring.envs.swe.judge_env import swe_judge_task
from sparring.training.config import TrainConfig, reward_settings
from sparring.training.judging import after_judges, gold_turn_rewards, plan_judges
from sparring.training.order2 import EnvLog, higher_order_tasks
from sparring.training.outcomes import (
    END_REASONS,
    MASKED_DROPPED_GROUP,
    MASKED_UNSCORED_GROUP,
    OUTCOME,
    SCORINGS,
    Rollout,
    cut_by_runner,
    cut_short,
    end_reason,
    is_masked,
    truncation_score,
)
from sparring.training.replay import ReplayBuffer
from sparring.training.roles import Game, IterationState, Role, by_group
from sparring.training.search_game import search_preflight, search_proposer_kwargs, search_solver_task

__all__ = ["GAMES", "Game", "IterationResult", "ReplayBuffer", "Role", "Rollout", "end_reason", "play_iteration",
           "solved"]  # fmt: skip


# ---------------------------------------------------------------------------------- the roles


def _make(env_id: str, state: IterationState, kwargs: dict[str, Any]) -> Callable[[], Any]:
    """An env factory with the game's turn limit and reward settings."""
    import gymnasium as gym

    max_turns, rewards = state.game.max_turns(state.config), state.rewards
    return lambda: gym.make(env_id, max_turns=max_turns, rewards=rewards, **kwargs)


def _plan_proposers(state: IterationState) -> list[tuple[EpisodeSpec, str]]:
    game, config = state.game, state.config
    if not game.plays_proposer(config):
        return []
    make = _make(game.proposer_env, state, state.proposer_kwargs)
    seeds = state.rng.integers(0, 2**31 - 1, size=config.proposals)
    group = f"it{state.iteration}"  # proposals share no seed: the batch of this domain and role
    return [(EpisodeSpec(make, seed=int(s), env_id=game.proposer_env, group_id=group), group) for s in seeds]


def _after_proposers(state: IterationState) -> None:
    game, config = state.game, state.config
    valid = [t for ep in state.episodes.get("proposer", []) if ep.error is None and (t := game.solver_task(ep.outcome))]
    tasks = [dict(t) for t in valid]
    for task in tasks:
        state.task_source[str(task["id"])] = "proposed"
    holes = config.proposals - len(tasks) if game.plays_proposer(config) else 0
    for task in state.replay.sample(holes, state.rng):
        state.task_source.setdefault(str(task["id"]), "replay")
        tasks.append(task)
    state.replay.add([dict(t) for t in valid])
    for task in state.replay.take_higher_order():  # validated from the last iteration's failed attempts
        state.task_source[str(task["id"])] = "higher_order"
        tasks.append(task)
    state.tasks = tasks


def _tracked(state: IterationState, make: Callable[[], Any]) -> Callable[[], Any]:
    """One episode's env factory, recorded in the iteration's env log when it keeps one."""
    return state.env_log.track(make) if state.env_log is not None else make


def _plan_solvers(state: IterationState) -> list[tuple[EpisodeSpec, str]]:
    game, config = state.game, state.config
    make = _make(game.solver_env, state, {})
    size = game.group_size(config)
    specs = []
    for task in state.tasks:
        group = f"it{state.iteration}:{task['id']}"
        specs += [
            (EpisodeSpec(_tracked(state, make), seed=0, options={"task": task}, env_id=game.solver_env, group_id=group),
             group)
            for _ in range(size)
        ]  # fmt: skip
    if game.draws_tasks(config):
        specs += _drawn_groups(state, config.drawn_tasks, f"it{state.iteration}")
    return specs


def _drawn_groups(state: IterationState, n: int, prefix: str) -> list[tuple[EpisodeSpec, str]]:
    """G attempts at each of ``n`` tasks drawn from the solver env's own source."""
    game = state.game
    make = _make(game.solver_env, state, {})
    specs = []
    # The same seed draws the same task in every attempt; the runner samples each attempt apart.
    for seed in state.rng.integers(0, 2**31 - 1, size=n):
        group = f"{prefix}:drawn{int(seed)}"
        specs += [
            (EpisodeSpec(_tracked(state, make), seed=int(seed), env_id=game.solver_env, group_id=group), group)
            for _ in range(game.group_size(state.config))
        ]
    return specs


def spread_groups(state: IterationState) -> int:
    """Solver groups played so far whose scored rewards differ (and that no error cut short): the ones that teach."""
    spread = 0
    for eps in by_group(state, "solver").values():
        if not cut_short(eps):
            rewards = {reward for reward, how in (score(SOLVER, ep, state) for ep in eps) if not is_masked(how)}
            spread += len(rewards) > 1
    return spread


def _top_up_solvers(state: IterationState, round_: int) -> list[tuple[EpisodeSpec, str]]:
    """Dynamic sampling (DAPO): more drawn tasks while too few solver groups have a spread.

    A group whose attempts all score the same has zero advantage everywhere and is dropped from the
    update; drawing ``drawn_tasks`` more tasks, up to ``max_top_ups`` rounds, keeps the update fed
    when the policy's attempts mostly agree.
    """
    config = state.config
    if round_ >= config.max_top_ups or not state.game.draws_tasks(config):
        return []
    if spread_groups(state) >= config.min_spread_groups:
        return []
    return _drawn_groups(state, config.drawn_tasks, f"it{state.iteration}:top{round_ + 1}")


def _after_solvers(state: IterationState) -> None:
    """Each task's solve rate over the attempts that ended by the policy's own doing.

    A group an error cut short is dropped and yields no rate (an errored attempt is not a failed one:
    counting it unsolved would pay a proposer for crashing its solvers); masked truncations are not
    counted either, and a group with nothing left has no rate.
    """
    for group, eps in by_group(state, "solver").items():
        task_id = str(eps[0].task.get("id", group))
        if cut_short(eps):
            state.unrated[task_id] = MASKED_DROPPED_GROUP
            continue
        scored = [ep for ep in eps if not is_masked(score(SOLVER, ep, state)[1])]
        if not scored:
            state.unrated[task_id] = MASKED_UNSCORED_GROUP
            continue
        solves = [not cut_by_runner(ep) and state.game.solved(ep.outcome) for ep in scored]
        state.solve_rate[task_id] = sum(solves) / len(solves)
    gold_turn_rewards(state)


def _proposer_reward(ep: Episode, state: IterationState) -> tuple[float, str]:
    task = state.game.solver_task(ep.outcome) if ep.error is None else None
    if task is None:
        return state.rewards.proposer(False, None), OUTCOME
    rate = state.solve_rate.get(str(task["id"]))
    if rate is None:  # no attempt of its solvers counts: no reward to learn from, neither 1 nor 0
        return float("nan"), state.unrated.get(str(task["id"]), MASKED_DROPPED_GROUP)
    return state.rewards.proposer(True, rate), OUTCOME


def _solver_reward(ep: Episode, state: IterationState) -> tuple[float, str]:
    return float(ep.outcome.get("reward", ep.reward)), OUTCOME


def score(role: Role, ep: Episode, state: IterationState) -> tuple[float, str]:
    """An episode's outcome reward and how it came: the env's, or a runner truncation's (one rule for every role)."""
    if cut_by_runner(ep) and role.scores_truncation:
        return truncation_score(role.name, state.rewards, state.config.overlong)
    return role.reward(ep, state)


PROPOSER = Role("proposer", lambda game: game.proposer_env, _plan_proposers, _proposer_reward, _after_proposers)
SOLVER = Role("solver", lambda game: game.solver_env, _plan_solvers, _solver_reward, _after_solvers, _top_up_solvers)
JUDGE = Role(
    "judge", lambda game: game.judge_env, plan_judges, lambda ep, state: state.judge_scores[id(ep)], after_judges,
    plays=lambda config: config.judge_episodes > 0, scores_truncation=False,
)  # fmt: skip
ROLES: tuple[Role, ...] = (PROPOSER, SOLVER, JUDGE)


# ---------------------------------------------------------------------------------- the games


GAMES: dict[str, Game] = {
    "search": Game(
        "search",
        "sparring/SearchPropose-v0",
        "sparring/SearchAnswer-v0",
        group_size=lambda config: config.search_group,
        max_turns=lambda config: config.search_max_turns,
        solver_task=search_solver_task,
        solved=lambda outcome: float(outcome.get("em", 0.0)) >= 1.0,
        proposer_kwargs=search_proposer_kwargs,
        preflight=search_preflight,
        judge_env="sparring/SearchJudge-v0",
        judge_task=search_judge_task,
        gold_turns=lambda ep: gold_turns(list(ep.task.get("answers") or []), ep.turns),
    ),
    "swe": Game(
        "swe",
        "sparring/SWEInject-v0",
        "sparring/SWERepair-v0",
        group_size=lambda config: config.swe_group,
        max_turns=lambda config: config.swe_max_turns,
        solver_task=lambda outcome: outcome.get("solver_task"),
        solved=lambda outcome: bool(outcome.get("solved")),
        plays_proposer=lambda config: config.swe_tasks in ("policy", "mix"),
        draws_tasks=lambda config: config.swe_tasks in ("procedural", "mix"),
        higher_order=higher_order_tasks,
        judge_env="sparring/SWEJudge-v0",
        judge_task=swe_judge_task,
    ),
}


def solved(episode: Episode) -> bool:
    """Whether a solver episode succeeded: the env's verdict (no error, not cut short by the runner)."""
    game = GAMES.get(episode.domain)
    return episode.error is None and not cut_by_runner(episode) and game is not None and game.solved(episode.outcome)


# ------------------------------------------------------------------------------- an iteration


@dataclass
class IterationResult:
    """One game's iteration: its rollouts (rewards assigned) and what to log."""

    domain: str
    rollouts: list[Rollout]
    stats: dict[str, float]


def _play(runner: EpisodeRunner, planned: list[tuple[EpisodeSpec, str]], retries: int) -> list[Episode]:
    """Play the specs; an infrastructure failure is played again with a fresh env, up to ``retries`` times."""
    episodes = runner.run([spec for spec, _ in planned]) if planned else []
    for _ in range(retries):
        failed = [i for i, ep in enumerate(episodes) if end_reason(ep) == "env_error"]
        if not failed:
            break
        again = runner.run([planned[i][0] for i in failed])
        for i, ep in zip(failed, again, strict=True):
            episodes[i] = ep
    return episodes


def _turn_rewards(ep: Episode, state: IterationState) -> list[float]:
    """Turn rewards without the outcome reward (which the env added to the terminal step), plus the iteration's own
    (a judgement's assessments, the game's turn signal)."""
    rewards = [t.reward for t in ep.turns]
    if rewards and ep.outcome and "reward" in ep.outcome and (ep.terminated or ep.truncated):
        rewards[-1] -= float(ep.outcome["reward"])
    return [a + b for a, b in zip(rewards, state.turn_bonus.get(id(ep), [0.0] * len(rewards)), strict=True)]


def _runner(policy: Any, config: TrainConfig, rng: np.random.Generator) -> EpisodeRunner:
    sampling = SamplingParams(
        temperature=config.temperature,
        top_p=config.top_p,
        max_new_tokens=config.max_new_tokens,
        seed=int(rng.integers(0, 2**31 - 1)),
    )
    return EpisodeRunner(
        policy,
        RunnerConfig(
            concurrency=config.concurrency,
            sampling=sampling,
            max_seconds=config.episode_seconds,
            max_context_tokens=config.max_context_tokens,
            progress=False,
        ),
    )


def _play_roles(state: IterationState, runner: EpisodeRunner) -> dict[str, float]:
    """Play every role in order (with its top-up rounds), each role's bookkeeping once its episodes are in."""
    stats: dict[str, float] = {}
    env_wait = wall = 0.0
    for role in ROLES:
        if not role.plays(state.config):
            continue
        planned = role.plan(state)
        state.episodes[role.name], state.groups[role.name], state.specs[role.name] = [], [], []
        rounds = 0
        while planned:
            played = _play(runner, planned, state.config.retries)
            wall += runner.stats.wall_seconds
            env_wait += runner.stats.env_wait_seconds
            state.episodes[role.name] += played
            state.groups[role.name] += [group for _, group in planned]
            state.specs[role.name] += [spec for spec, _ in planned]
            planned = role.top_up(state, rounds)
            rounds += bool(planned)
        stats[f"{role.name}/top_up_rounds"] = rounds
        role.after(state)
    stats["env_wait_fraction"] = env_wait / wall if wall else 0.0
    return stats


def _rollouts(state: IterationState) -> tuple[list[Rollout], dict[str, float]]:
    """Every role's rollouts, scored, and what to log of them; groups an error cut short are dropped whole."""
    rollouts: list[Rollout] = []
    stats: dict[str, float] = {}
    for role in ROLES:
        if not role.plays(state.config):
            continue
        mine: list[Rollout] = []
        dropped = 0
        for group, eps in by_group(state, role.name).items():
            if cut_short(eps):
                dropped += 1  # a partial group would bias its baseline
                continue
            for ep in eps:
                reward, how = score(role, ep, state)
                key = (state.game.domain, role.name, group)
                mine.append(Rollout(ep, reward, _turn_rewards(ep, state), key, end_reason(ep), how))
        rollouts += mine
        state.dropped[role.name] = dropped
        eps = state.episodes[role.name]
        stats[f"{role.name}/episodes"] = len(eps)
        stats[f"{role.name}/dropped_groups"] = dropped
        for how in SCORINGS[1:]:  # truncations scored or masked, proposals masked: every count, zeros included
            stats[f"{role.name}/{how}"] = sum(r.scoring == how for r in mine)
        if eps:
            scored = [r.reward for r in mine if not r.masked]
            stats[f"{role.name}/reward_mean"] = float(np.mean(scored)) if scored else 0.0
            stats[f"{role.name}/turns_mean"] = float(np.mean([len(ep.turns) for ep in eps]))
            # the input of turn credit (a judge's assessments, the game's turn signal): 0 unless one is configured
            turns = [x for r in mine if not r.masked for x in r.turn_rewards]
            stats[f"{role.name}/turn_reward_mean"] = float(np.mean(turns)) if turns else 0.0
            stats[f"{role.name}/rewarded_turn_share"] = float(np.mean([x != 0 for x in turns])) if turns else 0.0
            for reason in END_REASONS:
                stats[f"{role.name}/end/{reason}"] = sum(end_reason(ep) == reason for ep in eps)
    return rollouts, stats


def _proposal_stats(state: IterationState) -> dict[str, float]:
    """The share of valid proposals and the count of each reason an invalid one gave."""
    proposers = state.episodes["proposer"]
    if not proposers:
        return {}
    valid = [ep for ep in proposers if ep.error is None and state.game.solver_task(ep.outcome)]
    stats = {"proposer/valid_rate": len(valid) / len(proposers)}
    for ep in proposers:
        if ep not in valid:
            for why in ep.outcome.get("reasons") or [ep.outcome.get("status") or end_reason(ep)]:
                name = f"proposer/invalid/{reason_name(why)}"  # one series per kind of reason
                stats[name] = stats.get(name, 0) + 1
    return stats


def _solve_rate_stats(state: IterationState) -> dict[str, float]:
    if not state.solve_rate:
        return {}
    rates = list(state.solve_rate.values())
    stats = {"solver/solve_rate": float(np.mean(rates)), "solver/tasks": len(rates)}
    for lo in (0.0, 0.25, 0.5, 0.75):
        hi = lo + 0.25
        stats[f"solver/solve_rate_hist/{lo:.2f}"] = sum(lo <= r < hi or (hi == 1.0 and r == 1.0) for r in rates)
    return stats


def play_iteration(
    game: Game,
    policy: Any,
    config: TrainConfig,
    iteration: int,
    rng: np.random.Generator,
    replay: ReplayBuffer,
) -> IterationResult:
    """Play one iteration of ``game`` with ``policy``; return its rollouts with rewards and groups."""
    runner = _runner(policy, config, rng)
    state = IterationState(
        game, iteration, config, rng, replay, rewards=reward_settings(config, game.domain),
        proposer_kwargs=game.proposer_kwargs(policy, config),
        env_log=EnvLog() if game.higher_order and config.order2 else None,
    )  # fmt: skip
    stats = _play_roles(state, runner)
    rollouts, scored = _rollouts(state)
    stats |= scored | _proposal_stats(state) | _solve_rate_stats(state) | state.stats
    if game.higher_order is not None:
        stats |= game.higher_order(state)
    stats["tasks/replayed"] = sum(1 for s in state.task_source.values() if s == "replay")
    replay.tick(iteration)
    return IterationResult(game.domain, rollouts, stats)
