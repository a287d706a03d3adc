"""The replay buffer of valid proposed tasks (SSP): earlier tasks fill the places of invalid proposals."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["ReplayBuffer"]


class ReplayBuffer:
    """Earlier valid tasks, which fill the places of invalid proposals (SSP); cleared every N iterations."""

    def __init__(self, clear_every: int = 10, capacity: int = 256):
        """An empty buffer."""
        self.clear_every = clear_every
        self.capacity = capacity
        self.tasks: list[dict[str, Any]] = []
        self.higher_order: list[dict[str, Any]] = []
        """Validated tasks made from failed attempts (SWE's order-2 bugs), played once in the next iteration."""

    def add(self, tasks: list[dict[str, Any]]) -> None:
        """Remember valid tasks (the oldest go first past the capacity)."""
        self.tasks = (self.tasks + tasks)[-self.capacity :]

    def add_higher_order(self, tasks: list[dict[str, Any]]) -> None:
        """Queue validated higher-order tasks for the next iteration (the oldest go first past the capacity)."""
        self.higher_order = (self.higher_order + tasks)[-self.capacity :]

    def take_higher_order(self) -> list[dict[str, Any]]:
        """The queued higher-order tasks, emptying the queue."""
        tasks, self.higher_order = self.higher_order, []
        return tasks

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
