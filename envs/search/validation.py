"""RAG validation of proposed questions (Search Self-Play, arXiv 2510.18821).

A question that passed the rule filters is valid only if the solver role, given every document
the proposer retrieved plus a few noisy documents and *no* search tool, answers the seed answer or
another answer the solver's task will accept (:attr:`Proposal.answers`, e.g. the seed's synonyms).
Validators are pluggable:

* :class:`PolicyValidator` — this RAG validation: a model answers, the policy itself through an
  ``answer_fn`` (``prompts -> answers``), e.g. :func:`generator_answer_fn` over a
  ``sparring.agents`` generator, or :func:`openai_answer_fn` for any OpenAI-compatible endpoint.
  Graded by exact match after normalisation only, or with a ``judge`` (e.g.
  :func:`openai_judge_fn`) that decides when the strings differ. A question it validates is then
  asked twice more: over the same documents in another order (:func:`document_orders`), where it
  must be answered right again, so that a question pointing at a place in the validator's context
  fails; and with no document at all (:func:`closed_book_prompt`): one the model answers right
  without retrieval needs no search, so it is rejected as ``answerable_without_search``.
* :class:`GroundingValidator` — *not* RAG validation, a model-free grounding check: the seed
  answer must occur in a document the proposer retrieved. It ignores the question and the noise,
  so it cannot tell whether the question leads to the answer; it is the proposer env's default
  only because the env has no policy to ask (the trainer passes a :class:`PolicyValidator`
  over the policy, and a trainer should too).

Validation fails closed: :func:`validate_safely` turns any exception, and anything but one
well-formed :class:`Verdict` per proposal, into a rejection whose reason names the error.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from sparring.envs.search.documents import split_contents
from sparring.envs.search.scoring import VALIDATION_EXAMPLE_ANSWER, answer_in_text, exact_match

__all__ = [
    "AnswerFn",
    "GroundingValidator",
    "JudgeFn",
    "PolicyValidator",
    "EXAMPLE_ANSWER",
    "Proposal",
    "Validator",
    "Verdict",
    "extract_answer",
    "closed_book_prompt",
    "document_orders",
    "rag_prompt",
    "validate_safely",
    "validation_prompt",
]

#: ``answer_fn(prompts) -> answers``: one model output per prompt, in order.
AnswerFn = Callable[[list[str]], list[str]]
#: ``judge(question, reference, prediction) -> same answer?``
JudgeFn = Callable[[str, str, str], bool]

_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_ANSWER_TAG = "<answer>"
#: The answer the RAG prompt shows as an example; a small model copies it when lost, so it never
#: validates a question (and the corpus bars seeds that accept it).
EXAMPLE_ANSWER = VALIDATION_EXAMPLE_ANSWER
#: Characters of each document the validator reads: what a solver's search result shows
#: (``SearchToolEnv``'s ``doc_chars``), so no fact validates a question that no solver can read.
_DOC_CHARS = 600


@dataclass
class Proposal:
    """A proposed question with the evidence the validator sees."""

    question: str
    answer: str
    """The seed answer the question must lead to."""
    documents: list[dict[str, Any]]
    """Every document the proposer retrieved (``{"id", "contents"}``)."""
    noise: list[dict[str, Any]] = field(default_factory=list)
    """Distractor documents (retrieved by other proposals, or random)."""
    answers: list[str] = field(default_factory=list)
    """Every answer the question's solver task accepts (the seed's title and synonyms); empty: only ``answer``."""
    order_seed: int | None = None
    """Seeds the orders the validator reads the documents in; the env draws one per validation, so
    no wording of the question can foresee them. None: seeded by the question alone."""

    def accepted(self) -> list[str]:
        """``answer`` and then the other accepted answers, without repeats."""
        return list(dict.fromkeys([self.answer, *self.answers]))


@dataclass
class Verdict:
    """The validator's decision on one proposal."""

    valid: bool
    reasons: list[str] = field(default_factory=list)
    """Why it was rejected (empty when valid)."""
    answer: str | None = None
    """What the solver answered, when a model answered."""


