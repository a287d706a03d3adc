"""The self-play game: one iteration of proposers, validation, solver groups and rewards, per domain.

Per game and iteration (docs/training.md, "Formulas", has the rewards and advantages):

1. proposer episodes (``SearchPropose-v0`` / ``SWEInject-v0``) — the env validates each proposal;
2. the solver tasks: every valid proposal's task, holes left by invalid ones filled from a replay
   buffer of earlier valid tasks (cleared every ``replay_clear_every`` iterations), plus tasks drawn
   from the solver env's own source (training questions, the procedural bug store);
3. G solver episodes per task (one group per task);
4. rewards, assigned here once the results are in — never patched into the finished episodes: a
   solver's is its env outcome reward; a proposer's is the game's formula of its task's solve rate
   (search: ``1 − s`` for a valid question, 0 else; SWE: the injector formula of
   :mod:`sparring.envs.swe.rewards`).

Roles are data (:class:`Role`): each says which env it plays, how its episodes are planned from
what the iteration has so far, how their credit groups are formed and how their rewards follow.
A judge role would be one more entry after the solver.

Failure semantics: every episode ends with a reason (:func:`end_reason`). An episode that ended in
an infrastructure error is played again with a fresh env up to ``retries`` times; a group that
still has a failed episode is dropped whole and counted, never trained on as a biased partial
group.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sparring.agents.generation import SamplingParams
from sparring.agents.runner import AGENT_ERROR, EpisodeRunner, EpisodeSpec, RunnerConfig
from sparring.envs.core import Episode, content_id, reason_name
from sparring.training.config import TrainConfig

__all__ = ["GAMES", "Game", "IterationResult", "ReplayBuffer", "Role", "Rollout", "end_reason", "play_iteration"]

#: Why an episode ended.
END_REASONS = ("done", "turn_limit", "timeout", "overlong", "env_error", "agent_error")


def end_reason(episode: Episode) -> str:
    """``done``, ``turn_limit``, ``timeout``, ``overlong``, ``env_error`` or ``agent_error``."""
    if episode.error:
        return "agent_error" if episode.error.startswith(AGENT_ERROR) else "env_error"
    status = episode.outcome.get("status")
    if status == "time_limit":
        return "timeout"
    if status == "context_limit":
        return "overlong"
    if episode.terminated:
        return "done"
    return "turn_limit"


@dataclass
class Rollout:
    """A finished episode with what training needs: its outcome reward, turn rewards and credit group."""

    episode: Episode
    reward: float
    """Outcome reward R_e (assigned by the game)."""
    turn_rewards: list[float]
    """Turn rewards r_{e,t} without the outcome reward (shaping only)."""
    group: tuple[str, str, str]
    """Credit group: (domain, role, group id); baselines never mix domains or roles."""
    reason: str
    """Why the episode ended (:data:`END_REASONS`)."""

    @property
    def role(self) -> str:
        return self.group[1]

    @property
    def domain(self) -> str:
        return self.group[0]


class ReplayBuffer:
    """Earlier valid tasks, which fill the places of invalid proposals (SSP); cleared every N iterations."""

    def __init__(self, clear_every: int = 10, capacity: int = 256):
        """An empty buffer."""
        self.clear_every = clear_every
        self.capacity = capacity
        self.tasks: list[dict[str, Any]] = []

    def add(self, tasks: list[dict[str, Any]]) -> None:
        """Remember valid tasks (the oldest go first past the capacity)."""
        self.tasks = (self.tasks + tasks)[-self.capacity :]

    def sample(self, n: int, rng: np.random.Generator) -> list[dict[str, Any]]:
        """Up to ``n`` distinct earlier tasks."""
        if n <= 0 or not self.tasks:
            return []
        picks = rng.choice(len(self.tasks), size=min(n, len(self.tasks)), replace=False)
        return [self.tasks[int(i)] for i in picks]

    def tick(self, iteration: int) -> None:
        """Clear the buffer after every ``clear_every``-th iteration."""
        if self.clear_every > 0 and (iteration + 1) % self.clear_every == 0:
            self.tasks = []

    def state(self) -> list[dict[str, Any]]:
        """For checkpoints."""
        return list(self.tasks)


@dataclass
class IterationState:
    """What one game's iteration has played so far; roles plan and reward from it."""

    game: Game
    iteration: int
    config: TrainConfig
    rng: np.random.Generator
    replay: ReplayBuffer
    episodes: dict[str, list[Episode]] = field(default_factory=dict)
    """Played episodes by role (after retries)."""
    groups: dict[str, list[str]] = field(default_factory=dict)
    """Group id of each played episode, by role, parallel to ``episodes``."""
    tasks: list[dict[str, Any]] = field(default_factory=list)
    """Solver tasks of this iteration, in order."""
    task_source: dict[str, str] = field(default_factory=dict)
    """Task id -> ``proposed``, ``replay`` or ``drawn``."""
    solve_rate: dict[str, float] = field(default_factory=dict)
    """Task id -> share of its solver group that solved it."""
    dropped: dict[str, int] = field(default_factory=dict)
    """Groups dropped whole after failed retries, by role."""
    proposer_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra proposer env arguments for this iteration (from :attr:`Game.proposer_kwargs`)."""


@dataclass(frozen=True)
class Role:
    """One role of a game, as data."""

    name: str
    env_id: Callable[[Game], str]
    plan: Callable[[IterationState], list[tuple[EpisodeSpec, str]]]
    """The episodes to play and the group id of each, given what the iteration has so far."""
    reward: Callable[[Episode, IterationState], float]
    """Outcome reward of one of this role's episodes once the iteration's results are in."""
    after: Callable[[IterationState], None] = lambda state: None
    """Bookkeeping once this role's episodes are in (tasks from proposals, solve rates)."""
    top_up: Callable[[IterationState, int], list[tuple[EpisodeSpec, str]]] = lambda state, k: []
    """More episodes to play in round ``k`` once this role's are in (none: the role is done)."""


