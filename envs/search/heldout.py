"""The held-out QA set: questions no seed answer can overlap.

A headword is held out when a stable hash of its normalised form falls in the lowest
``HELDOUT_PERMILLE`` thousandths (SHA-256, so the split is the same on every machine and every
build). Held-out headwords are never seed answers for the proposer; their entries become
definition → term questions whose answer is the entry's title:

* WordNet: ``Which word or phrase means "<first gloss>"?``
* FOLDOC / Jargon File: ``Which computing term is described as "<first sentence>"?``
* Elements: ``Which chemical element has the symbol X?``
* Any other corpus (JSONL, folder): ``Which entry is described as "<first sentence>"?``

A question that contains its own answer (after normalisation) is skipped. GCIDE is left out
because its entries begin with etymologies rather than definitions (WordNet covers the same
words). The entry a question is made from is withheld from the corpus, so the question's text
cannot be found verbatim: the solver has to reach the answer through other entries (GCIDE's entry
for the same word, cross-references, synonyms). A question is kept only if one of its answers is
still the title or a cross-reference of some remaining document, so every question is answerable
from the corpus; the entries of questions not kept (unanswerable, or beyond ``MAX_QUESTIONS``)
stay in the corpus.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from sparring import SparringError
from sparring.envs.search.documents import split_contents
from sparring.envs.search.scoring import answer_in_text, normalize_answer

__all__ = [
    "HELDOUT_PERMILLE",
    "accepted_answers",
    "heldout_row",
    "is_heldout",
    "load_heldout",
    "load_questions",
    "question_for",
    "save_heldout",
    "select_heldout",
]

#: Share of headwords held out, in thousandths.
HELDOUT_PERMILLE = 20
#: At most this many held-out questions are written.
MAX_QUESTIONS = 1000
_MAX_QUESTION_CHARS = 300
_WN_GLOSS_RE = re.compile(r"^\s*(?:n|v|adj|adv)\s+(?:1:\s*)?(.+?)(?=\s+2:|\[syn:|\[ant:|\[also:|$)", re.DOTALL)
_SENTENCE_RE = re.compile(r"(.+?[.!?])(?:\s|$)", re.DOTALL)


def _hash(title: str) -> int:
    return int.from_bytes(hashlib.sha256(normalize_answer(title).encode()).digest()[:8], "big")


def is_heldout(title: str) -> bool:
    """Whether this headword belongs to the held-out set (stable across machines and builds)."""
    return _hash(title) % 1000 < HELDOUT_PERMILLE


def _first_sentence(text: str) -> str:
    text = " ".join(text.split())
    m = _SENTENCE_RE.match(text)
    return (m.group(1) if m else text).strip()


def _body(text: str, title: str) -> str:
    """The entry without its heading lines (title, aliases, pronunciation, category tags)."""
    paragraphs = [p for p in re.split(r"\n\s*\n", text) if p.strip()]
    if len(paragraphs) > 1 and len(paragraphs[0]) <= 2 * len(title) + 80:
        paragraphs = paragraphs[1:]
    body = " ".join(paragraphs)
    body = re.sub(r"<[^<>]{1,60}>", " ", body)  # FOLDOC's <category, tags>
    body = re.sub(r"^\s*(?:/[^/]{1,40}/,?\s*)?(?:(?:n|v|adj|adv|vt|vi|interj)\.,?\s*)*", "", body)
    return " ".join(body.split())


def question_for(doc: dict[str, Any]) -> str | None:
    """A definition → term question whose answer is the document's title, or None."""
    title = doc.get("title") or ""
    source = doc.get("source", "")
    text = doc["contents"].partition("\n")[2]
    if source == "elements":
        m = re.search(r"Symbol:\s*(\w+)", text)
        question = f"Which chemical element has the symbol {m.group(1)}?" if m else None
    elif source == "wn":
        m = _WN_GLOSS_RE.match(text.partition("\n")[2] if text.startswith(title) else text)
        gloss = " ".join(m.group(1).split()).split(";")[0].strip() if m else ""
        question = f'Which word or phrase means "{gloss}"?' if len(gloss) >= 15 else None
    elif source == "gcide":
        question = None
    else:
        sentence = _first_sentence(_body(text, title))
        kind = "computing term" if source in {"foldoc", "jargon"} else "entry"
        question = f'Which {kind} is described as "{sentence}"?' if len(sentence) >= 20 else None
    if question is None or len(question) > _MAX_QUESTION_CHARS or answer_in_text(title, question):
        return None
    return question


def accepted_answers(doc: dict[str, Any]) -> list[str]:
    """The answers a definition question of ``doc`` accepts: the title, plus for WordNet the
    synonyms of the first sense (they share the gloss the question quotes) that normalise to
    something (adenine's synonym "A" is an article to SQuAD normalisation, so it would accept an
    empty answer)."""
    answers = [doc["title"]]
    if doc.get("source") == "wn":
        m = re.search(r"\[syn:([^\]]*)\]", doc["contents"])
        if m and not re.search(r"\s2:", doc["contents"][: m.start()]):
            answers += [w.strip() for w in m.group(1).split(",") if normalize_answer(w)]
    return list(dict.fromkeys(answers))