@runtime_checkable
class Validator(Protocol):
    """Decides whether proposals are answerable with their evidence."""

    name: str

    def validate(self, proposals: Sequence[Proposal]) -> list[Verdict]:
        """One verdict per proposal, in order."""
        ...


def _checked(verdict: Any) -> Verdict:
    """``verdict`` if it is a well-formed :class:`Verdict` (an invalid one always with a reason), else TypeError."""
    if not isinstance(verdict, Verdict):
        raise TypeError(f"a verdict must be a Verdict, got {type(verdict).__name__}")
    if not isinstance(verdict.valid, bool):
        raise TypeError(f"Verdict.valid must be a bool, got {type(verdict.valid).__name__}")
    if not isinstance(verdict.reasons, list) or not all(isinstance(r, str) for r in verdict.reasons):
        raise TypeError("Verdict.reasons must be a list of strings")
    if verdict.answer is not None and not isinstance(verdict.answer, str):
        raise TypeError(f"Verdict.answer must be a string or None, got {type(verdict.answer).__name__}")
    if not verdict.valid and not verdict.reasons:
        return Verdict(False, ["validator_rejected"], verdict.answer)
    return verdict


def validate_safely(validator: Validator, proposals: Sequence[Proposal]) -> list[Verdict]:
    """Run ``validator``, failing closed.

    Any error, a result that is not a list of one well-formed :class:`Verdict` per proposal, or a
    validator without a ``validate`` method rejects every proposal with a ``validator_error: ...``
    reason; a broken validator must never accept, nor raise into the env's ``step``.
    """
    try:
        verdicts = validator.validate(list(proposals))
        if not isinstance(verdicts, (list, tuple)):
            raise TypeError(f"validate() must return a list of Verdicts, got {type(verdicts).__name__}")
        if len(verdicts) != len(proposals):
            raise ValueError(f"{len(verdicts)} verdicts for {len(proposals)} proposals")
        return [_checked(v) for v in verdicts]
    except Exception as e:  # fail closed: a broken validator must never accept
        reason = f"validator_error: {type(e).__name__}: {e}"
        return [Verdict(False, [reason]) for _ in proposals]


def rag_prompt(question: str, documents: Sequence[dict[str, Any]]) -> str:
    """The solver prompt of RAG validation: the documents, the question, then the answer format.

    The format comes last, next to the question: with it before some 3,000 tokens of documents,
    SmolLM2-135M answered in sentences (which exact match rejects) far more often.
    """
    parts = []
    for n, doc in enumerate(documents, 1):
        title, text = split_contents(doc["contents"])
        text = " ".join(text.split())
        if len(text) > _DOC_CHARS:  # cut as a search result is
            text = text[:_DOC_CHARS].rsplit(" ", 1)[0] + " …"
        parts.append(f"Doc {n} (Title: {title}) {text}")
    return "Answer the question using only the documents below.\n\n" + "\n".join(parts) + _ask(question)


def _ask(question: str) -> str:
    """The question and the answer format, last in every validation prompt."""
    return (
        f"\n\nQuestion: {question}\nAnswer with a word or a short name only, inside <answer> and </answer>, "
        f"for example: <answer>{EXAMPLE_ANSWER}</answer>"
    )


def closed_book_prompt(question: str) -> str:
    """The question alone, in the form of :func:`rag_prompt` without documents: what the model knows unaided."""
    return "Answer the question." + _ask(question)


def _is_gold(doc: dict[str, Any], accepted: Sequence[str]) -> bool:
    """Whether the document's title is an accepted answer: what a reader pointing at it would answer."""
    title = split_contents(doc["contents"])[0]
    return any(exact_match(title, a) for a in accepted)


