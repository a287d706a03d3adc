"""``sparring/SWEJudge-v0``: judge a SWE repair attempt without its grade.

The judge reads the repair prompt the solver was given (the weakened tests' diff, as the solver saw
it), each of the solver's commands and their output, and the files its repair changed with its
submitted summary (see :mod:`sparring.envs.judge`). It never sees the hidden tests, the bug's diff
or the grade: the submission's own observation (``graded solved``) is left out of the transcript.

Before its judgement it may run tests with ``run_tests``, one run per turn (``max_turns`` 4: three
runs, then the ``judge`` call): the env rebuilds the solver's final tree in a FRESH container of the
bug's image — the solver's starting tree (bug in, the revealing tests weakened, no history, no
artifact: :func:`~sparring.envs.swe.grading.setup_solver_repo`) with the attempt's final changes on
top (the repair episode's ``outcome["final"]``) — and runs pytest there as the solver could. The
container is the judge's alone and is thrown away with the episode; the oracle tests, the bug's diff
and the expected test ids are never copied in, so no run can show them.

A task is built from a ``SWERepair-v0`` episode with :func:`swe_judge_task`; its ``sandbox`` entry
(image, artifact, final tree) is what the env rebuilds the tree from and is never shown. Without one
the env draws its own from the stored bugs: an attempt that made no turn (its verdict is plainly "not
solved"; its tree is the starting tree), so the env plays standalone, and needs no container until
the judge runs tests.
"""

from __future__ import annotations

import posixpath
import shlex
from typing import Any

from sparring import SparringError
from sparring.containers.pools import PoolSet
from sparring.envs.core import Episode
from sparring.envs.judge import JudgeEnv, judge_task
from sparring.envs.swe.bugs.artifact import BugArtifact, shown_diff
from sparring.envs.swe.tasks import REPAIR_PROMPT
from sparring.envs.swe.tools import REPO_DIR, format_exec
from sparring.envs.swe.visible import rebuild_final_tree
from sparring.envs.tools import tool

__all__ = ["SWEJudgeEnv", "swe_judge_task"]

#: Characters of a test run's output the judge is shown (the end, where the failures and the summary are).
RUN_OUTPUT_CHARS = 1500

TOOLS_NOTE = """Before judging you may run the repository's tests on the agent's final code, as the agent \
could, one run per turn, e.g. <run_tests>{example}</run_tests> (test files or test ids; an empty call \
runs {example}). Judge by your last turn.
"""


def swe_judge_task(episode: Episode) -> dict[str, Any]:
    """The judge task of a ``SWERepair-v0`` episode; its final is the changed files and the summary, never the grade.

    Its ``sandbox`` (the bug's image and artifact, the attempt's final tree) lets the judge env rebuild
    the tree for ``run_tests``; it is absent when the episode does not carry them (nothing to rebuild).
    """
    files = ", ".join(str(f) for f in episode.outcome.get("changed_files") or []) or "none"
    summary = episode.outcome.get("summary")
    final = f"changed files: {files}" + (f"; summary: {summary}" if summary else "; no submission")
    task = episode.task
    extra = None
    if "artifact" in task and "image" in task:
        tree = episode.outcome.get("final") or {"written": {}, "deleted": [], "left_out": []}
        extra = {"sandbox": {"image": task["image"], "artifact": task["artifact"], "final": tree}}
    return judge_task(episode, final, extra)