@dataclass(frozen=True)
class Game:
    """A domain's proposer and solver envs, and how its rewards follow from the solve rates."""

    domain: str
    proposer_env: str
    solver_env: str
    group_size: Callable[[TrainConfig], int]
    max_turns: Callable[[TrainConfig], int]
    solver_task: Callable[[dict[str, Any]], dict[str, Any] | None]
    """The solver task a proposer's outcome defines (None: not valid)."""
    proposer_reward: Callable[[bool, float | None], float]
    """The proposer's reward from (valid, solve rate of its task)."""
    plays_proposer: Callable[[TrainConfig], bool] = lambda config: True
    draws_tasks: Callable[[TrainConfig], bool] = lambda config: True
    proposer_kwargs: Callable[[Any, TrainConfig], dict[str, Any]] = lambda policy, config: {}
    """Extra proposer env arguments, given the policy (search: a validator that answers with it)."""
    preflight: Callable[[TrainConfig], None] = lambda config: None
    """Raises one clear SparringError when what the game's envs need is missing (search: a current corpus)."""


# ---------------------------------------------------------------------------------- the roles


def _make(env_id: str, max_turns: int, kwargs: dict[str, Any]) -> Callable[[], Any]:
    import gymnasium as gym

    return lambda: gym.make(env_id, max_turns=max_turns, **kwargs)


def _plan_proposers(state: IterationState) -> list[tuple[EpisodeSpec, str]]:
    game, config = state.game, state.config
    if not game.plays_proposer(config):
        return []
    make = _make(game.proposer_env, game.max_turns(config), state.proposer_kwargs)
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
    state.tasks = tasks


def _plan_solvers(state: IterationState) -> list[tuple[EpisodeSpec, str]]:
    game, config = state.game, state.config
    make = _make(game.solver_env, game.max_turns(config), {})
    size = game.group_size(config)
    specs = []
    for task in state.tasks:
        group = f"it{state.iteration}:{task['id']}"
        specs += [
            (EpisodeSpec(make, seed=0, options={"task": task}, env_id=game.solver_env, group_id=group), group)
            for _ in range(size)
        ]
    if game.draws_tasks(config):
        specs += _drawn_groups(state, config.drawn_tasks, f"it{state.iteration}")
    return specs


def _drawn_groups(state: IterationState, n: int, prefix: str) -> list[tuple[EpisodeSpec, str]]:
    """G attempts at each of ``n`` tasks drawn from the solver env's own source."""
    game = state.game
    make = _make(game.solver_env, game.max_turns(state.config), {})
    specs = []
    # The same seed draws the same task in every attempt; the runner samples each attempt apart.
    for seed in state.rng.integers(0, 2**31 - 1, size=n):
        group = f"{prefix}:drawn{int(seed)}"
        specs += [
            (EpisodeSpec(make, seed=int(seed), env_id=game.solver_env, group_id=group), group)
            for _ in range(game.group_size(state.config))
        ]
    return specs


