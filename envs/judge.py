"""What both judge envs share: a solver's recorded attempt shown as text, and the ``judge`` tool.

The judge role reads another agent's attempt — the task statement it was given, each of its turns'
action and observation, its final answer or diff — and answers with a verdict (``solved`` or
``not solved``) and one assessment per turn (``good``, ``neutral`` or ``bad``), in one call of
the ``judge`` tool (JSON form: it has two arguments). A judge task is built from a solver episode
by :func:`judge_task`, which keeps only what the solver saw and did: never the task's gold answers
or hidden tests, never the outcome; the observation of the submitting turn is left out too, since
an env's answer to a submission may state the grade (SWE's ``graded solved``). So a judge cannot
read the outcome it is paid to predict.

A malformed call, an unknown verdict or a wrong count of assessments is an invalid judgement: the
observation is one sentence saying what was wrong, and the episode ends with
``outcome["valid"] = False``. So does a message holding no valid tool call, whatever turn it comes on: a
judge with tools of its own (SWE's ``run_tests``) gets no retry the one-turn search judge lacks. A judge
that reaches its turn limit without judging is invalid too. The env's own reward is always 0: only the game,
which knows the real outcomes of a whole batch, can score a judgement (``sparring.training.judging``).

A judge task is ``{"id", "domain", "statement", "turns": [{"action", "observation"}], "final"}``, plus what a
domain's env needs to act but never shows (SWE: ``sandbox``, to rebuild the attempt's final tree).
"""

from __future__ import annotations

import re
from typing import Any

from sparring import SparringError
from sparring.envs.core import Episode, TextEnv, content_id
from sparring.envs.tools import ToolCall, ToolCallError, tool

__all__ = ["ASSESSMENTS", "VERDICTS", "JudgeEnv", "judge_task", "parse_assessments"]

#: The verdicts a judgement may give.
VERDICTS = ("solved", "not solved")
#: The assessments of a turn.
ASSESSMENTS = ("good", "neutral", "bad")

PROMPT = """You are the judge of another agent's attempt at a task. You are not told whether it \
succeeded: decide it from what the agent did. Then assess each of its {n} turn(s) in order: good \
(it moved the attempt forward), neutral, or bad (it wasted the turn or led astray).
{tools}Answer with one call, e.g.
<tool_call>{{"name": "judge", "arguments": {{"verdict": "not solved", "assessments": "{example}"}}}}</tool_call>
The verdict is "solved" or "not solved"; assessments are {n} word(s), each good, neutral or bad.

The task the agent was given:
<task>
{statement}
</task>
{turns}
The agent's final {final_name}: {final}"""


def _clip(text: str, limit: int) -> str:
    text = str(text).strip()
    return text if len(text) <= limit else text[:limit].rstrip() + " …"


