"""``sparring/SearchJudge-v0``: judge a search solver's attempt without knowing the answer.

The judge reads the question, each search and its results, and the final answer (see
:mod:`sparring.envs.judge`); it never sees the accepted answers or the grade. A task is built from
a ``SearchAnswer-v0`` episode with :func:`search_judge_task`; without one the env draws its own: a
question drawn as ``SearchAnswer-v0`` draws it, attempted by the retrieval floor (search the whole
question, answer the first result's title), so the env plays standalone.

:func:`gold_turns` says which turns of an attempt newly retrieved the gold entry (a result whose
title is an accepted answer that no earlier turn's results showed, found by a query that does not
itself name the answer): the search game's env-verifiable turn signal, the scripted judge's rule
for a good turn and the label the game checks the judge's turn assessments against.
"""

from __future__ import annotations

import re
from typing import Any

from sparring.envs.core import Episode, Turn
from sparring.envs.judge import JudgeEnv, judge_task
from sparring.envs.search.answer_env import SearchAnswerEnv
from sparring.envs.search.scoring import answer_in_text, exact_match
from sparring.envs.tools import ToolCall, parse_tool_call, tool_spec

__all__ = ["SearchJudgeEnv", "gold_turns", "search_judge_task"]

_TITLE = re.compile(r"\(Title: (.*?)\) ")
_SEARCH_SPECS = {"search": tool_spec(SearchAnswerEnv.search)}


def search_judge_task(episode: Episode) -> dict[str, Any]:
    """The judge task of a ``SearchAnswer-v0`` episode; its final is the submitted answer, never the gold."""
    answer = episode.outcome.get("answer")
    return judge_task(episode, "(no answer)" if answer is None else str(answer))


def gold_turns(answers: list[str], turns: list[Turn]) -> list[bool | None]:
    """Per turn: whether it newly retrieved the gold entry (True/False for a search turn, None otherwise).

    A search turn retrieved the gold entry when a result's title is an accepted answer that no earlier
    turn's results showed; a query that names an answer itself earns nothing (the answer was already known).
    """
    seen = False
    labels: list[bool | None] = []
    for turn in turns:
        call = parse_tool_call(turn.action, _SEARCH_SPECS) if turn.tool == "search" else None
        if not isinstance(call, ToolCall):
            labels.append(None)
            continue
        titles = _TITLE.findall(turn.observation)
        found = any(exact_match(title, a) for title in titles for a in answers)
        named = any(answer_in_text(a, call.arguments["query"]) for a in answers)
        labels.append(found and not seen and not named)
        seen = seen or found
    return labels


class SearchJudgeEnv(JudgeEnv):
    """The judge role of the search game."""

    domain = "search"

    def __init__(self, *, corpus: Any = None, retriever: Any = None, **kwargs: Any):
        """Create the env.

        Args:
            corpus: Corpus of the drawn attempts' questions (None: the default one).
            retriever: Retriever of the drawn attempts' searches (None: BM25 on ``corpus``).
            **kwargs: See :class:`~sparring.envs.judge.JudgeEnv`.
        """
        super().__init__(**kwargs)
        self._solver_kwargs = {k: v for k, v in (("corpus", corpus), ("retriever", retriever)) if v is not None}

    def _draw_own(self) -> dict[str, Any]:
        """The retrieval floor's attempt at a drawn question, as a judge task."""
        env = SearchAnswerEnv(max_turns=2, **self._solver_kwargs)
        obs, info = env.reset(seed=int(self.np_random.integers(0, 2**31 - 1)))
        episode = Episode("sparring/SearchAnswer-v0", "solver", "search", info["task_id"], info["task"], obs)
        action = f"<search>{info['task']['question']}</search>"
        for _ in range(2):
            obs, reward, terminated, _, step = env.step(action)
            episode.turns.append(Turn(action, obs, reward, tool=step.get("tool")))
            episode.terminated, episode.outcome = terminated, step.get("outcome", {})
            titles = _TITLE.findall(obs)
            action = f"<answer>{titles[0] if titles else 'nothing found'}</answer>"
        return search_judge_task(episode)
