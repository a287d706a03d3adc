"""Scripted agents that play each role well enough to teach it: the warm start's demonstrators.

They act only through the env's tools, like a model would, so the runner records their episodes
in the same format and the trainer learns from the successful ones (the warm start: docs/training.md):

* :class:`DefinitionSearchAgent` (search solver): search the quoted definition when the question
  has one (else the whole question), answer the first result's title;
* :class:`DefinitionMatchAgent` (search solver, the warm start's): the same search, but answer the
  first result whose text holds the quoted definition word for word (else the first result);
* :class:`DefinitionProposerAgent` (search proposer): search the seed answer, read its entry,
  search the definition, ask for the term the definition describes;
* :class:`~sparring.agents.scripted.OracleAgent` (SWE solver): apply the reverse of the bug's diff
  with ``bash``, submit;
* :class:`StoredBugAgent` (SWE injector): write a validated procedural bug's five artifact files
  with ``bash`` and submit them;
* :class:`KnownJudgementAgent` (judge, both games): answer the judgement it was handed, built from the
  judged episode's real outcome.
"""

from __future__ import annotations

import re
from typing import Any

from sparring.agents.scripted import RetrievalFloorAgent, _call, copied_title

__all__ = [
    "DefinitionMatchAgent",
    "DefinitionProposerAgent",
    "DefinitionSearchAgent",
    "KnownJudgementAgent",
    "StoredBugAgent",
]

_QUOTED = re.compile(r'"([^"]{12,})"')
_DOC = re.compile(r"(?:<information>)?Doc \d+ \(Title: (.*?)\) (.*?)(?:</information>)?$")
#: What an entry puts before its definition: the headword, a pronunciation, part-of-speech tags.
_HEADING = re.compile(
    r"^.*?(?:(?:\b(?:n|v|adj|adv|a|vt|vi|t|i|pl|prep|conj|interj|pron)\b\.?,?\s*)+(?:\d+:)?|\d+:)\s*", re.IGNORECASE
)
_EOF = "SPARRING_EOF"


def _docs(observation: str) -> list[tuple[str, str]]:
    """(title, text) of each document in a search result."""
    return [(m.group(1), m.group(2)) for m in map(_DOC.match, observation.splitlines()) if m]


class DefinitionSearchAgent(RetrievalFloorAgent):
    """The retrieval floor, but searching the question's quoted definition when it has one."""

    name = "definition-search"

    def query(self) -> str:
        """The quoted definition (at least 12 characters), else the whole question."""
        quoted = _QUOTED.search(self._question)
        return quoted.group(1) if quoted else self._question


def _words(text: str) -> str:
    """Lower-case words and numbers only, one space apart: what comparing a definition with an entry needs."""
    return " ".join(re.sub(r"[^a-z0-9]+", " ", text.lower()).split())


class DefinitionMatchAgent(DefinitionSearchAgent):
    """Search the quoted definition; answer the first result whose text holds it, else the first result.

    The search ranks an entry that shares the definition's words above the one that is defined by it
    for about one question in fifteen (a headword's related adjective, a longer phrase); the defined
    entry is then second or third, its text the definition word for word. Reading the results for
    it is what a policy can learn beyond searching well (on the held-out questions: EM 0.723, against
    0.676 for the first result, of 0.743 where the answer is among the three).
    """

    name = "definition-match"

    def act(self, observation: str, info: dict[str, Any]) -> str:
        """Search first; then answer the title of the entry that holds the definition."""
        quoted = _QUOTED.search(self._question)
        docs = _docs(observation) if self._searched else []
        if not (quoted and docs):
            return super().act(observation, info)
        wanted = _words(quoted.group(1))
        title = next((title for title, text in docs if wanted in _words(text)), docs[0][0])
        return f"<answer>{copied_title(title)}</answer>"


class DefinitionProposerAgent:
    """Search the seed answer, find its entry, search its definition, ask which term it describes."""

    name = "definition-proposer"

    def __init__(self) -> None:
        """No state beyond the current seed answer."""
        self._answer = ""
        self._sentence = ""
        self._turn = 0

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        """Read the seed answer of the new episode."""
        self._answer = str((info.get("task") or {}).get("answer", ""))
        self._sentence = ""
        self._turn = 0

    def act(self, observation: str, info: dict[str, Any]) -> str:
        """Three turns: search the answer, search its definition, write the question."""
        from sparring.envs.search.scoring import normalize_answer

        self._turn += 1
        if self._turn == 1:
            return f"<search>{self._answer}</search>"
        if self._turn == 2:
            docs = _docs(observation)
            own = [text for title, text in docs if normalize_answer(title) == normalize_answer(self._answer)]
            self._sentence = next((d for d in (_definition(text, self._answer) for text in own) if d), "")
            return f"<search>{self._sentence or self._answer + ' meaning'}</search>"
        if not self._sentence:  # no question to ask: an empty one, which the rules reject, so no demonstration
            return "<question></question>"
        return f'<question>Which term is described as "{self._sentence}"?</question>'


