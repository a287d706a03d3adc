"""How an episode ended, and how its ending is scored: the rollout the game hands the trainer.

An episode ends by the policy's own doing — it submitted (``done``), or the env's own turn limit
came first (``turn_limit``) — or the runner cut it short (``timeout``, ``overlong``, ``turn_cap``:
its wall-clock, context or turn bound), or an error ended it (``env_error``, ``agent_error``).

The env scores the first kind itself. A runner truncation has no outcome reward, and the reward it
gets is decided here, in one place (:func:`truncation_score`): with ``overlong=score`` exactly what
the env's own turn limit gives that role (a wrong answer, an unsolved repair, an invalid proposal),
so running out of time or context never pays better than trying and failing; with
``overlong=mask`` none, and the rollout is left out of the loss. An errored episode is never scored:
its group is dropped (:mod:`sparring.training.game`).

Each :class:`Rollout` records how its reward came (:data:`SCORINGS`), and the game counts them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparring.agents.runner import AGENT_ERROR
from sparring.envs.core import Episode

__all__ = [
    "END_REASONS",
    "MASKED_DROPPED_GROUP",
    "MASKED_ONE_CLASS",
    "MASKED_TRUNCATED",
    "MASKED_UNSCORED_GROUP",
    "OUTCOME",
    "SCORINGS",
    "TRUNCATED_SCORED",
    "Rollout",
    "cut_by_runner",
    "cut_short",
    "end_reason",
    "is_masked",
    "truncation_score",
]

#: Why an episode ended.
END_REASONS = ("done", "turn_limit", "turn_cap", "timeout", "overlong", "env_error", "agent_error")
#: The runner's truncation statuses (``outcome["status"]`` with no outcome reward) -> end reason.
RUNNER_STOPS = {"time_limit": "timeout", "context_limit": "overlong", "turn_limit": "turn_cap"}

#: The env's outcome reward, or the game's formula of it (a proposer's, from its task's solve rate).
OUTCOME = "outcome"
#: A runner truncation given the env's turn-limit reward of its role (``overlong=score``).
TRUNCATED_SCORED = "truncated_scored"
#: A runner truncation left out of the loss (``overlong=mask``).
MASKED_TRUNCATED = "truncated_masked"
#: A valid proposal whose solver group was dropped (an error cut it short): no solve rate, no reward.
MASKED_DROPPED_GROUP = "masked_dropped_group"
#: A valid proposal all of whose solver attempts were masked truncations: no solve rate, no reward.
MASKED_UNSCORED_GROUP = "masked_unscored_group"
#: A judgement in a batch whose judged episodes all solved or all failed: no balance to score it against.
MASKED_ONE_CLASS = "masked_one_class"
#: How a rollout's reward came, each counted per role in the iteration's metrics.
SCORINGS = (OUTCOME, TRUNCATED_SCORED, MASKED_TRUNCATED, MASKED_DROPPED_GROUP, MASKED_UNSCORED_GROUP, MASKED_ONE_CLASS)


def is_masked(scoring: str) -> bool:
    """Whether a reward that came this way (:data:`SCORINGS`) is none: the rollout is left out of the loss."""
    return scoring not in (OUTCOME, TRUNCATED_SCORED)


def cut_by_runner(episode: Episode) -> bool:
    """Whether the runner, not the env, ended the episode (time, context or its turn bound): no outcome reward."""
    return episode.error is None and "reward" not in episode.outcome and episode.outcome.get("status") in RUNNER_STOPS


def cut_short(eps: list[Episode]) -> bool:
    """Whether an infrastructure or agent error ended one of a group's episodes (the group is dropped)."""
    return any(end_reason(ep) in ("env_error", "agent_error") for ep in eps)


def end_reason(episode: Episode) -> str:
    """One of :data:`END_REASONS`."""
    if episode.error:
        return "agent_error" if episode.error.startswith(AGENT_ERROR) else "env_error"
    if cut_by_runner(episode):
        return RUNNER_STOPS[episode.outcome["status"]]
    return "done" if episode.terminated else "turn_limit"


def truncation_score(role: str, rewards: Any, overlong: str) -> tuple[float, str]:
    """The reward of a runner truncation of ``role`` and how it came (the one place it is decided).

    Args:
        role: ``proposer`` or ``solver``.
        rewards: The game's reward settings (``SearchRewards`` / ``SWERewards``), the envs' own.
        overlong: ``score`` (the env's turn-limit reward of the role) or ``mask`` (none).
    """
    if overlong == "mask":
        return float("nan"), MASKED_TRUNCATED
    return float(rewards.unfinished(role)), TRUNCATED_SCORED


@dataclass
class Rollout:
    """A finished episode with what training needs: its outcome reward, turn rewards and credit group."""

    episode: Episode
    reward: float
    """Outcome reward R_e (assigned by the game); NaN when the rollout is masked (see :attr:`scoring`)."""
    turn_rewards: list[float]
    """Turn rewards r_{e,t} without the outcome reward (shaping only)."""
    group: tuple[str, str, str]
    """Credit group: (domain, role, group id); baselines never mix domains or roles."""
    reason: str
    """Why the episode ended (:data:`END_REASONS`)."""
    scoring: str = OUTCOME
    """How the reward came (:data:`SCORINGS`): the env's outcome, a runner truncation scored as the env's
    turn limit, or masked (no reward: left out of the loss and of its group's baseline)."""

    @property
    def role(self) -> str:
        return self.group[1]

    @property
    def domain(self) -> str:
        return self.group[0]

    @property
    def masked(self) -> bool:
        """Whether the rollout has no reward and is left out of the loss."""
        return is_masked(self.scoring)
