"""Asynchronous rollouts (``async_rollouts``): the next game-iteration is played while this one's update runs.

A *unit* is one game of one iteration: its episodes are played, then the policy is updated on them. The
synchronous trainer takes the two in turns. With ``async_rollouts`` the update of unit u runs in a worker
thread while the main thread plays unit u+1 (the next game, or the first game of the next iteration) with
the generator's weights of before that update; once both are done the generator takes the new weights, so
it never loads weights during a generation and never reads them during an update. The pipeline is one unit
deep (verl's and PRIME-RL's one-step off-policy): the first unit's episodes are fresh, every later unit's
are exactly one weights version older than the weights its update steps, which the update's truncated
importance weight ``min(π_old/μ, tis_cap)`` corrects (decoupled PPO: the clip stays around the trainer's
own logprobs before the step, :mod:`sparring.training.loss`). ``max_staleness`` is checked on every
episode's recorded ``weights_version`` before its update (:func:`fresh_enough`).

What stays on the main thread: every env, container and generator call, the metrics, the checkpoints and the
weight push after both are done. The worker runs the update alone and draws its mini-batches from a generator
seeded from the trainer's stream before it starts, so a run draws the same numbers whatever the two threads'
timing. On several ranks every collective of the update runs in the ranks' workers and a play meets no other
rank, so the ranks' collectives keep one order whatever their plays take.

A checkpoint is written after an iteration's last update, by which time the next iteration's first unit has
been played; a resumed run plays that unit again from the checkpoint's weights (it is not in the checkpoint,
and the tasks it drew from the replay buffer, order-2 ones included, were taken).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from sparring.training.outcomes import Rollout

__all__ = ["AsyncRollouts", "fresh_enough"]

Unit = tuple[int, str]
"""An iteration and a game."""


class AsyncRollouts:
    """Overlaps a trainer's updates with the play of the unit after each one (see the module docstring).

    Args:
        trainer: The :class:`~sparring.training.trainer.Trainer` (which imports this module) whose ``play``
            and ``reinforce`` this takes over.
    """

    def __init__(self, trainer: Any):
        """Nothing played ahead yet; one worker thread for the updates."""
        self.trainer = trainer
        self.ahead: tuple[Unit, list[Rollout], dict[str, float]] | None = None
        self.current: Unit | None = None
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sparring-update")

    def close(self) -> None:
        """Join the update worker (at the run's end; nothing is played ahead past the last iteration)."""
        self.worker.shutdown(wait=True)

    def take(self, game: str) -> tuple[list[Rollout], dict[str, float]]:
        """The current iteration's rollouts of ``game``: those played ahead during the last update, else played now."""
        unit = (self.trainer.iteration, game)
        self.current = unit
        if self.ahead is not None and self.ahead[0] == unit:
            _, rollouts, stats = self.ahead
            self.ahead = None
            return rollouts, stats
        self.ahead = None  # another unit's (a run stopped or resumed elsewhere): never trained out of turn
        return self.trainer.play(game, iteration=unit[0])

    def next_unit(self) -> Unit | None:
        """The unit after the current one: the next game of the iteration, else the next iteration's first game."""
        if self.current is None:
            return None
        iteration, game = self.current
        games = self.trainer.config.games
        index = games.index(game)
        if index + 1 < len(games):
            return iteration, games[index + 1]
        return (iteration + 1, games[0]) if iteration + 1 < self.trainer.config.iterations else None

    def update(self, rollouts: list[Rollout]) -> Any:
        """Update on ``rollouts`` in the worker while the next unit is played here; then push the new weights.

        Returns:
            The update's :class:`~sparring.training.trainer.UpdateStats`.
        """
        trainer = self.trainer
        rng = np.random.default_rng(int(trainer.rng.integers(0, 2**63 - 1)))  # drawn before the play draws any
        upcoming = self.next_unit()
        running = self.worker.submit(trainer.update, rollouts, rng, True)
        try:
            if upcoming is not None:
                t0 = time.perf_counter()
                played, stats = trainer.play(upcoming[1], iteration=upcoming[0])
                stats["seconds_play"] = time.perf_counter() - t0
                self.ahead = (upcoming, played, stats)
        finally:
            result = running.result()  # the update's own error, if any, after the play's
        trainer.sync_generator()
        return result


def fresh_enough(rollouts: list[Rollout], version: int, max_staleness: int) -> tuple[list[Rollout], dict[str, float]]:
    """``rollouts`` without the groups holding an episode more than ``max_staleness`` versions older than ``version``.

    An episode's staleness is ``version`` minus the generator's weights version it recorded (the oldest of its
    turns'). A whole group goes, never part of one: a partial group would bias its baseline.

    Returns:
        The rollouts kept and what to log: ``staleness_mean`` and ``staleness_max`` over the rollouts given,
        ``stale_dropped`` (rollouts dropped).

    Example:
        >>> fresh_enough([], version=3, max_staleness=1)
        ([], {'stale_dropped': 0})
    """
    lag = [version - r.episode.weights_version if r.episode.weights_version is not None else 0 for r in rollouts]
    stale = {r.group for r, behind in zip(rollouts, lag, strict=True) if behind > max_staleness}
    kept = [r for r in rollouts if r.group not in stale]
    stats: dict[str, float] = {"stale_dropped": len(rollouts) - len(kept)}
    if lag:
        stats |= {"staleness_mean": float(np.mean(lag)), "staleness_max": float(max(lag))}
    return kept, stats