def _definition(text: str, answer: str) -> str:
    """The first sentence of an entry's definition, without its heading; empty if it names the answer."""
    from sparring.envs.search.scoring import answer_in_text

    text = " ".join(text.split())
    if text.lower().startswith(answer.lower()):
        text = text[len(answer) :]
    text = re.sub(r"\\[^\\]{1,40}\\,?", " ", text)  # pronunciation
    for _ in range(3):  # etymology, inside out: GCIDE nests accents ([=o]) in its brackets
        text = re.sub(r"\[[^\[\]]{0,400}\]", " ", text)
    text = re.sub(r"\([^)]{0,40}\)", " ", text)
    heading = _HEADING.match(text)
    if heading and heading.end() < 80:
        text = text[heading.end() :]
    text = re.sub(r"^\s*\d+\.\s*", "", text)  # a numbered first sense
    text = re.split(r';?\s*"', text.strip(), maxsplit=1)[0]  # a usage example in quotes
    sentence = re.split(r"(?<=[.!?])\s|\s\d+:\s|\s\[", text, maxsplit=1)[0].strip(" ;.")
    parts = sentence.split(";")  # the first clause, or more while it is too short to identify the entry
    sentence = next((";".join(parts[:k]) for k in range(1, len(parts) + 1) if len(";".join(parts[:k])) >= 15), "")
    sentence = " ".join(sentence.split()).strip(" ;.")
    if len(sentence) < 15 or answer_in_text(answer, sentence):
        return ""
    return sentence[:200]


class StoredBugAgent:
    """Write a stored, validated bug of the task's repository as an artifact folder, then submit it.

    Args:
        bugs: Repository name -> artifact dicts (``BugArtifact.to_dict()``) to choose from.
        seed: Which of a repository's bugs each episode takes (in turn).
    """

    name = "stored-bug"

    def __init__(self, bugs: dict[str, list[dict[str, Any]]], seed: int = 0):
        """Remember the bugs to replay."""
        self.bugs = bugs
        self._next = seed
        self._artifact: dict[str, Any] | None = None
        self._turn = 0

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        """Pick a bug of the task's repository."""
        choices = self.bugs.get(str((info.get("task") or {}).get("repo", "")), [])
        self._artifact = choices[self._next % len(choices)] if choices else None
        self._next += 1
        self._turn = 0

    def act(self, observation: str, info: dict[str, Any]) -> str:
        """One bash call writes the five files; the next submits the folder."""
        self._turn += 1
        if self._artifact is None:
            return "<submit>/tmp/none</submit>"
        if self._turn > 1:
            return "<submit>/tmp/bug</submit>"
        a = self._artifact
        files = {
            "test_script.sh": a["test_script"],
            "test_files.txt": "".join(f"{f}\n" for f in a["test_files"]),
            "bug_inject.diff": a["bug_inject_diff"],
            "test_weaken.diff": a["test_weaken_diff"],
        }
        if a.get("test_parser"):
            files["test_parser.py"] = a["test_parser"]
        writes = "".join(f"cat > /tmp/bug/{name} <<'{_EOF}'\n{text}{'' if text.endswith(chr(10)) else chr(10)}{_EOF}\n"
                         for name, text in files.items())  # fmt: skip
        return f"<bash>mkdir -p /tmp/bug\n{writes}ls /tmp/bug</bash>"


class KnownJudgementAgent:
    """The judge demonstrator: it answers the judgement it was handed for the task, one ``judge`` call.

    It is told each judge task's judgement by id (the warm start builds them from the solver episodes' real
    outcomes, so they are right by construction); a task it was not told about gets "not solved" with every turn
    neutral.

    Args:
        judgements: Judge task id -> (verdict, one assessment per turn).
    """

    name = "known-judgement"

    def __init__(self, judgements: dict[str, tuple[str, list[str]]] | None = None):
        """Remember the judgements to give."""
        self.judgements = dict(judgements or {})
        self._call = ""

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        """Look the task's judgement up."""
        task = info.get("task") or {}
        default = ("not solved", ["neutral"] * len(task.get("turns") or []))
        verdict, words = self.judgements.get(str(task.get("id")), default)
        self._call = _call("judge", verdict=verdict, assessments=" ".join(words))

    def act(self, observation: str, info: dict[str, Any]) -> str:
        """The judgement, in the JSON form the judge tool takes."""
        return self._call
