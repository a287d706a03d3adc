"""``sparring/SearchAnswer-v0``: answer a question, searching the corpus up to the turn limit.

A task is ``{"id", "question", "answers"}``, given in ``reset(options={"task": ...})`` (a
validated proposal, a held-out question) or drawn: from ``tasks`` when given, else a
definition → term question built from a seed answer's entry, accepting the same answers a
held-out question would (the seed's accepted answers: the entry's title and, for WordNet, its
synonyms; the corpus bars a seed one of whose answers is held out, see ``corpus.py``); a
question whose gloss names one of its answers is not drawn.
The outcome reward is 1 for a correct ``<answer>`` (exact match after SQuAD normalisation;
token F1 when configured) and 0 otherwise; the outcome holds both EM and F1. The example answer
the instructions show earns 0 (``outcome["copied_example"]``) unless it is the task's answer.
"""

from __future__ import annotations

from typing import Any

from sparring import SparringError
from sparring.envs.search.filters import gives_away
from sparring.envs.search.heldout import question_for
from sparring.envs.search.rewards import SearchRewards, solver_reward
from sparring.envs.search.scoring import SOLVER_EXAMPLE_ANSWER, exact_match, max_over_answers
from sparring.envs.search.search_env import EXAMPLE_QUERY, SearchToolEnv
from sparring.envs.tools import tool

__all__ = ["EXAMPLE_ANSWER", "SearchAnswerEnv"]

#: The answer the instructions show; it scores 0 unless it is one of the task's answers (a copied
#: example is no answer), so it is one that no question of the default corpus has.
EXAMPLE_ANSWER = SOLVER_EXAMPLE_ANSWER

PROMPT = f"""Answer the question. You can search the corpus with a few keywords, e.g. \
<search>{EXAMPLE_QUERY}</search>; results come back between <information> and </information>. \
Search as often as you need, then give the answer, a word or short phrase, e.g. \
<answer>{EXAMPLE_ANSWER}</answer>.
Question: {{question}}"""

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
            # A gloss that names a synonym would be answered by copying it from the question.
            if question and not any(gives_away(a, question) for a in seed["answers"]):
                return {"id": f"answer:{doc['id']}", "question": question, "answers": list(seed["answers"])}
        raise SparringError(
            f"could not draw a question from corpus {self.corpus_name!r}; "
            "pass tasks=[...] or reset(options={'task': ...})."
        )

    def _begin(self, task: dict[str, Any]) -> str:
        if not isinstance(task.get("question"), str) or not task.get("answers"):
            raise SparringError('a solver task needs "question" (text) and "answers" (a list of strings).')
        self._start_searches()
        return PROMPT.format(question=task["question"])

    @tool(example={"answer": EXAMPLE_ANSWER})
    def answer(self, answer: str) -> str:
        """Give the final answer and end the episode.

        Args:
            answer: The answer, a word or a short phrase.
        """
        assert self._task is not None
        answers = list(self._task["answers"])
        outcome = {"answer": answer.strip(), "answers": answers, "queries": list(self.queries)}
        if exact_match(answer, EXAMPLE_ANSWER) and not max_over_answers("em", EXAMPLE_ANSWER, answers):
            self._finish(outcome | {"em": 0.0, "f1": 0.0, "copied_example": True}, self.rewards.solver_wrong)
            return "Answer recorded."
        em = max_over_answers("em", answer, answers)
        f1 = max_over_answers("f1", answer, answers)
        self._finish(outcome | {"em": em, "f1": f1}, solver_reward(answer, answers, self.rewards))
        return "Answer recorded."

    def _on_turn_limit(self) -> tuple[dict[str, Any], float]:
        assert self._task is not None
        outcome = {"answer": None, "answers": list(self._task["answers"]), "em": 0.0, "f1": 0.0}
        return outcome | {"queries": list(self.queries), "status": "turn_limit"}, self.rewards.solver_wrong
