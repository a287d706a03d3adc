"""Rule filters on proposed questions; each rejection has a named reason.

Reasons: ``no_question`` (the episode ended without ``<question>``), ``question_too_short``,
``question_too_long``, ``answer_in_question`` (the seed answer, or another answer the question
accepts such as a synonym, occurs in the question, written out or encoded; see :func:`gives_away`),
``too_few_searches`` (fewer distinct searches than required), ``duplicated_query`` (the same
normalised query searched twice), ``not_self_contained`` (the question points at documents the
validator is shown, by number, place or what its reader holds, such as "Doc 2", "the third
document", "the titles above" or "the excerpts you can read", gives its reader orders about
searching or answering, such as "without searching" or "reply with", or has a line break or the
tags of the tool protocol: a solver sees no documents until it searches, so such a question is
written for validation alone). That rule lists phrasings; RAG validation's second document order
(:func:`~sparring.envs.search.validation.document_orders`) is what defeats an answer picked by place.
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
#: What a reader's context holds, beyond :data:`_CONTEXT_NOUNS`.
_HELD = (
    r"(?:excerpts?|extracts?|sources?|definitions?|entry|articles?|pages?|materials?|evidence|items?|"
    r"headwords?|records?|hits?|paragraphs?|chunks?|glosses|references|options|candidates|choices|lists?)"
)
_ORDINAL = (
    r"(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|\d+(?:st|nd|rd|th)|"
    r"last|final|penultimate|next|previous|top|bottom|middle|topmost|uppermost|lowest|earliest|latest)"
)
_NUMBER = r"(?:#?\d+|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
_PLACE_NOUNS = r"(?:docs?|documents?|passages?|snippets?|excerpts?|extracts?|results?|hits?|sources?|chunks?)"
_SEARCHING = (
    r"(?:search(?:es|ing)?|look(?:ing)?\s+(?:it\s+|this\s+|that\s+|anything\s+|things\s+)?up|look-?ups?|lookups?|"
    r"retriev\w*|brows\w*|googl\w*|tool\s+calls?|(?:the|a|any|your)\s+(?:search\s+)?tools?|search\s+tools?)"
)
#: A question is read by a solver who sees no documents until it searches: one that points at
#: documents it was shown, addresses what its reader holds, or gives its reader orders about
#: searching or answering, is written for the validator's view alone.
_NOT_SELF_CONTAINED = re.compile(
    "|".join(
        [
            # the tool protocol and chat templates
            r"\n|</?\s*(?:answer|search|question|information|tool_call|tool_response|think)\b|<\|",
            # a document by number or place: "Doc 2", "result #3", "the third excerpt", "the last one shown"
            rf"\b{_PLACE_NOUNS}\s*{_NUMBER}\b|\btitles?\s*:",
            rf"\b{_ORDINAL}\s+(?:(?:\w+|search)\s+)?{_PLACE_NOUNS}\b",
            rf"\b{_ORDINAL}\s+(?:one|of\s+(?:them|these|those))\s+(?:shown|listed|given|above|below|provided)\b",
            # documents shown to the reader: "the titles above", "the passages provided", "these excerpts"
            rf"\b(?:above|below|preceding|following|provided|given|these|those|listed|shown)\s+{_CONTEXT_NOUNS}\b",
            rf"\b(?:above|below|preceding|provided|given|listed|shown|supplied|accompanying|attached|retrieved|"
            rf"available|visible|these|those)\s+{_HELD}\b",
            rf"\b(?:{_CONTEXT_NOUNS}|{_HELD})\s+(?:above|below|provided|given|shown|listed|supplied|here|at\s+hand)\b",
            r"\b(?:described|defined|shown|listed|given|mentioned|named|quoted|presented|provided|cited)\s+"
            r"(?:here|above|below)\b",
            # what the reader holds: "the sources you have", "your excerpts", "you were given", "in front of you"
            rf"\b(?:{_CONTEXT_NOUNS}|{_HELD})\s+(?:(?:that|which)\s+)?you(?:'ve|'re|'d)?\s+(?:have|had|were|are|can|"
            r"could|got|received|read|see|saw|hold|just|now|currently|'ve|been)\b",
            rf"\byour\s+(?:(?:own|current|search|retrieved|given|provided)\s+)?(?:{_CONTEXT_NOUNS}|{_HELD}|prompt|"
            r"input|window|inputs|context\s+window)\b",
            r"\byou(?:'ve|'re|\s+have|\s+are|\s+were|\s+had)?\s+(?:been\s+|being\s+|just\s+)?(?:given|shown|provided|"
            r"handed|supplied|fed|presented)\b",
            r"\b(?:given|shown|provided|supplied|handed|available|visible)\s+to\s+you\b|\bin\s+front\s+of\s+you\b",
            r"\bcontext\s+window\b|\b(?:supplied|provided|given|shown|sent|attached|included)\s+(?:with|alongside)\s+"
            r"(?:this|the)\s+(?:question|prompt|quiz|task)\b|\blooking\s+only\s+at\b",
            # orders about searching: "without searching", "do not use the search tool", "no search is needed"
            rf"\b(?:without|before|instead\s+of)\s+(?:any\s+|a\s+|the\s+|further\s+|more\s+)?(?:using\s+)?{_SEARCHING}",
            rf"\b(?:do\s+not|don'?t|never|no\s+need\s+to|needn'?t|avoid|stop|refrain\s+from|must\s+not|mustn'?t|"
            rf"should\s+not|shouldn'?t)\s+(?:\w+\s+){{0,2}}?(?:{_SEARCHING}|use\s+(?:the|a|any|your)\s+(?:\w+\s+)?tools?)",
            rf"\bno\s+(?:{_SEARCHING}|tools?)\s+(?:is\s+|are\s+)?(?:needed|required|necessary|allowed|permitted)\b",
            rf"\b{_SEARCHING}\s+(?:is|are)\s+(?:not\s+(?:needed|required|necessary|allowed|permitted)|unnecessary|"
            r"forbidden|disabled|off)\b",
            r"\bsearch\s+(?:at\s+least|more|again|twice|several|many|\d+)\b",
            r"\b(?:answer|reply|respond|recall|say|tell|name\s+it)\s+(?:\w+\s+)?from\s+memory\b|^\W*from\s+memory\b",
            r"\b(?:turns?|searches|queries|look-?ups|tool\s+calls|steps|attempts|tries)\s+(?:left|remaining)\b",
            # orders about answering: "reply with", "say 'unknown'", "the correct answer is", "if you are not sure"
            r"\b(?:reply|respond|answer|output)\s+(?:with|only|in|using|exactly)\b",
            r"\b(?:say|answer|reply|respond|write|output|type|put|give|return)\s+(?:just\s+|only\s+|simply\s+)?"
            r"[\"'\u2018\u201c]",
            r"\b(?:correct|right|expected|true|real|official|intended)\s+(?:answer|response|reply|solution)\s+"
            r"(?:here\s+)?(?:is|would\s+be|will\s+be)\b|\b(?:answer|solution)\s*[:=]",
            r"\bif\s+you(?:'re|\s+are)?\s+(?:not\s+sure|unsure|uncertain|unable|stuck|in\s+doubt|can'?t|cannot|"
            r"don'?t\s+know)\b",
            r"\b(?:ignore|disregard)\s+(?:(?:the|all|any|previous|prior|above|your)\s+)*"
            r"(?:instructions?|question|prompt|rules?|documents?|above)\b",
        ]
    ),
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