def heldout_row(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The held-out question of a document, or None when its headword is not held out or no question fits."""
    title = doc.get("title") or split_contents(doc["contents"])[0]
    if not normalize_answer(title) or len(title.split()) > 4 or not is_heldout(title):
        return None
    question = question_for(doc | {"title": title})
    if question is None:
        return None
    return {"question": question, "answers": accepted_answers(doc | {"title": title}), "doc": doc["id"]}


def select_heldout(rows: list[dict[str, Any]], known: set[str]) -> list[dict[str, Any]]:
    """The answerable rows (an answer is a ``known`` normalised title or cross-reference of the
    corpus), one per answer, ordered by hash, at most ``MAX_QUESTIONS``, numbered ``heldout-NNNN``.
    """
    best: dict[str, dict[str, Any]] = {}
    for row in rows:
        key = normalize_answer(row["answers"][0])
        if key not in best and any(normalize_answer(a) in known for a in row["answers"]):
            best[key] = row
    ordered = sorted(best.values(), key=lambda r: _hash(r["answers"][0]))[:MAX_QUESTIONS]
    return [{"id": f"heldout-{n:04d}", **row} for n, row in enumerate(ordered)]


def save_heldout(folder: Path, rows: list[dict[str, Any]]) -> None:
    """Write ``heldout.jsonl`` in ``folder``."""
    with (Path(folder) / "heldout.jsonl").open("w") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def load_heldout(folder: Path, limit: int | None = None) -> list[dict[str, Any]]:
    """The held-out questions of the corpus in ``folder`` (``{"id", "question", "answers", "doc"}``)."""
    path = Path(folder) / "heldout.jsonl"
    if not path.is_file():
        raise SparringError(f"{path} is missing; rebuild the corpus with `sparring corpus build`.")
    rows = [json.loads(line) for line in path.open()]
    return rows[:limit] if limit else rows


def load_questions(path: str | Path, limit: int | None = None) -> list[dict[str, Any]]:
    """Questions from a FlashRAG QA JSONL file, as held-out rows (``{"id", "question", "answers", ...}``).

    FlashRAG ships NQ, TriviaQA, PopQA, HotpotQA, 2WikiMultihopQA, MuSiQue and Bamboogle (the sets
    Search-R1 reports) one question a line: ``{"id", "question", "golden_answers": [...],
    "metadata": {...}}``. A line without an ``id`` is numbered by its line; ``metadata.type``
    (HotpotQA's bridge/comparison, 2Wiki's ...) becomes the row's ``type``, and the file's name its
    ``dataset``. Answers that normalise to nothing are dropped (they would match nothing).

    Raises:
        SparringError: The file is missing, a line is not such a question (named by file and
            line), an id occurs twice, or the file holds no question.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise SparringError(f"no questions file at {path}; pass a FlashRAG QA JSONL file to --questions.")
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                item = json.loads(line)
            except json.JSONDecodeError as e:
                raise SparringError(f"{where}: not valid JSON ({e.msg}); fix or remove the line.") from None
            row = _question_row(item, where, path.stem, lineno)
            if row["id"] in seen:
                raise SparringError(f"{where}: the id {row['id']!r} occurs twice; question ids must be unique.")
            seen.add(row["id"])
            rows.append(row)
            if limit and len(rows) >= limit:
                break
    if not rows:
        raise SparringError(f"{path} holds no question; it needs one JSON object a line.")
    return rows


def _question_row(item: Any, where: str, dataset: str, lineno: int) -> dict[str, Any]:
    """One FlashRAG question line as a held-out row (see :func:`load_questions`)."""
    fix = 'a question line is {"id", "question": TEXT, "golden_answers": [TEXT, ...]}'
    if not isinstance(item, dict) or not isinstance(item.get("question"), str) or not item["question"].strip():
        raise SparringError(f"{where}: no question text; {fix}.")
    golden = item.get("golden_answers", item.get("answers"))
    if isinstance(golden, (str, int, float)):
        golden = [golden]
    if not isinstance(golden, list) or not all(isinstance(a, (str, int, float)) for a in golden):
        raise SparringError(f"{where}: golden_answers is not a list of answers; {fix}.")
    answers = list(dict.fromkeys(str(a).strip() for a in golden if normalize_answer(str(a))))
    if not answers:
        raise SparringError(f"{where}: no golden answer that normalises to a word; {fix}.")
    row: dict[str, Any] = {
        "id": str(item.get("id", f"{dataset}-{lineno}")),
        "question": item["question"].strip(),
        "answers": answers,
        "dataset": dataset,
    }
    metadata = item.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("type"), str):
        row["type"] = metadata["type"]
    return row
