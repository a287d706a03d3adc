"""``sparring/SearchPropose-v0``: write a question whose unique answer is a given seed answer.

The task is a seed answer drawn from the corpus (a title that several other documents mention),
the answers a question about it accepts (the seed's title and, for WordNet, its synonyms) and a
hop count. The proposer searches, working backwards from the answer, then submits
``<question>…</question>``. The question must pass the rule filters (``filters.py``), must not be
the prompt's example question (``copied_example``), and must pass RAG validation
(``validation.py``): the solver role, given every document the proposer retrieved plus
``noise_docs`` distractors (the question's own top hits first) and no search, must give one of the
task's answers, in an order drawn per validation and again in a second order, and a
:class:`~sparring.envs.search.validation.PolicyValidator` then rejects a question it answers
with no document at all (``answerable_without_search``). A valid
question's solver task accepts the same answers, so an answer in a synonym's words is graded
alike in validation and in solving; no answer the task accepts may occur in the question.
Validation needs a model, so pass ``validator=PolicyValidator(...)`` over the policy (as the
trainer does); without one the env only runs the model-free
:class:`~sparring.envs.search.validation.GroundingValidator`, and ``outcome["validator"]`` says
``"grounding"``.

Reward: ``rewards.proposer_invalid`` (0) for an invalid question. A valid question's reward is
``1 − solve rate`` (:meth:`~sparring.envs.search.rewards.SearchRewards.proposer`), which needs the
solvers' episodes: the env ends a valid question with 0, and the trainer's game, which plays the
solvers, computes it with the same ``rewards``.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from sparring import SparringError
from sparring.envs.search.filters import ProposalRules, check_proposal
from sparring.envs.search.rewards import SearchRewards, proposer_reward
from sparring.envs.search.search_env import EXAMPLE_QUERY, SearchToolEnv
from sparring.envs.search.validation import GroundingValidator, Proposal, Validator, validate_safely
from sparring.envs.tools import tool

__all__ = ["EXAMPLE_QUESTION", "NoisePool", "SearchProposeEnv"]

#: The question the instructions show; submitting it is rejected (``copied_example``).
EXAMPLE_QUESTION = "Which Dutch programmer created the Python programming language?"

PROMPT = f"""You write quiz questions. Write a question whose one correct answer is exactly: {{answer}}
The question should need {{hops}} step(s) of reasoning: find facts that lead to the answer, working \
backwards from it, and describe them without naming the answer.
Search the corpus with a few keywords, e.g. <search>{EXAMPLE_QUERY}</search> (at least 2 different \
searches); results come back between <information> and </information>. When done, write your \
question, e.g. <question>{EXAMPLE_QUESTION}</question>.
Do not put the answer in the question."""


def _copied(question: str | None) -> list[str]:
    """``["copied_example"]`` when the question is the one the instructions show."""
    same = question is not None and " ".join(question.split()).casefold() == EXAMPLE_QUESTION.casefold()
    return ["copied_example"] if same else []


class NoisePool:
    """Documents retrieved by recent proposals, the distractors of RAG validation.

    Share one pool between the envs of a run so each validation sees documents from other
    proposals; it is thread-safe and keeps the ``capacity`` most recent documents.
    """

    def __init__(self, capacity: int = 2000):
        """Create an empty pool."""
        self._docs: deque[dict[str, Any]] = deque(maxlen=capacity)
        self._lock = threading.Lock()

    def add(self, docs: list[dict[str, Any]]) -> None:
        """Remember the documents of one proposal."""
        with self._lock:
            self._docs.extend(docs)

    def sample(self, k: int, exclude: set[str], rng: Any) -> list[dict[str, Any]]:
        """Up to ``k`` distinct documents whose ids are not in ``exclude``."""
        with self._lock:
            candidates = list({d["id"]: d for d in self._docs if d["id"] not in exclude}.values())
        if not candidates:
            return []
        picks = rng.choice(len(candidates), size=min(k, len(candidates)), replace=False)
        return [candidates[int(i)] for i in picks]


class SearchProposeEnv(SearchToolEnv):
    """The proposer role of the search game."""

    role = "proposer"

    def __init__(
        self,
        *,
        max_turns: int = 8,
        validator: Validator | None = None,
        rules: ProposalRules | None = None,
        rewards: SearchRewards | None = None,
        noise_docs: int = 4,
        noise_pool: NoisePool | None = None,
        max_hops: int = 3,
        seed_sources: tuple[str, ...] | None = None,
        **kwargs: Any,
    ):
        """Create the env.

        Args:
            max_turns: Turn limit (searches plus the question).
            validator: RAG validator, e.g. a
                :class:`~sparring.envs.search.validation.PolicyValidator` over the policy. The
                default, :class:`~sparring.envs.search.validation.GroundingValidator`, is only a
                model-free grounding check (the seed occurs in a retrieved document), not RAG
                validation.
            rules: Rule-filter bounds.
            rewards: Reward settings.
            noise_docs: Distractor documents added to the evidence in validation: first the
                question's own top hits (what a solver's search of the question shows, up to
                ``topk``) that the proposer did not retrieve, then documents of the pool.
            noise_pool: Pool of documents from other proposals (shared across envs); a private
                pool is made when None.
            max_hops: Hop counts are drawn from 1..max_hops.
            seed_sources: Draw seeds only from documents of these sources (the id prefix before
                ``:``, e.g. ``("foldoc", "jargon")``); None draws from every source.
            **kwargs: See :class:`~sparring.envs.search.search_env.SearchToolEnv`.
        """
        super().__init__(max_turns=max_turns, **kwargs)
        if validator is not None and not callable(getattr(validator, "validate", None)):
            raise SparringError(
                f"validator {validator!r} has no validate(proposals) method; pass a PolicyValidator, a "
                "GroundingValidator or another object with `name` and `validate`."
            )
        self.validator: Validator = validator if validator is not None else GroundingValidator()
        self.rules = rules or ProposalRules()
        self.rewards = rewards or SearchRewards()
        self.noise_docs = int(noise_docs)
        self.noise_pool = noise_pool or NoisePool()
        self.max_hops = int(max_hops)
        self.seed_sources = seed_sources
        self._seeds: list[dict[str, Any]] | None = None

    def _draw_task(self) -> dict[str, Any]:
        if self._seeds is None:
            wanted = self.seed_sources
            self._seeds = [s for s in self.corpus.seeds() if not wanted or s["doc"].split(":", 1)[0] in wanted]
        seeds = self._seeds
        if not seeds:
            raise SparringError(
                f"corpus {self.corpus_name!r} has no seed answers (from sources {self.seed_sources or 'any'}); "
                "rebuild it with `sparring corpus build` or change seed_sources."
            )
        seed = seeds[int(self.np_random.integers(len(seeds)))]
        hops = int(self.np_random.integers(1, self.max_hops + 1))
        return {
            "id": f"propose:{seed['doc']}:{hops}",
            "answer": seed["answer"],
            "answers": list(seed["answers"]),
            "hops": hops,
            "doc": seed["doc"],
        }

    def _begin(self, task: dict[str, Any]) -> str:
        if not isinstance(task.get("answer"), str) or not task["answer"].strip():
            raise SparringError('a proposer task needs "answer" (the seed answer, text) and may give "hops".')
        answers = task.get("answers", [])
        if not isinstance(answers, list) or not all(isinstance(a, str) and a.strip() for a in answers):
            raise SparringError('a proposer task\'s "answers" (what its question accepts) must be a list of texts.')
        self._start_searches()
        return PROMPT.format(answer=task["answer"], hops=task.get("hops", 1))

    def _noise(self, question: str) -> list[dict[str, Any]]:
        """Distractors: the question's top hits the proposer did not retrieve, then the pool's, then random ones.

        The question's own hits are what a solver that searches it reads first: a question that
        singles its answer out only among the proposer's documents ("which of these names a
        metal") meets the corpus's other candidates there.
        """
        exclude = set(self.retrieved)
        hits = self.retriever.retrieve([question], self.topk)[0] if self.noise_docs else []
        noise = [{"id": h.id, "contents": h.document()["contents"]} for h in hits if h.id not in exclude]
        noise = noise[: self.noise_docs]
        exclude |= {d["id"] for d in noise}
        noise += self.noise_pool.sample(self.noise_docs - len(noise), exclude, self.np_random)
        tries = 0
        while len(noise) < self.noise_docs and tries < 10 * self.noise_docs:
            tries += 1
            doc = self.corpus.document(int(self.np_random.integers(len(self.corpus))))
            if doc["id"] not in exclude:
                exclude.add(doc["id"])
                noise.append({"id": doc["id"], "contents": doc["contents"]})
        return noise

    def _judge(self, question: str | None) -> tuple[dict[str, Any], float]:
        """Filters, then validation; the outcome and the terminal reward."""
        assert self._task is not None
        answer = self._task["answer"]
        answers = list(dict.fromkeys([answer, *self._task.get("answers", [])]))
        outcome: dict[str, Any] = {
            "question": question,
            "answer": answer,
            "answers": answers,
            "queries": list(self.queries),
            "documents": list(self.retrieved.values()),
            "valid": False,
            "reasons": check_proposal(question, answer, self.queries, self.rules, answers) + _copied(question),
            "validator": str(getattr(self.validator, "name", type(self.validator).__name__)),
        }
        if outcome["reasons"]:
            return outcome, proposer_reward(None, valid=False, rewards=self.rewards)
        assert question is not None
        # the documents' order is drawn per validation, so no wording of the question foresees it
        order_seed = int(self.np_random.integers(2**31))
        proposal = Proposal(question, answer, list(self.retrieved.values()), self._noise(question), answers, order_seed)
        verdict = validate_safely(self.validator, [proposal])[0]
        self.noise_pool.add(proposal.documents)
        outcome.update(valid=verdict.valid, reasons=verdict.reasons, validator_answer=verdict.answer)
        # with "documents" and "order_seed": the evidence validation showed, in its order, to replay it
        outcome.update(noise=proposal.noise, order_seed=order_seed)
        if not verdict.valid:
            return outcome, proposer_reward(None, valid=False, rewards=self.rewards)
        return outcome, 0.0

    @tool(example={"question": EXAMPLE_QUESTION})
    def question(self, question: str) -> str:
        """Submit the question and end the episode.

        Args:
            question: The question whose one correct answer is the seed answer.
        """
        outcome, reward = self._judge(question.strip())
        self._finish(outcome, reward)
        if outcome["valid"]:
            return "Question accepted."
        return "Question rejected: " + ", ".join(outcome["reasons"]) + "."

    def _on_turn_limit(self) -> tuple[dict[str, Any], float]:
        return self._judge(None)