def document_orders(proposal: Proposal, shuffle_seed: int = 0) -> tuple[list[int], list[int]]:
    """The two orders of ``proposal.documents + proposal.noise`` that validation reads, as index lists.

    The first is a shuffle; in the second, every document titled with an accepted answer stands
    where the first had one that is not (where there are enough of those), and the rest are
    shuffled. So a question that picks its answer by place ("the third document", "the last one")
    reads a wrong title in one of the two, whatever place it names. Seeded by ``shuffle_seed``, the
    proposal's ``order_seed`` and its question.
    """
    import random

    docs = [*proposal.documents, *proposal.noise]
    key = f"{shuffle_seed}:{proposal.question}"
    rng = random.Random(key if proposal.order_seed is None else f"{proposal.order_seed}:{key}")
    first = list(range(len(docs)))
    rng.shuffle(first)  # the same order as shuffling the documents themselves
    accepted = proposal.accepted()
    gold = {i for i in first if _is_gold(docs[i], accepted)}
    free = [pos for pos, i in enumerate(first) if i not in gold]  # the places no gold document held
    rng.shuffle(free)
    second: list[int | None] = [None] * len(docs)
    for pos, i in zip(free, sorted(gold), strict=False):
        second[pos] = i
    # more gold documents than other places (rare): the surplus stands anywhere, like the rest
    rest = sorted(gold)[len(free) :] + [i for i in first if i not in gold]
    rng.shuffle(rest)
    slots = iter(rest)
    return first, [i if i is not None else next(slots) for i in second]


def validation_prompt(proposal: Proposal, shuffle_seed: int = 0, reordered: bool = False) -> str:
    """What a :class:`PolicyValidator` asks: :func:`rag_prompt` over the proposal's documents and noise, shuffled.

    The order is the first of :func:`document_orders` (the second with ``reordered``), so the gold
    document's place does not leak and the same proposal always reads the same.
    """
    docs = [*proposal.documents, *proposal.noise]
    order = document_orders(proposal, shuffle_seed)[1 if reordered else 0]
    return rag_prompt(proposal.question, [docs[i] for i in order])


def extract_answer(output: str) -> str:
    """The text inside ``<answer>…</answer>``, else the first non-empty line after ``<answer>`` (or of the output).

    A small model often opens the tag, answers, and rambles on without closing it; the answer is
    the first line, not the ramble.

    Example:
        >>> extract_answer("<answer> Iron\\n\\nThe answer is: Iron")
        'Iron'
    """
    m = _ANSWER_RE.search(output)
    if m:
        return m.group(1).strip()
    _, tag, rest = output.partition(_ANSWER_TAG)
    return next((line.strip() for line in (rest if tag else output).splitlines() if line.strip()), "")


