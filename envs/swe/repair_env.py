"""``sparring/SWERepair-v0``: the solver repairs a validated bug (docs/swe.md).

At reset the env takes a fresh container of the bug's repository image and turns it into the
solver's repository (original + bug + weakened tests, one fresh commit, no history). The prompt
is a fixed template around the reversed ``test_weaken.diff``: the tests that reveal the bug. The
solver works with ``bash``/``view``/``str_replace``/``create`` and ends with ``submit``; grading
happens in another fresh container (see :mod:`sparring.envs.swe.grading`). Reward: +1 solved,
−1 otherwise (:class:`~sparring.envs.swe.rewards.SWERewards`). With ``rewards.test_turn_reward`` > 0, a
``bash`` turn that runs pytest also earns the visible-test turn signal (:mod:`sparring.envs.swe.visible`).
The outcome keeps the solver's final tree (``final``: changed text files and deletions), from which the
judge env rebuilds it.

Tasks come from ``options={"task": ...}`` (a dict from :func:`~sparring.envs.swe.tasks.repair_task`), from the ``tasks``
given to the constructor, or from the bug store (``sparring bugs generate``).

Example::

    env = gym.make("sparring/SWERepair-v0")
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("<bash>git status</bash>")
"""

from __future__ import annotations

import copy
from typing import Any

from sparring import SparringError
from sparring.containers.pools import PoolSet
from sparring.envs.core import TextEnv
from sparring.envs.swe.bugs.artifact import BugArtifact, shown_diff
from sparring.envs.swe.grading import (
    PER_TEST_TIMEOUT,
    GradeResult,
    SolverChanges,
    changes_between,
    check_seconds,
    grade_repair,
    setup_solver_repo,
    snapshot,
)
from sparring.envs.swe.rewards import SWERewards, solver_reward
from sparring.envs.swe.tasks import REPAIR_PROMPT
from sparring.envs.swe.tools import SandboxTools
from sparring.envs.swe.visible import TestTurnSignal, final_tree, pytest_selection
from sparring.envs.tools import ToolCall, ToolCallError, tool

__all__ = ["SWERepairEnv"]


