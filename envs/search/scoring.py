"""Answer scoring as in SQuAD, Search-R1 and FlashRAG: normalise, then exact match or token F1.

Normalisation lower-cases, removes punctuation and the articles a/an/the, and collapses
whitespace, so ``"The  Jargon File."`` and ``"jargon file"`` match: the same steps, in the same
order, as Search-R1's ``normalize_answer`` (and SQuAD's), so an EM measured here on NQ, TriviaQA,
HotpotQA... is the EM those papers report. Token F1 is HotpotQA's (FlashRAG's): a yes/no answer
(or ``noanswer``) earns F1 only by being the truth itself. One deliberate difference: a truth that
normalises to nothing matches nothing (see :func:`exact_match`).
"""

from __future__ import annotations

import re
import string
from collections import Counter

__all__ = [
    "EXAMPLE_ANSWERS",
    "SOLVER_EXAMPLE_ANSWER",
    "VALIDATION_EXAMPLE_ANSWER",
    "answer_in_text",
    "exact_match",
    "f1_score",
    "max_over_answers",
    "normalize_answer",
]

#: The answer the solver's instructions show (``SearchAnswer-v0``).
SOLVER_EXAMPLE_ANSWER = "Guido van Rossum"
#: The answer RAG validation's prompt shows; a small model copies it when lost.
VALIDATION_EXAMPLE_ANSWER = "Mars"
#: A copied example is no answer: it never scores or validates, and the corpus bars seeds that accept one.
EXAMPLE_ANSWERS = (SOLVER_EXAMPLE_ANSWER, VALIDATION_EXAMPLE_ANSWER)

_ARTICLES_RE = re.compile(r"\b(a|an|the)\b")
#: Answers that share no tokens with a longer answer in HotpotQA's F1: "yes" is not half of "yes it is".
_CLOSED_ANSWERS = frozenset({"yes", "no", "noanswer"})
_PUNCT_TABLE = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation and articles, collapse whitespace.

    Example:
        >>> normalize_answer("The  Jargon File.")
        'jargon file'
    """
    text = text.lower().translate(_PUNCT_TABLE)
    text = _ARTICLES_RE.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, truth: str) -> float:
    """1.0 when the normalised strings are equal and not empty, else 0.0.

    A truth that normalises to nothing (``"A"``, ``"the"``) matches nothing: otherwise an empty
    answer, or any article or punctuation, would score as right.
    """
    truth = normalize_answer(truth)
    return float(bool(truth) and normalize_answer(prediction) == truth)


def f1_score(prediction: str, truth: str) -> float:
    """Token-level F1 between the normalised strings; 0.0 when either is empty.

    As in HotpotQA's and FlashRAG's F1, a prediction or a truth that is ``yes``, ``no`` or
    ``noanswer`` scores 1.0 when the two are equal and 0.0 otherwise: no partial credit.
    """
    pred_text, gold_text = normalize_answer(prediction), normalize_answer(truth)
    if (pred_text in _CLOSED_ANSWERS or gold_text in _CLOSED_ANSWERS) and pred_text != gold_text:
        return 0.0
    pred, gold = pred_text.split(), gold_text.split()
    if not pred or not gold:
        return 0.0
    common = Counter(pred) & Counter(gold)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred)
    recall = same / len(gold)
    return 2 * precision * recall / (precision + recall)


def max_over_answers(metric: str, prediction: str, answers: list[str]) -> float:
    """Best ``"em"`` or ``"f1"`` of ``prediction`` against any of ``answers``."""
    fn = exact_match if metric == "em" else f1_score
    return max((fn(prediction, a) for a in answers), default=0.0)


def answer_in_text(answer: str, text: str) -> bool:
    """Whether the normalised ``answer`` occurs as a whole-word sequence in normalised ``text``."""
    needle = normalize_answer(answer)
    if not needle:
        return False
    return f" {needle} " in f" {normalize_answer(text)} "
