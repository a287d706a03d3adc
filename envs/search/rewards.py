"""Rewards of the search game (defaults from Search Self-Play, arXiv 2510.18821).

The solver earns 1 for a correct answer and 0 otherwise (exact match after normalisation, or
token F1 when configured). The proposer earns ``1 − solve rate`` for a valid question and 0 for
an invalid one: SSP found that a negative penalty for invalid questions made the proposer
collapse into not proposing at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparring.envs.search.scoring import max_over_answers

__all__ = ["SearchRewards", "proposer_reward", "solver_reward"]


@dataclass
class SearchRewards:
    """Reward settings of both search roles."""

    solver_metric: str = "em"
    """``"em"`` (1/0 exact match) or ``"f1"`` (token F1 in [0, 1])."""
    solver_correct: float = 1.0
    """Solver reward for a correct answer (scaled by F1 when ``solver_metric`` is f1)."""
    solver_wrong: float = 0.0
    """Solver reward for a wrong answer or no answer."""
    proposer_invalid: float = 0.0
    """Proposer reward for a question the filters or the validator reject."""

    def proposer(self, valid: bool, solve_rate: float | None) -> float:
        """The proposer's reward from its validity and its task's solve rate (:func:`proposer_reward`)."""
        return proposer_reward(solve_rate, valid, self)

    def unfinished(self, role: str) -> float:
        """What an episode of ``role`` that ended without a submission earns: the env's turn-limit reward.

        The solver's is a wrong answer's, the proposer's an invalid question's; a trainer gives an episode
        it cut short (time, context) the same, so that running out is never better than answering.
        """
        return self.solver_wrong if role == "solver" else self.proposer_invalid


def solver_reward(prediction: str, answers: list[str], rewards: SearchRewards | None = None) -> float:
    """The solver's outcome reward for ``prediction`` against the accepted ``answers``."""
    rewards = rewards or SearchRewards()
    score = max_over_answers(rewards.solver_metric, prediction, answers)
    if rewards.solver_metric == "em":
        return rewards.solver_correct if score >= 1.0 else rewards.solver_wrong
    return rewards.solver_wrong + (rewards.solver_correct - rewards.solver_wrong) * score


def proposer_reward(solve_rate: float | None, valid: bool = True, rewards: SearchRewards | None = None) -> float:
    """``1 − solve_rate`` for a valid question, ``rewards.proposer_invalid`` for an invalid one.

    Example:
        >>> proposer_reward(0.25)
        0.75
    """
    rewards = rewards or SearchRewards()
    if not valid:
        return rewards.proposer_invalid
    if solve_rate is None or not 0.0 <= solve_rate <= 1.0:
        raise ValueError(f"solve_rate must be in [0, 1], got {solve_rate!r}")
    return 1.0 - solve_rate