class SWERepairEnv(SandboxTools, TextEnv):
    """The solver role of the SWE game; see the module docstring."""

    role = "solver"
    domain = "swe"

    def __init__(
        self,
        *,
        max_turns: int = 30,
        tasks: list[dict[str, Any]] | None = None,
        split: str = "train",
        rewards: SWERewards | None = None,
        command_timeout: float = 120.0,
        test_timeout: float = 300.0,
        docker_hosts: list[str] | None = None,
        **kwargs: Any,
    ):
        """Create the env.

        Args:
            max_turns: Turn limit.
            tasks: Repair tasks to draw from; the bug store's ``split`` when None.
            split: Which repositories' bugs the store supplies (``train`` or ``heldout``).
            rewards: Reward settings (SSR's defaults when None).
            command_timeout: Seconds one ``bash`` call may run.
            test_timeout: Seconds the test run may take when grading, at most (a task that
                records its clean suite's run time is graded within a bound of it).
            docker_hosts: Docker engine URLs the containers run on, grading's included (default: the process's,
                else ``SPARRING_DOCKER_HOSTS``, else the local engine; see :mod:`~sparring.containers.engines`).
            **kwargs: Passed to :class:`TextEnv` (``max_length``, ``render_mode``).
        """
        super().__init__(max_turns=max_turns, **kwargs)
        self._tasks = tasks
        self.split = split
        self.rewards = rewards or SWERewards()
        self.command_timeout = command_timeout
        self.test_timeout = test_timeout
        self._pools = PoolSet(hosts=docker_hosts)
        self._sandbox = None
        self._start: dict[str, bytes] = {}
        self._left_out: list[str] = []  # what the read-back caps kept out of the last snapshot, told to the solver
        self.last_changes: SolverChanges | None = None
        """The solver's changes at the end of the last episode (for higher-order bugs)."""
        self._signal: TestTurnSignal | None = None

    def _draw_task(self) -> dict[str, Any]:
        if self._tasks is None:
            from sparring.envs.swe.bugs.store import load_repair_tasks

            self._tasks = load_repair_tasks(split=self.split)
        if not self._tasks:
            raise SparringError(
                f"no validated bugs for the {self.split} split; run `sparring bugs generate --repo NAME --n 5` first."
            )
        # a copy: info["task"] must not share objects between episodes (Gymnasium's checker)
        return copy.deepcopy(self._tasks[int(self.np_random.integers(len(self._tasks)))])

    def _begin(self, task: dict[str, Any]) -> str:
        self._release()
        self.last_changes = None
        try:  # grading's time bounds: checked before any container starts
            check_seconds(f"task {task['id']}'s clean_seconds", task.get("clean_seconds"), optional=True)
            check_seconds(f"task {task['id']}'s per_test_timeout", task.get("per_test_timeout"), optional=True)
        except ValueError as e:
            raise SparringError(str(e)) from None
        artifact = BugArtifact.from_dict(task["artifact"])
        self._sandbox = self._pools.acquire(task["image"])
        try:
            setup_solver_repo(self._sandbox, artifact)
        except RuntimeError as e:
            self._release()
            raise SparringError(
                f"bug {task['id']} does not fit the image {task['image']} ({e}); regenerate it with "
                f"`sparring bugs generate --repo {task.get('repo', 'NAME')}`."
            ) from None
        self._start = snapshot(self._sandbox)
        weight = self.rewards.test_turn_reward
        self._signal = None
        if weight:  # off by default: then no pool and no measurement
            self._signal = TestTurnSignal(weight, task, self._pools.pool(task["image"]), self.test_timeout)
        return REPAIR_PROMPT.format(tests_diff=shown_diff(artifact.test_weaken_diff, reverse=True))

    def _collect_changes(self) -> SolverChanges:
        assert self._sandbox is not None
        self._left_out = []
        try:
            changes = changes_between(self._start, snapshot(self._sandbox, left_out=self._left_out))
        except Exception:  # the solver broke its container: nothing it did can be read back
            changes = SolverChanges()
        self.last_changes = changes
        return changes

    def grade(self, changes: SolverChanges) -> GradeResult:
        """Grade ``changes`` against the current task in a fresh container."""
        assert self._task is not None
        task = self._task
        return grade_repair(
            self._pools.pool(task["image"]),
            BugArtifact.from_dict(task["artifact"]),
            task["fail_to_pass"] + task["pass_to_pass"],
            changes,
            self.test_timeout,
            clean_seconds=task.get("clean_seconds"),
            per_test_timeout=task.get("per_test_timeout") or PER_TEST_TIMEOUT,
            fail_to_pass=task["fail_to_pass"],
        )

    @tool(example={"summary": "fixed the off-by-one in parse()"})
    def submit(self, summary: str) -> str:
        """Finish: your repair is graded by running the original tests.

        Args:
            summary: One line describing the fix.
        """
        changes = self._collect_changes()
        result = self.grade(changes)
        outcome = result.to_dict() | {"changed_files": changes.paths, "summary": summary, "left_out": self._left_out}
        outcome["final"] = final_tree(changes)
        self._finish(outcome, solver_reward(result.solved, self.rewards))
        self._release()
        verdict = "solved: every test passes" if result.solved else "not solved"
        capped = f" Not read back, so not graded: {'; '.join(self._left_out)}." if self._left_out else ""
        return f"Submitted; graded {verdict}.{capped}"

    def _on_turn_limit(self) -> tuple[dict[str, Any], float]:
        changes = self._collect_changes() if self._sandbox is not None else SolverChanges()
        self._release()
        outcome = {"solved": False, "status": "turn_limit", "changed_files": changes.paths}
        return outcome | {"final": final_tree(changes)}, solver_reward(False, self.rewards)

    def _turn_reward(self, call: ToolCall | ToolCallError) -> float:
        """The visible-test signal of a ``bash`` turn that ran pytest (0 when off or for any other turn)."""
        if self._signal is None or self._sandbox is None or not isinstance(call, ToolCall) or call.name != "bash":
            return 0.0
        paths = pytest_selection(str(call.arguments.get("command", "")))
        if paths is None:
            return 0.0
        try:
            changes = changes_between(self._start, snapshot(self._sandbox))
        except Exception:  # the solver broke its container: nothing to measure
            return 0.0
        return self._signal.reward(paths, changes)