def _by_group(state: IterationState, role: str) -> dict[str, list[Episode]]:
    """A role's episodes played so far, by group id."""
    by_group: dict[str, list[Episode]] = {}
    for ep, group in zip(state.episodes.get(role, []), state.groups.get(role, []), strict=True):
        by_group.setdefault(group, []).append(ep)
    return by_group


def _cut_short(eps: list[Episode]) -> bool:
    """Whether an infrastructure or agent error ended one of a group's episodes (the group is dropped)."""
    return any(end_reason(ep) in ("env_error", "agent_error") for ep in eps)


def spread_groups(state: IterationState) -> int:
    """Solver groups played so far whose rewards differ (and that no error cut short): the ones that teach."""
    return sum(
        len({_solver_reward(ep, state) for ep in eps}) > 1
        for eps in _by_group(state, "solver").values()
        if not _cut_short(eps)
    )


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


def solved(episode: Episode) -> bool:
    """Whether a solver episode succeeded (a positive outcome reward, no error)."""
    return episode.error is None and float(episode.outcome.get("reward", episode.reward)) > 0


def _after_solvers(state: IterationState) -> None:
    for group, eps in _by_group(state, "solver").items():
        task_id = str(eps[0].task.get("id", group))
        state.solve_rate[task_id] = sum(solved(ep) for ep in eps) / len(eps)


def _proposer_reward(ep: Episode, state: IterationState) -> float:
    task = state.game.solver_task(ep.outcome) if ep.error is None else None
    if task is None:
        return state.game.proposer_reward(False, None)
    rate = state.solve_rate.get(str(task["id"]))
    # A valid proposal whose solver group was dropped has no solve rate: it has no reward to learn from.
    return state.game.proposer_reward(True, rate) if rate is not None else float("nan")


def _solver_reward(ep: Episode, state: IterationState) -> float:
    return float(ep.outcome.get("reward", ep.reward))


ROLES: tuple[Role, ...] = (
    Role("proposer", lambda game: game.proposer_env, _plan_proposers, _proposer_reward, _after_proposers),
    Role("solver", lambda game: game.solver_env, _plan_solvers, _solver_reward, _after_solvers, _top_up_solvers),
)


# ---------------------------------------------------------------------------------- the games


def _search_solver_task(outcome: dict[str, Any]) -> dict[str, Any] | None:
    """A valid question's solver task, its id from its whole content.

    A solver group and its proposer's solve rate are keyed by this id, so two different tasks must
    never share it.
    """
    if not outcome.get("valid") or not outcome.get("question"):
        return None
    task = {"question": outcome["question"], "answers": list(outcome.get("answers") or [outcome["answer"]])}
    return {"id": content_id(task, "proposed"), **task}


def _search_proposer_reward(valid: bool, rate: float | None) -> float:
    from sparring.envs.search.rewards import proposer_reward

    return proposer_reward(rate, valid)


def _swe_proposer_reward(valid: bool, rate: float | None) -> float:
    from sparring.envs.swe.rewards import injector_reward

    return injector_reward(valid, rate)


def _search_preflight(config: TrainConfig) -> None:
    from sparring.envs.search.corpus import Corpus

    corpus = Corpus.open()  # the envs' default corpus: missing or of an older format is one sentence
    try:
        corpus.require_current_format()
    finally:
        corpus.close()


def _search_proposer_kwargs(policy: Any, config: TrainConfig) -> dict[str, Any]:
    from sparring.agents.answering import generator_answer_fn
    from sparring.envs.search.validation import PolicyValidator

    return {"validator": PolicyValidator(generator_answer_fn(policy))} if hasattr(policy, "tokenizer") else {}


GAMES: dict[str, Game] = {
    "search": Game(
        "search",
        "sparring/SearchPropose-v0",
        "sparring/SearchAnswer-v0",
        group_size=lambda config: config.search_group,
        max_turns=lambda config: config.search_max_turns,
        solver_task=_search_solver_task,
        proposer_reward=_search_proposer_reward,
        proposer_kwargs=_search_proposer_kwargs,
        preflight=_search_preflight,
    ),
    "swe": Game(
        "swe",
        "sparring/SWEInject-v0",
        "sparring/SWERepair-v0",
        group_size=lambda config: config.swe_group,
        max_turns=lambda config: config.swe_max_turns,
        solver_task=lambda outcome: outcome.get("solver_task"),
        proposer_reward=_swe_proposer_reward,
        plays_proposer=lambda config: config.swe_tasks in ("policy", "mix"),
        draws_tasks=lambda config: config.swe_tasks in ("procedural", "mix"),
    ),
}


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


