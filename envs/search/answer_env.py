"""``sparring/SearchAnswer-v0``: answer a question, searching the corpus up to the turn limit.

A task is ``{"id", "question", "answers"}``, given in ``reset(options={"task": ...})`` (a
validated proposal, a held-out question) or drawn: from ``tasks`` when given, else a
definition → term question built from a seed answer's entry (never a held-out headword).
The outcome reward is 1 for a correct ``<answer>`` (exact match after SQuAD normalisation;
token F1 when configured) and 0 otherwise; the outcome holds both EM and F1.
"""

from __future__ import annotations

from typing import Any

from sparring import SparringError
from sparring.envs.search.heldout import question_for
from sparring.envs.search.rewards import SearchRewards, solver_reward
from sparring.envs.search.scoring import max_over_answers
from sparring.envs.search.search_env import SearchToolEnv
from sparring.envs.tools import tool

__all__ = ["SearchAnswerEnv"]

PROMPT = """Answer the question. You can search the corpus with <search>keywords</search>; results \
come back between <information> and </information>. Search as often as you need, then give the \
answer, a word or short phrase, as <answer>your answer</answer>.
Question: {question}"""

_DRAW_TRIES = 64


class SearchAnswerEnv(SearchToolEnv):
    """The solver role of the search game."""

    role = "solver"

    def __init__(
        self,
        *,
        max_turns: int = 6,
        tasks: list[dict[str, Any]] | None = None,
        rewards: SearchRewards | None = None,
        **kwargs: Any,
    ):
        """Create the env.

        Args:
            max_turns: Turn limit (searches plus the answer).
            tasks: Tasks to draw from (``{"id", "question", "answers"}``); None builds questions
                from the corpus's seed answers.
            rewards: Reward settings.
            **kwargs: See :class:`~sparring.envs.search.search_env.SearchToolEnv`.
        """
        super().__init__(max_turns=max_turns, **kwargs)
        self.tasks = tasks
        self.rewards = rewards or SearchRewards()

    def _draw_task(self) -> dict[str, Any]:
        if self.tasks:
            return dict(self.tasks[int(self.np_random.integers(len(self.tasks)))])
        seeds = self.corpus.seeds()
        for _ in range(_DRAW_TRIES if seeds else 0):
            seed = seeds[int(self.np_random.integers(len(seeds)))]
            doc = self.corpus.document(int(seed["index"]))
            doc["title"] = seed["answer"]
            question = question_for(doc)
            if question:
                return {"id": f"answer:{doc['id']}", "question": question, "answers": [seed["answer"]]}
        raise SparringError(
            f"could not draw a question from corpus {self.corpus_name!r}; "
            "pass tasks=[...] or reset(options={'task': ...})."
        )

    def _begin(self, task: dict[str, Any]) -> str:
        if not isinstance(task.get("question"), str) or not task.get("answers"):
            raise SparringError('a solver task needs "question" (text) and "answers" (a list of strings).')
        self._start_searches()
        return PROMPT.format(question=task["question"])

    @tool
    def answer(self, answer: str) -> str:
        """Give the final answer and end the episode.

        Args:
            answer: The answer, a word or a short phrase.
        """
        assert self._task is not None
        answers = list(self._task["answers"])
        em = max_over_answers("em", answer, answers)
        f1 = max_over_answers("f1", answer, answers)
        outcome = {"answer": answer.strip(), "answers": answers, "em": em, "f1": f1, "queries": list(self.queries)}
        self._finish(outcome, solver_reward(answer, answers, self.rewards))
        return "Answer recorded."

    def _on_turn_limit(self) -> tuple[dict[str, Any], float]:
        assert self._task is not None
        outcome = {"answer": None, "answers": list(self._task["answers"]), "em": 0.0, "f1": 0.0}
        return outcome | {"queries": list(self.queries), "status": "turn_limit"}, self.rewards.solver_wrong