def judge_task(episode: Episode, final: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The judge task of a solver episode: what the solver saw and did, nothing of its grading.

    Args:
        episode: A finished solver episode.
        final: The attempt's final answer or diff as the judge reads it (the domain's judge env
            module builds it from what the solver submitted, never from the grade).
        extra: Entries the domain's judge env uses and never shows (part of the task's id).
    """
    turns = [{"action": t.action, "observation": t.observation} for t in episode.turns]
    if turns and (episode.terminated or "reward" in episode.outcome):
        turns[-1]["observation"] = ""  # the env's answer to the submission may state the grade
    task = {"domain": episode.domain, "statement": episode.prompt, "turns": turns, "final": final} | (extra or {})
    return {"id": content_id(task, "judge"), **task}


def parse_assessments(text: str) -> list[str]:
    """The assessment words of the ``assessments`` argument (commas, spaces or newlines between them).

    Example:
        >>> parse_assessments("good, bad neutral")
        ['good', 'bad', 'neutral']
    """
    return [w for w in re.split(r"[\s,;]+", text.strip().lower()) if w]


class JudgeEnv(TextEnv):
    """Base of the judge envs: one turn, one ``judge`` call over a recorded attempt."""

    role = "judge"
    final_name = "answer"

    def __init__(
        self,
        *,
        max_turns: int = 1,
        tasks: list[dict[str, Any]] | None = None,
        action_chars: int = 300,
        observation_chars: int = 400,
        **kwargs: Any,
    ):
        """Create the env.

        Args:
            max_turns: Turn limit: 1 where the judge has only the ``judge`` call (a domain with tools of its own
                allows more); a malformed call is an invalid judgement and is not retried.
            tasks: Judge tasks to draw from (see :func:`judge_task`); None draws the domain's own.
            action_chars: Characters of each solver action shown.
            observation_chars: Characters of each observation shown (a search result is long; the
                judge's prompt has to fit the policy's context).
            **kwargs: Passed to :class:`~sparring.envs.core.TextEnv`.
        """
        super().__init__(max_turns=max_turns, **kwargs)
        self.tasks = tasks
        self.action_chars = int(action_chars)
        self.observation_chars = int(observation_chars)

    def _draw_own(self) -> dict[str, Any]:
        raise NotImplementedError

    def _draw_task(self) -> dict[str, Any]:
        if self.tasks:
            return dict(self.tasks[int(self.np_random.integers(len(self.tasks)))])
        return self._draw_own()

    def _begin(self, task: dict[str, Any]) -> str:
        turns = task.get("turns")
        if not isinstance(task.get("statement"), str) or not isinstance(turns, list):
            raise SparringError(
                'a judge task needs "statement" (text) and "turns" (a list); build it with judge_task().'
            )
        shown = []
        for n, turn in enumerate(turns, 1):
            shown.append(f"Turn {n} action: {_clip(turn.get('action', ''), self.action_chars)}")
            if turn.get("observation"):
                shown.append(f"Turn {n} result: {_clip(turn['observation'], self.observation_chars)}")
        example = " ".join(["neutral"] * len(turns))
        return PROMPT.format(
            tools=self._tools_note(task),
            n=len(turns),
            example=example,
            statement=task["statement"],
            turns="\n".join(shown),
            final_name=self.final_name,
            final=_clip(str(task.get("final") or "(none)"), self.action_chars),
        )

    def _tools_note(self, task: dict[str, Any]) -> str:
        """What the judge may do before its judgement (a domain with tools of its own says so; ends with a newline)."""
        return ""

    def _invalid(self, why: str) -> str:
        self._finish({"valid": False, "reason": why}, 0.0)
        return why

    @tool(example={"verdict": "not solved", "assessments": "neutral"})
    def judge(self, verdict: str, assessments: str) -> str:
        """Give the verdict on the attempt and one assessment per turn; ends the episode.

        Args:
            verdict: "solved" or "not solved".
            assessments: One word per turn of the attempt, in order: good, neutral or bad.
        """
        assert self._task is not None
        v = " ".join(verdict.strip().lower().split())
        if v not in VERDICTS:
            return self._invalid(f'Invalid judgement: the verdict must be "solved" or "not solved", not {verdict!r}.')
        words = parse_assessments(assessments)
        n = len(self._task["turns"])
        bad = [w for w in words if w not in ASSESSMENTS]
        if bad or len(words) != n:
            return self._invalid(
                f"Invalid judgement: assessments must be {n} word(s), each good, neutral or bad, not {assessments!r}."
            )
        self._finish({"valid": True, "verdict": v, "assessments": words}, 0.0)
        return "Judgement recorded."

    def _on_turn_limit(self) -> tuple[dict[str, Any], float]:
        return {"valid": False, "reason": "no judge call", "status": "turn_limit"}, 0.0

    def _turn_reward(self, call: ToolCall | ToolCallError) -> float:
        """0; a message without a valid call ends the judgement as invalid here (the step's one hook that sees it)."""
        if isinstance(call, ToolCallError) and not self._done:
            self._invalid(call.message.split("\n", 1)[0])
        return 0.0
