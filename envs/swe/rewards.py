"""Rewards of the SWE game (defaults from Self-play SWE-RL, arXiv 2512.18552).

The solver earns ``+1`` when its repair is graded solved and ``−1`` otherwise. The injector's
reward needs the solvers' results, so the inject env ends with the validation verdict only and
the trainer calls :func:`injector_reward` once the G repair attempts are graded:

* ``−1`` for an invalid artifact (any of the seven checks failed);
* ``−α`` when the solve rate ``s`` is 0 or 1 (too hard or too easy teaches nothing);
* ``1 − (1 + α)·s`` otherwise, which is highest for bugs that are rarely, but sometimes, solved.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SWERewards", "injector_reward", "solve_rate", "solver_reward"]


@dataclass
class SWERewards:
    """Reward settings of both SWE roles (defaults: SSR)."""

    alpha: float = 0.8
    """α: the penalty for a bug that every or no solver attempt solved, and the slope of the reward."""
    solver_solved: float = 1.0
    """Solver reward for a repair graded solved."""
    solver_unsolved: float = -1.0
    """Solver reward for any other ending (wrong repair, no submission, turn limit)."""
    injector_invalid: float = -1.0
    """Injector reward for an artifact that fails validation (or no artifact)."""
    test_turn_reward: float = 0.0
    """The solver's turn signal (0: off): in all at most this much for the visible tests that failed in its
    starting tree and that its own pytest runs brought to pass (:mod:`~sparring.envs.swe.visible`). A turn
    reward: it shapes credit, never the outcome."""

    def proposer(self, valid: bool, solve_rate: float | None) -> float:
        """The injector's reward from its validity and its bug's solve rate (:func:`injector_reward`)."""
        return injector_reward(valid, solve_rate, self)

    def unfinished(self, role: str) -> float:
        """What an episode of ``role`` that ended without a submission earns: the env's turn-limit reward.

        The solver's is an unsolved repair's (−1), the injector's an invalid artifact's; a trainer gives an
        episode it cut short (time, context) the same, so that running out never pays better than a wrong
        submission.
        """
        return self.solver_unsolved if role == "solver" else self.injector_invalid


def solver_reward(solved: bool, rewards: SWERewards | None = None) -> float:
    """``solver_solved`` if the repair was graded solved, else ``solver_unsolved``."""
    rewards = rewards or SWERewards()
    return rewards.solver_solved if solved else rewards.solver_unsolved


def solve_rate(results: list[bool]) -> float:
    """Fraction of graded repair attempts that solved the bug (0 for none)."""
    return sum(results) / len(results) if results else 0.0


def injector_reward(valid: bool, solve_rate: float | None, rewards: SWERewards | None = None) -> float:
    """The injector's reward from its validation verdict and the solvers' solve rate.

    Args:
        valid: Whether the artifact passed all seven validation checks.
        solve_rate: Fraction of the G repair attempts graded solved; ignored when invalid.
        rewards: Reward settings; SSR's defaults when None.

    Example:
        >>> injector_reward(True, 0.25)
        0.55
        >>> injector_reward(True, 1.0)
        -0.8
    """
    rewards = rewards or SWERewards()
    if not valid:
        return rewards.injector_invalid
    if solve_rate is None or not 0.0 <= solve_rate <= 1.0:
        raise ValueError(f"solve_rate must be in [0, 1] for a valid bug, got {solve_rate!r}")
    if solve_rate in (0.0, 1.0):
        return -rewards.alpha
    return round(1.0 - (1.0 + rewards.alpha) * solve_rate, 12)
