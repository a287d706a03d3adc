"""A tiny real text env for tests of the env contract and of the agent side.

It is a complete :class:`~sparring.envs.core.TextEnv`: the task is to report the sum of numbers
that the ``peek`` tool reveals one by one, so episodes take several turns.
"""

from __future__ import annotations

from typing import Any

from sparring.envs.core import TextEnv
from sparring.envs.tools import tool


class SumEnv(TextEnv):
    """Reveal numbers with ``peek``, then ``answer`` their sum."""

    role = "solver"
    domain = "toy"

    def __init__(self, *, max_turns: int = 5, size: int = 3, **kwargs: Any):
        """Create the env; ``size`` numbers are hidden per task."""
        super().__init__(max_turns=max_turns, **kwargs)
        self.size = size
        self._shown = 0

    def _draw_task(self) -> dict[str, Any]:
        numbers = [int(x) for x in self.np_random.integers(0, 10, size=self.size)]
        return {"id": "sum-" + "-".join(map(str, numbers)), "numbers": numbers}

    def _begin(self, task: dict[str, Any]) -> str:
        self._shown = 0
        return f"There are {len(task['numbers'])} hidden numbers. Use peek to see them, then answer their sum."

    @tool(example={"index": 0})
    def peek(self, index: int) -> str:
        """Show one hidden number.

        Args:
            index: Position of the number, from 0.
        """
        numbers = self.task["numbers"] if self.task else []
        if not 0 <= index < len(numbers):
            return f"Error: index must be between 0 and {len(numbers) - 1}."
        return f"number {index} is {numbers[index]}"

    @tool(example={"answer": "12"})
    def answer(self, answer: str) -> str:
        """Submit the sum and end the episode.

        Args:
            answer: The sum, as a number.
        """
        target = sum(self.task["numbers"]) if self.task else 0
        correct = answer.strip() == str(target)
        self._finish({"correct": correct, "target": target}, 1.0 if correct else 0.0)
        return "correct" if correct else f"wrong: the sum is {target}"
