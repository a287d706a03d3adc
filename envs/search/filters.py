"""Rule filters on proposed questions; each rejection has a named reason.

Reasons: ``no_question`` (the episode ended without ``<question>``), ``question_too_short``,
``question_too_long``, ``answer_in_question`` (the seed answer, or another answer the question
accepts such as a synonym, occurs in the question, normalised, in either spelling of its
separators; see :func:`gives_away`), ``too_few_searches`` (fewer
distinct searches than required), ``duplicated_query`` (the same normalised query searched twice).
"""

from __future__ import annotations

import string
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from sparring.envs.search.scoring import answer_in_text, normalize_answer

__all__ = ["ProposalRules", "check_proposal", "gives_away"]


@dataclass
class ProposalRules:
    """Bounds a proposal must respect before RAG validation (SSP's rule-based filters)."""

    min_question_chars: int = 20
    """Shortest accepted question."""
    max_question_chars: int = 400
    """Longest accepted question."""
    min_searches: int = 2
    """Fewest distinct searches the proposer must have made."""
    allow_duplicate_queries: bool = False
    """Whether searching the same (normalised) query twice is tolerated."""


_PUNCT_TO_SPACE = str.maketrans(string.punctuation, " " * len(string.punctuation))


def _spaced(text: str) -> str:
    """``text`` with accents dropped and punctuation as spaces ("Aix-la-Chapelle" -> "Aix la Chapelle")."""
    folded = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    return folded.translate(_PUNCT_TO_SPACE)


def gives_away(answer: str, question: str) -> bool:
    """Whether ``answer`` occurs in ``question`` as whole words, in either spelling of its separators.

    SQuAD normalisation deletes punctuation, so "Aix-la-Chapelle" normalises to one word and
    "Aix la Chapelle" in a question would slip past it; both forms are compared, accents folded.

    Example:
        >>> gives_away("Aix-la-Chapelle", "Is it Aix la Chapelle?"), gives_away("Café", "a cafe")
        (True, True)
        >>> gives_away("iron", "an environment")
        False
    """
    return answer_in_text(answer, question) or answer_in_text(_spaced(answer), _spaced(question))


def check_proposal(
    question: str | None, answer: str, queries: list[str], rules: ProposalRules, also: Sequence[str] = ()
) -> list[str]:
    """Reasons to reject the proposal; an empty list means it passes the rules.

    ``also`` are the other answers the question accepts (the seed's synonyms); none may occur in it.

    Example:
        >>> check_proposal("Which element has the symbol Fe?", "iron", ["fe symbol", "iron"], ProposalRules())
        []
        >>> check_proposal("What is iron?", "iron", ["iron"], ProposalRules())
        ['question_too_short', 'answer_in_question', 'too_few_searches']
        >>> check_proposal("Which metal has the symbol Fe?", "iron", ["fe", "metal"], ProposalRules(), also=["Fe"])
        ['answer_in_question']
    """
    reasons: list[str] = []
    if question is None or not question.strip():
        reasons.append("no_question")
    else:
        length = len(question.strip())
        if length < rules.min_question_chars:
            reasons.append("question_too_short")
        if length > rules.max_question_chars:
            reasons.append("question_too_long")
        if any(gives_away(a, question) for a in (answer, *also)):
            reasons.append("answer_in_question")
    normalised = [normalize_answer(q) for q in queries if normalize_answer(q)]
    if len(set(normalised)) < rules.min_searches:
        reasons.append("too_few_searches")
    if not rules.allow_duplicate_queries and len(set(normalised)) < len(normalised):
        reasons.append("duplicated_query")
    return reasons
