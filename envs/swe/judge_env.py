"""``sparring/SWEJudge-v0``: judge a SWE repair attempt without its grade.

The judge reads the repair prompt the solver was given (the weakened tests' diff, as the solver saw
it), each of the solver's commands and their output, and the files its repair changed with its
submitted summary (see :mod:`sparring.envs.judge`). It never sees the hidden tests, the bug's diff
or the grade: the submission's own observation (``graded solved``) is left out of the transcript.
It does not run tests itself: the episode record keeps the changed files' names, not a sandbox
holding the solver's final state, so the judge decides from the transcript and the visible test
runs the solver made.

A task is built from a ``SWERepair-v0`` episode with :func:`swe_judge_task`; without one the env
draws its own from the stored bugs: an attempt that made no turn (its verdict is plainly "not
solved"), so the env plays standalone without containers.
"""

from __future__ import annotations

from typing import Any

from sparring import SparringError
from sparring.envs.core import Episode
from sparring.envs.judge import JudgeEnv, judge_task
from sparring.envs.swe.bugs.artifact import BugArtifact, reverse_diff
from sparring.envs.swe.tasks import REPAIR_PROMPT

__all__ = ["SWEJudgeEnv", "swe_judge_task"]


def swe_judge_task(episode: Episode) -> dict[str, Any]:
    """The judge task of a ``SWERepair-v0`` episode; its final is the changed files and the summary, never the grade."""
    files = ", ".join(str(f) for f in episode.outcome.get("changed_files") or []) or "none"
    summary = episode.outcome.get("summary")
    final = f"changed files: {files}" + (f"; summary: {summary}" if summary else "; no submission")
    return judge_task(episode, final)


class SWEJudgeEnv(JudgeEnv):
    """The judge role of the SWE game."""

    domain = "swe"
    final_name = "repair"

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
        prompt = REPAIR_PROMPT.format(tests_diff=reverse_diff(BugArtifact.from_dict(task["artifact"]).test_weaken_diff))
        episode = Episode("sparring/SWERepair-v0", "solver", "swe", str(task["id"]), {}, prompt)
        return swe_judge_task(episode)