class PolicyValidator:
    """A model answers each question from its documents; valid when it gives an accepted answer.

    The accepted answers are the ones the solver's task will grade by (:meth:`Proposal.accepted`),
    so validation and solving agree on what a right answer is.

    A question answered right is asked again over the same documents in the second order of
    :func:`document_orders`, where no answer-titled document stands where one stood; another
    answer there rejects it (``answer_changed_with_document_order``): a question that points at a
    place in the validator's context ("the third document you were given") then reads a wrong
    title in one order or the other, while a question a searcher can answer does not depend on the
    order. No answer, or the prompt's example (what SmolLM2-135M writes when lost), is not another
    answer: a reader that follows a place names the title it finds there. This pass costs one more
    validation prompt per question that passed the first (none for a rejected one), in the same
    batch as the unaided check.

    With ``closed_book`` (the default), each question that validates is asked once more with no
    document (:func:`closed_book_prompt`); answered right, it is rejected as
    ``answerable_without_search`` (Search Self-Play's check: such a question trains no search, and
    a question that hides its answer in a code the model can read is one). That prompt is the
    question alone: 55 tokens against 705 for a validation prompt, on average over the scripted
    proposer's questions.
    """

    name = "policy"

    def __init__(
        self, answer_fn: AnswerFn, judge: JudgeFn | None = None, shuffle_seed: int = 0, closed_book: bool = True
    ):
        """Validate with ``answer_fn``; ``judge`` decides equivalence when exact match fails;
        ``closed_book`` rejects questions the model answers without documents."""
        self.answer_fn = answer_fn
        self.judge = judge
        self.shuffle_seed = shuffle_seed
        self.closed_book = closed_book

    def _grade(self, proposal: Proposal, output: str) -> tuple[str, str | None]:
        """What the model answered and, unless it is an accepted answer, why not."""
        predicted = extract_answer(output)
        if exact_match(predicted, EXAMPLE_ANSWER):  # copied from the prompt, not read
            return predicted, "solver_answered_the_prompt_example"
        same = any(exact_match(predicted, a) for a in proposal.accepted())
        if not same and self.judge is not None and predicted:
            same = bool(self.judge(proposal.question, proposal.answer, predicted))
        return predicted, None if same else f"solver_answered_other: {predicted[:80]!r}"

    def validate(self, proposals: Sequence[Proposal]) -> list[Verdict]:
        """Ask the model every question at once with its documents and grade each answer; then ask
        the ones it answered right again, in the second of :func:`document_orders`, and without
        documents (``closed_book``), in one batch."""
        prompts = [validation_prompt(p, self.shuffle_seed) for p in proposals]
        outputs = self.answer_fn(prompts)
        verdicts = []
        for proposal, output in zip(proposals, outputs, strict=True):
            predicted, wrong = self._grade(proposal, output)
            verdicts.append(Verdict(wrong is None, [wrong] if wrong else [], predicted))
        valid = [i for i, v in enumerate(verdicts) if v.valid]
        if not valid:
            return verdicts
        unaided = [closed_book_prompt(proposals[i].question) for i in valid] if self.closed_book else []
        reordered = [validation_prompt(proposals[i], self.shuffle_seed, reordered=True) for i in valid]
        again = self.answer_fn(unaided + reordered)
        if len(again) != len(unaided) + len(reordered):
            raise ValueError(f"{len(again)} answers for {len(unaided) + len(reordered)} prompts")
        for n, i in enumerate(valid):
            if unaided and self._grade(proposals[i], again[n])[1] is None:
                verdicts[i] = Verdict(False, ["answerable_without_search"], verdicts[i].answer)
                continue
            output = again[len(unaided) + n]
            predicted = extract_answer(output)
            if exact_match(predicted, verdicts[i].answer or ""):
                continue  # the answer the first order accepted: no second judgement
            if not predicted.strip() or exact_match(predicted, EXAMPLE_ANSWER):
                continue  # no answer (a small model lost in long documents), not another one
            predicted, wrong = self._grade(proposals[i], output)
            if wrong is not None:
                reason = f"answer_changed_with_document_order: {predicted[:80]!r}"
                verdicts[i] = Verdict(False, [reason], verdicts[i].answer)
        return verdicts


class GroundingValidator:
    """A model-free grounding check, not RAG validation: the seed answer occurs in a retrieved document.

    It neither reads the question nor uses the noise documents, so a question that leads elsewhere
    passes as long as the proposer's searches found the seed. Use it where no model is at hand
    (env checks, model-free tests, a cheap pre-filter); train with a :class:`PolicyValidator`.
    """

    name = "grounding"

    def validate(self, proposals: Sequence[Proposal]) -> list[Verdict]:
        """Valid when a normalised accepted answer occurs in a document the proposer retrieved."""
        verdicts = []
        for p in proposals:
            grounded = any(answer_in_text(a, doc["contents"]) for a in p.accepted() for doc in p.documents)
            verdicts.append(Verdict(grounded, [] if grounded else ["answer_not_in_retrieved_documents"]))
        return verdicts
