"""The game's records as data: what an iteration has played so far, a role, a game.

:mod:`sparring.training.game` plays the phases over these; :mod:`sparring.training.judging` the judge's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sparring.agents.runner import EpisodeSpec
from sparring.envs.core import Episode
from sparring.training.config import TrainConfig
from sparring.training.order2 import EnvLog
from sparring.training.replay import ReplayBuffer

__all__ = ["Game", "IterationState", "Role", "add_turn_rewards", "by_group"]


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
    specs: dict[str, list[EpisodeSpec]] = field(default_factory=dict)
    """The spec of each played episode, by role, parallel to ``episodes``."""
    env_log: EnvLog | None = None
    """The solver envs played, to read an attempt's changes back (``order2`` only)."""
    tasks: list[dict[str, Any]] = field(default_factory=list)
    """Solver tasks of this iteration, in order."""
    task_source: dict[str, str] = field(default_factory=dict)
    """Task id -> ``proposed``, ``replay`` or ``drawn``."""
    rewards: Any = None
    """The game's reward settings (``SearchRewards`` / ``SWERewards``), the ones its envs were given."""
    solve_rate: dict[str, float] = field(default_factory=dict)
    """Task id -> share of its solver group's scored attempts that solved it."""
    unrated: dict[str, str] = field(default_factory=dict)
    """Task id -> why it has no solve rate (its group was dropped, or every attempt was masked)."""
    dropped: dict[str, int] = field(default_factory=dict)
    """Groups dropped whole after failed retries, by role."""
    proposer_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra proposer env arguments for this iteration (from :attr:`Game.proposer_kwargs`)."""
    judged: list[Episode] = field(default_factory=list)
    """The solver episode each judge episode judged, parallel to ``episodes["judge"]``."""
    judge_scores: dict[int, tuple[float, str]] = field(default_factory=dict)
    """``id`` of a judge episode -> its reward and how it came."""
    turn_bonus: dict[int, list[float]] = field(default_factory=dict)
    """``id`` of a solver episode -> the turn rewards its judgement (and the game's turn signal) gave it."""
    stats: dict[str, float] = field(default_factory=dict)
    """What a role's bookkeeping found worth logging (the judges' accuracy)."""


@dataclass(frozen=True)
class Role:
    """One role of a game, as data."""

    name: str
    env_id: Callable[[Game], str]
    plan: Callable[[IterationState], list[tuple[EpisodeSpec, str]]]
    """The episodes to play and the group id of each, given what the iteration has so far."""
    reward: Callable[[Episode, IterationState], tuple[float, str]]
    """Outcome reward of one of this role's episodes the env ended, once the iteration's results are in, and
    how it came (:data:`~sparring.training.outcomes.SCORINGS`; NaN when masked)."""
    after: Callable[[IterationState], None] = lambda state: None
    """Bookkeeping once this role's episodes are in (tasks from proposals, solve rates)."""
    top_up: Callable[[IterationState, int], list[tuple[EpisodeSpec, str]]] = lambda state, k: []
    """More episodes to play in round ``k`` once this role's are in (none: the role is done)."""
    plays: Callable[[TrainConfig], bool] = lambda config: True
    """Whether the role plays at all (the judge: ``judge_episodes`` > 0); one that does not logs nothing."""
    scores_truncation: bool = True
    """Whether a runner truncation is scored by :func:`~sparring.training.outcomes.truncation_score` (the
    judge's reward, balanced over its batch, counts one as an invalid judgement itself)."""


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
    solved: Callable[[dict[str, Any]], bool]
    """Whether a solver's outcome is a solve (the env's verdict, whatever the reward settings pay for it)."""
    plays_proposer: Callable[[TrainConfig], bool] = lambda config: True
    draws_tasks: Callable[[TrainConfig], bool] = lambda config: True
    proposer_kwargs: Callable[[Any, TrainConfig], dict[str, Any]] = lambda policy, config: {}
    """Extra proposer env arguments, given the policy (search: a validator that answers with it)."""
    preflight: Callable[[TrainConfig], None] = lambda config: None
    """Raises one clear SparringError when what the game's envs need is missing (search: a current corpus)."""
    higher_order: Callable[[IterationState], dict[str, float]] | None = None
    """New solver tasks from the iteration's failed attempts, for the next one (SWE: order-2 bugs, ``order2``)."""
    judge_env: str = ""
    """The judge role's env."""
    judge_task: Callable[[Episode], dict[str, Any]] = lambda episode: {}
    """The judge task of a solver episode: what the solver saw and did, never its grade."""
    gold_turns: Callable[[Episode], list[bool | None]] | None = None
    """Which of a solver episode's turns are known good (True), known not (False) or unknown (None): the game's
    env-verifiable turn signal and the label its judges' assessments are checked against (search only)."""


def by_group(state: IterationState, role: str) -> dict[str, list[Episode]]:
    """A role's episodes played so far, by group id."""
    grouped: dict[str, list[Episode]] = {}
    for ep, group in zip(state.episodes.get(role, []), state.groups.get(role, []), strict=True):
        grouped.setdefault(group, []).append(ep)
    return grouped


def add_turn_rewards(state: IterationState, ep: Episode, rewards: list[float]) -> None:
    """Add ``rewards`` to a solver episode's turn rewards (kept apart: the finished episode is never patched)."""
    before = state.turn_bonus.get(id(ep), [0.0] * len(ep.turns))
    state.turn_bonus[id(ep)] = [a + b for a, b in zip(before, rewards, strict=True)]