class SWEJudgeEnv(JudgeEnv):
    """The judge role of the SWE game."""

    domain = "swe"
    final_name = "repair"

    def __init__(self, *, max_turns: int = 4, command_timeout: float = 120.0, **kwargs: Any):
        """Create the env.

        Args:
            max_turns: Turn limit: up to ``max_turns - 1`` test runs, then the judgement.
            command_timeout: Seconds one test run may take.
            **kwargs: See :class:`~sparring.envs.judge.JudgeEnv`.
        """
        super().__init__(max_turns=max_turns, **kwargs)
        self.command_timeout = float(command_timeout)
        self._pools = PoolSet()
        self._sandbox: Any = None

    def _draw_own(self) -> dict[str, Any]:
        """An attempt at a stored bug that made no turn."""
        from sparring.envs.swe.bugs.store import load_repair_tasks

        tasks = load_repair_tasks(split="train")
        if not tasks:
            raise SparringError(
                "SWEJudge-v0 found no stored bugs to draw an attempt from; pass reset(options={'task': "
                "swe_judge_task(episode)}) or run `sparring setup`."
            )
        task = tasks[int(self.np_random.integers(len(tasks)))]
        prompt = REPAIR_PROMPT.format(
            tests_diff=shown_diff(BugArtifact.from_dict(task["artifact"]).test_weaken_diff, reverse=True)
        )
        episode = Episode("sparring/SWERepair-v0", "solver", "swe", str(task["id"]), task, prompt)
        return swe_judge_task(episode)

    def _begin(self, task: dict[str, Any]) -> str:
        self._release()
        return super()._begin(task)

    def _test_files(self) -> list[str]:
        assert self._task is not None
        sandbox = self._task.get("sandbox") or {}
        return list((sandbox.get("artifact") or {}).get("test_files") or [])

    def _tools_note(self, task: dict[str, Any]) -> str:
        files = self._test_files()
        return TOOLS_NOTE.format(example=" ".join(files)) if files else ""

    def _release(self) -> None:
        sandbox, self._sandbox = self._sandbox, None  # forgotten first: a failing close leaves no stale container
        if sandbox is not None:
            sandbox.close()

    def close(self) -> None:
        """Release the judge's container and the pools (idempotent)."""
        self._release()
        self._pools.close()
        super().close()

    def _box(self) -> Any:
        """The judge's container holding the attempt's final tree, built on first use."""
        if self._sandbox is None:
            assert self._task is not None
            spec = self._task["sandbox"]
            sandbox = self._pools.acquire(spec["image"])
            try:
                rebuild_final_tree(sandbox, BugArtifact.from_dict(spec["artifact"]), spec.get("final") or {})
            except BaseException:
                sandbox.close()
                raise
            self._sandbox = sandbox
        return self._sandbox

    @tool(example={"tests": "tests/test_core.py"})
    def run_tests(self, tests: str) -> str:
        """Run pytest on the agent's final code and show the end of its output; takes a turn.

        Args:
            tests: Test files or test ids relative to /repo, separated by spaces; empty for the task's test files.
        """
        assert self._task is not None
        if "sandbox" not in self._task:
            return "Error: this attempt's final code was not recorded, so no tests can run; give your judgement."
        try:
            words = shlex.split(tests) or self._test_files()
        except ValueError:
            return f"Error: cannot read the test list {tests[:80]!r}; give test files or ids separated by spaces."
        bad = [w for w in words if w.startswith(("-", "@")) or _outside(w)]  # no options, no @argument files
        if bad or not words:
            return f"Error: {bad[0][:80]!r} is no test path inside /repo; give test files or ids, no options."
        try:
            box = self._box()
        except Exception as e:  # the engine, or a final tree that cannot be rebuilt: say so, never raise
            return f"Error: the attempt's final code could not be set up for a test run: {str(e)[:200]}"
        command = "python -m pytest -q -p no:cacheprovider --color=no --tb=no -rfE " + " ".join(map(shlex.quote, words))
        out = format_exec(box.exec(command, timeout=self.command_timeout, workdir=REPO_DIR))
        return out if len(out) <= RUN_OUTPUT_CHARS else "[...]\n" + out[-RUN_OUTPUT_CHARS:]


def _outside(path: str) -> bool:
    """Whether a test path leaves /repo."""
    name = path.split("::", 1)[0]
    full = posixpath.normpath(name if name.startswith("/") else posixpath.join(REPO_DIR, name))
    return full != REPO_DIR and not full.startswith(REPO_DIR + "/")
