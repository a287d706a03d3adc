"""Rule filters on proposed questions; each rejection has a named reason.

Reasons: ``no_question`` (the episode ended without ``<question>``), ``question_too_short``,
``question_too_long``, ``answer_in_question`` (the seed answer, or another answer the question
accepts such as a synonym, occurs in the question, written out or encoded; see :func:`gives_away`),
``too_few_searches`` (fewer distinct searches than required), ``duplicated_query`` (the same
normalised query searched twice), ``not_self_contained`` (the question points at documents the
validator is shown, such as "Doc 2" or "the titles above", instructs its reader, or has a line
break or the tags of the tool protocol: a solver sees no documents until it searches, so such a
question is written for validation alone).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from sparring.envs.search.leaks import leak, skeleton
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


_CONTEXT_NOUNS = r"(?:docs?|documents?|passages?|texts?|titles?|results?|entries|context|information|snippets?)"
#: A question is read by a solver who sees no documents until it searches: one that points at
#: documents it was shown, or instructs the reader, is written for the validator's view alone.
_NOT_SELF_CONTAINED = re.compile(
    r"\n|</?\s*(?:answer|search|question|information|tool_call|tool_response|think)\b|<\|"
    r"|\bdoc(?:ument)?s?\s*#?\d+\b|\btitles?\s*:"
    rf"|\b(?:above|below|preceding|following|provided|given|these|those|listed|shown)\s+{_CONTEXT_NOUNS}\b"
    rf"|\b{_CONTEXT_NOUNS}\s+(?:above|below|provided|given|shown|listed)\b"
    r"|\b(?:reply|respond|answer|output)\s+(?:with|only|in|using|exactly)\b"
    r"|\bsearch\s+(?:at\s+least|more|again|twice|several|many|\d+)\b"
    r"|\b(?:ignore|disregard)\s+(?:(?:the|all|any|previous|prior|above|your)\s+)*"
    r"(?:instructions?|question|prompt|rules?|documents?|above)\b",
    re.IGNORECASE,
)


def _plain(text: str) -> str:
    """The :func:`~sparring.envs.search.leaks.skeleton` with every punctuation, symbol or space
    character as a space, and letters spelt one at a time ("I R O N") as one word."""
    text = "".join(" " if unicodedata.category(c)[0] in "PSZ" else c for c in skeleton(text))
    words: list[str] = []
    run: list[str] = []  # single letters in a row
    for word in [*text.split(), ""]:
        if len(word) == 1:
            run.append(word)
            continue
        if run:
            words.append("".join(run))
            run = []
        if word:
            words.append(word)
    return " ".join(words)


def gives_away(answer: str, question: str) -> bool:
    """Whether ``question`` names ``answer``, written out or encoded.

    Written out: as whole words after SQuAD normalisation, or after a second one (SQuAD's deletes
    punctuation, so "Aix-la-Chapelle" normalises to one word and "Aix la Chapelle" would slip past
    it) that reads every separator as a space, the text as its
    :func:`~sparring.envs.search.leaks.skeleton` (look-alikes of other scripts as Latin letters,
    no accents or invisible characters) and letters spelt one at a time as one word. Encoded:
    reversed, split, shifted, in leetspeak, as numbers, as an acrostic or a phonetic spelling, as
    an anagram (:func:`~sparring.envs.search.leaks.leak`).

    Example:
        >>> gives_away("Aix-la-Chapelle", "Is it Aix la Chapelle?"), gives_away("Café", "a cafe")
        (True, True)
        >>> gives_away("iron", "It is I R O N."), gives_away("iron", "\u0456ron"), gives_away("iron", "environment")
        (True, True, False)
        >>> gives_away("iron", "Which metal is n-o-r-i?"), gives_away("iron", "Which metal is 9 18 15 14?")
        (True, True)
    """
    if answer_in_text(answer, question):
        return True
    needle = _plain(answer)
    if needle.strip() and f" {needle} " in f" {_plain(question)} ":
        return True
    return leak(answer, question) is not None


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
        if _NOT_SELF_CONTAINED.search(question):
            reasons.append("not_self_contained")
    normalised = [normalize_answer(q) for q in queries if normalize_answer(q)]
    if len(set(normalised)) < rules.min_searches:
        reasons.append("too_few_searches")
    if not rules.allow_duplicate_queries and len(set(normalised)) < len(normalised):
        reasons.append("duplicated_query")
    return reasons
