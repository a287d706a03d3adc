"""Rule filters on proposed questions; each rejection has a named reason.

Reasons: ``no_question`` (the episode ended without ``<question>``), ``question_too_short``,
``question_too_long``, ``answer_in_question`` (the normalised seed answer, or another answer
the question accepts, such as a synonym, occurs in the question), ``too_few_searches`` (fewer
distinct searches than required), ``duplicated_query`` (the same normalised query searched twice).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sparring.envs.search.scoring import answer_in_text, normalize_answer

__all__ = ["ProposalRules", "check_proposal"]


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
        if any(answer_in_text(a, question) for a in (answer, *also)):
            reasons.append("answer_in_question")
    normalised = [normalize_answer(q) for q in queries if normalize_answer(q)]
    if len(set(normalised)) < rules.min_searches:
        reasons.append("too_few_searches")
    if not rules.allow_duplicate_queries and len(set(normalised)) < len(normalised):
        reasons.append("duplicated_query")
    return reasons