def _turn_rewards(ep: Episode) -> list[float]:
    """Turn rewards without the outcome reward, which the env added to the terminal step."""
    rewards = [t.reward for t in ep.turns]
    if rewards and ep.outcome and "reward" in ep.outcome and (ep.terminated or ep.truncated):
        rewards[-1] -= float(ep.outcome["reward"])
    return rewards


def play_iteration(
    game: Game,
    policy: Any,
    config: TrainConfig,
    iteration: int,
    rng: np.random.Generator,
    replay: ReplayBuffer,
    runner_config: RunnerConfig | None = None,
) -> IterationResult:
    """Play one iteration of ``game`` with ``policy``; return its rollouts with rewards and groups."""
    sampling = SamplingParams(
        temperature=config.temperature,
        top_p=config.top_p,
        max_new_tokens=config.max_new_tokens,
        seed=int(rng.integers(0, 2**31 - 1)),
    )
    runner = EpisodeRunner(
        policy,
        runner_config
        or RunnerConfig(
            concurrency=config.concurrency,
            sampling=sampling,
            max_seconds=config.episode_seconds,
            max_context_tokens=config.max_context_tokens,
            progress=False,
        ),
    )
    state = IterationState(game, iteration, config, rng, replay, proposer_kwargs=game.proposer_kwargs(policy, config))
    stats: dict[str, float] = {}
    env_wait = wall = 0.0
    for role in ROLES:
        planned = role.plan(state)
        state.episodes[role.name], state.groups[role.name] = [], []
        rounds = 0
        while planned:
            played = _play(runner, planned, config.retries)
            wall += runner.stats.wall_seconds
            env_wait += runner.stats.env_wait_seconds
            state.episodes[role.name] += played
            state.groups[role.name] += [group for _, group in planned]
            planned = role.top_up(state, rounds)
            rounds += bool(planned)
        stats[f"{role.name}/top_up_rounds"] = rounds
        role.after(state)
    rollouts = []
    for role in ROLES:
        dropped = 0
        for group, eps in _by_group(state, role.name).items():
            if _cut_short(eps):
                dropped += 1  # a partial group would bias its baseline
                continue
            for ep in eps:
                reward = role.reward(ep, state)
                if reward != reward:  # NaN: no reward can be known for it (its solvers were dropped)
                    continue
                key = (game.domain, role.name, group)
                rollouts.append(Rollout(ep, reward, _turn_rewards(ep), key, end_reason(ep)))
        state.dropped[role.name] = dropped
        eps = state.episodes[role.name]
        stats[f"{role.name}/episodes"] = len(eps)
        stats[f"{role.name}/dropped_groups"] = dropped
        if eps:
            mine = [r.reward for r in rollouts if r.role == role.name]
            stats[f"{role.name}/reward_mean"] = float(np.mean(mine)) if mine else 0.0
            stats[f"{role.name}/turns_mean"] = float(np.mean([len(ep.turns) for ep in eps]))
            for reason in END_REASONS:
                stats[f"{role.name}/end/{reason}"] = sum(end_reason(ep) == reason for ep in eps)
    proposers = state.episodes["proposer"]
    if proposers:
        valid = [ep for ep in proposers if ep.error is None and game.solver_task(ep.outcome)]
        stats["proposer/valid_rate"] = len(valid) / len(proposers)
        reasons: dict[str, int] = {}
        for ep in proposers:
            if ep not in valid:
                for why in ep.outcome.get("reasons") or [ep.outcome.get("status") or end_reason(ep)]:
                    name = reason_name(why)  # one series per kind of reason
                    reasons[name] = reasons.get(name, 0) + 1
        for why, count in reasons.items():
            stats[f"proposer/invalid/{why}"] = count
    if state.solve_rate:
        rates = list(state.solve_rate.values())
        stats["solver/solve_rate"] = float(np.mean(rates))
        stats["solver/tasks"] = len(rates)
        for lo in (0.0, 0.25, 0.5, 0.75):
            hi = lo + 0.25
            stats[f"solver/solve_rate_hist/{lo:.2f}"] = sum(lo <= r < hi or (hi == 1.0 and r == 1.0) for r in rates)
    stats["env_wait_fraction"] = env_wait / wall if wall else 0.0
    stats["tasks/replayed"] = sum(1 for s in state.task_source.values() if s == "replay")
    replay.tick(iteration)
    return IterationResult(game.domain, rollouts, stats)
