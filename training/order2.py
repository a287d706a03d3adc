"""Order-2 SWE bugs (Self-play SWE-RL): a failed repair of a valid bug, applied on top of it, is a new bug.

With ``order2``, the SWE game keeps the env of every solver attempt it plays (:class:`EnvLog`), so
a finished attempt's changes (the repair env's ``last_changes``) can be read back. Once the
iteration's solvers are in, up to ``order2_per_iteration`` failed attempts at order-1 bugs — graded
unsolved by the env, in a group no error cut short, having changed something — become artifacts of
order 2 (:func:`~sparring.envs.swe.tasks.higher_order_task`: the bug plus the attempt's changes,
the parent's tests and weakening) and go through the same validation as an injected bug, in fresh
containers. The valid ones wait in the replay buffer and are played as solver groups in the next
iteration (:meth:`~sparring.training.replay.ReplayBuffer.take_higher_order`), like any solver task.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from sparring.agents.runner import EpisodeSpec
from sparring.envs.core import Episode
from sparring.training.config import TrainConfig
from sparring.training.outcomes import cut_by_runner, cut_short
from sparring.training.replay import ReplayBuffer

__all__ = ["EnvLog", "higher_order_tasks"]

logger = logging.getLogger(__name__)


class EnvLog:
    """The envs a game's factories made, by factory, so a finished episode's env can be read back."""

    def __init__(self) -> None:
        """An empty log."""
        self._envs: dict[Callable[[], Any], Any] = {}
        self._lock = threading.Lock()

    def track(self, make: Callable[[], Any]) -> Callable[[], Any]:
        """A factory of its own for one episode, which records the env it makes (a replay's replaces it)."""

        def build() -> Any:
            env = make()
            with self._lock:
                self._envs[build] = env
            return env

        return build

    def env(self, make: Callable[[], Any]) -> Any:
        """The latest env ``make`` (a factory from :meth:`track`) made, or None."""
        with self._lock:
            return self._envs.get(make)


class Played(Protocol):
    """What an iteration has played (the game's ``IterationState``)."""

    config: TrainConfig
    game: Any
    replay: ReplayBuffer
    episodes: dict[str, list[Episode]]
    groups: dict[str, list[str]]
    specs: dict[str, list[EpisodeSpec]]
    env_log: EnvLog | None


def _failed_attempts(state: Played) -> list[tuple[Episode, Any]]:
    """Solver attempts at order-1 bugs the env graded unsolved, with their changes, in play order."""
    by_group: dict[str, list[int]] = {}
    for i, group in enumerate(state.groups.get("solver", [])):
        by_group.setdefault(group, []).append(i)
    episodes, specs = state.episodes.get("solver", []), state.specs.get("solver", [])
    found = []
    for members in by_group.values():
        if cut_short([episodes[i] for i in members]):
            continue
        for i in members:
            ep = episodes[i]
            env = state.env_log.env(specs[i].make_env) if state.env_log is not None else None
            changes = getattr(getattr(env, "unwrapped", None), "last_changes", None)
            order = int(ep.task.get("order", 1) or 1)
            graded = ep.error is None and not cut_by_runner(ep)
            if order == 1 and graded and not state.game.solved(ep.outcome) and changes is not None and changes.paths:
                found.append((ep, changes))
    return found


def higher_order_tasks(state: Played) -> dict[str, float]:
    """Validate order-2 bugs from this iteration's failed repairs; the valid ones wait for the next iteration.

    Returns:
        What to log: ``solver/order2_tried`` (attempts turned into artifacts and validated) and
        ``solver/order2_valid`` (new solver tasks).
    """
    if not state.config.order2:
        return {}
    from sparring.containers.pools import PoolSet
    from sparring.envs.swe.tasks import higher_order_task

    tried = valid = 0
    pools = PoolSet()
    try:
        for ep, changes in _failed_attempts(state)[: state.config.order2_per_iteration]:
            tried += 1
            try:
                task = higher_order_task(pools.pool(ep.task["image"]), ep.task, changes)
            except Exception:  # an attempt's state that cannot be diffed or validated is no bug: never the run's end
                logger.exception("an order-2 bug from a failed repair of %s could not be validated", ep.task_id)
                continue
            if task is not None:
                valid += 1
                state.replay.add_higher_order([task])
    finally:
        pools.close()
    return {"solver/order2_tried": tried, "solver/order2_valid": valid}
