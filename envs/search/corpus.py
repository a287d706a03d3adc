"""Retrieval corpora: one on-disk format, three builders, and seed answers.

The format is the Search-R1/FlashRAG JSONL: one JSON object per line with ``"id"`` and
``"contents"`` (``"\\"title\\"\\ntext"``); extra keys (``source``, ``links``, ...) are kept as
metadata. A built corpus is a folder under ``sparring_home()/corpora/NAME``::

    corpus.jsonl   the documents
    offsets.npy    byte offset of each line, so a document is read without loading the file
    info.json      documents, tokens, sources
    seeds.jsonl    seed answers (titles that other documents mention) with the answers each accepts
    heldout.jsonl  the held-out QA set (see ``heldout.py``; its source entries are withheld)
    bm25/          the BM25 index (see ``retrieval.py``)

Builders: the default corpus from Debian's dictd databases, any FlashRAG JSONL file, and a
folder of text/markdown files.
"""

from __future__ import annotations

import json
import mmap
import re
import shutil
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from sparring import SparringError, sparring_home
from sparring.envs.search.documents import format_contents, split_contents
from sparring.envs.search.scoring import EXAMPLE_ANSWERS, normalize_answer

__all__ = [
    "CORPUS_FORMAT",
    "DEFAULT_CORPUS",
    "Corpus",
    "build_corpus",
    "built_format",
    "corpus_dir",
]

#: Version of the on-disk format, in ``info.json``: 2 added each seed's accepted answers and bars
#: a seed one of whose answers is held out; 3 drops answers that normalise to nothing and bars
#: seeds that accept a prompt's example answer; 4 reads a dictd reference wrapped onto two lines
#: as one term (no braces or line breaks in texts, links and accepted answers). A corpus of
#: another format must be rebuilt.
CORPUS_FORMAT = 4
#: Name of the corpus that setup builds and the envs use when given none.
DEFAULT_CORPUS = "default"
#: dictd databases of the default corpus.
DEFAULT_SOURCES = ("foldoc", "jargon", "gcide", "wn", "elements", "vera", "devil")
#: A title is a seed answer when at least this many other documents mention it.
MIN_SEED_MENTIONS = 3
#: ... and at most this many: more are markup artefacts, not references to an entity.
MAX_SEED_MENTIONS = 1000
_SEED_MAX_WORDS = 4
_SEED_TITLE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9]*\.?(?:[ -][A-Za-z0-9]+\.?)*$")
_TEXT_SUFFIXES = {".txt", ".md", ".markdown", ".rst"}


def built_format(folder: Path) -> int:
    """The format a corpus folder was built in (``info.json``'s ``"format"``; 1 before it was written)."""
    info = Path(folder) / "info.json"
    return int(json.loads(info.read_text()).get("format", 1)) if info.is_file() else 1


def corpus_dir(name_or_path: str | Path = DEFAULT_CORPUS) -> Path:
    """Folder of a built corpus: a path as given, or ``sparring_home()/corpora/NAME``."""
    path = Path(name_or_path)
    if path.is_dir() or path.is_absolute() or len(path.parts) > 1:
        return path
    return sparring_home() / "corpora" / str(name_or_path)


class Corpus:
    """A built corpus, read lazily: documents come from a memory map of ``corpus.jsonl``.

    Example:
        >>> corpus = Corpus.open()              # the default corpus  # doctest: +SKIP
        >>> corpus.document(0)["id"]            # doctest: +SKIP
        'foldoc:!'
    """

    def __init__(self, folder: Path):
        """Open the corpus in ``folder`` (built by :func:`build_corpus`)."""
        self.folder = Path(folder)
        self.path = self.folder / "corpus.jsonl"
        if not self.path.is_file() or not (self.folder / "offsets.npy").is_file():
            raise SparringError(
                f"no built corpus in {self.folder}; run `sparring corpus build` (or `sparring setup --for test`)."
            )
        self._offsets = np.load(self.folder / "offsets.npy")  # 8 bytes a document: plain memory is faster
        self._file = open(self.path, "rb")  # noqa: SIM115 - held for the mmap's lifetime
        self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        self._seeds: list[dict[str, Any]] | None = None

    @classmethod
    def open(cls, name_or_path: str | Path = DEFAULT_CORPUS) -> Corpus:
        """Open a corpus by name (under ``sparring_home()/corpora``) or by folder."""
        return cls(corpus_dir(name_or_path))

    def __len__(self) -> int:
        return int(self._offsets.shape[0])

    def document(self, index: int) -> dict[str, Any]:
        """The document at position ``index`` (the JSON object of its line)."""
        start = int(self._offsets[index])
        end = int(self._offsets[index + 1]) if index + 1 < len(self) else len(self._map)
        return json.loads(self._map[start:end])

    def documents(self) -> Iterator[dict[str, Any]]:
        """Every document in order."""
        for i in range(len(self)):
            yield self.document(i)

    def contents(self) -> Iterator[str]:
        """The ``contents`` of every document in order."""
        for doc in self.documents():
            yield doc["contents"]

    @property
    def info(self) -> dict[str, Any]:
        """The statistics written at build time (documents, tokens, sources)."""
        return json.loads((self.folder / "info.json").read_text())

    def seeds(self) -> list[dict[str, Any]]:
        """Seed answers: ``{"answer", "answers", "doc", "index", "mentions"}`` for titles mentioned by
        other documents; ``answers`` are what a question about the seed's entry accepts (the title
        first, then, for WordNet, the first sense's synonyms)."""
        if self._seeds is None:
            path = self.folder / "seeds.jsonl"
            if path.is_file():
                self.require_current_format()
            self._seeds = [json.loads(line) for line in path.open()] if path.is_file() else []
        return self._seeds

    def require_current_format(self) -> None:
        """Raise one clear SparringError when the corpus was built in another format than :data:`CORPUS_FORMAT`."""
        built = built_format(self.folder)
        if built != CORPUS_FORMAT:
            raise SparringError(
                f"the corpus in {self.folder} was built in an older format ({built}, now {CORPUS_FORMAT}: "
                "seeds with their accepted answers); rebuild it with `sparring corpus build` "
                "(`sparring setup` rebuilds the default one)."
            )

    def close(self) -> None:
        """Release the memory map (idempotent)."""
        if not self._map.closed:
            self._map.close()
            self._file.close()


# --------------------------------------------------------------------------- builders


def _dictd_documents(sources: Iterable[str]) -> Iterator[dict[str, Any]]:
    from sparring.envs.search.dictd import fetch_databases, read_database

    names = list(sources)
    folders = fetch_databases(names)
    for name in names:
        used: Counter[str] = Counter()
        for entry in read_database(folders[name], name):
            used[entry.title] += 1
            suffix = f"#{used[entry.title]}" if used[entry.title] > 1 else ""
            yield {
                "id": f"{name}:{entry.title}{suffix}",
                "contents": format_contents(entry.title, entry.text),
                "source": name,
                "title": entry.title,
                "headwords": entry.headwords,
                "links": entry.links,
            }


def _jsonl_documents(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
            except json.JSONDecodeError as e:
                raise SparringError(f"{path}:{lineno}: not valid JSON ({e.msg}); fix or remove the line.") from None
            if not isinstance(doc, dict) or not isinstance(doc.get("contents"), str) or "id" not in doc:
                raise SparringError(
                    f'{path}:{lineno}: a corpus line must be an object with "id" and a string "contents".'
                )
            doc["id"] = str(doc["id"])
            title, _ = split_contents(doc["contents"])
            doc.setdefault("source", path.stem)
            doc.setdefault("title", title)
            yield doc


def _folder_documents(root: Path) -> Iterator[dict[str, Any]]:
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in _TEXT_SUFFIXES)
    if not files:
        raise SparringError(f"{root} holds no .txt/.md/.rst files; point --source at a folder of text files.")
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
        heading = re.match(r"#+\s+(.+)", text)
        title = heading.group(1).strip() if heading else path.stem.replace("_", " ").replace("-", " ")
        rel = path.relative_to(root).as_posix()
        yield {"id": rel, "contents": format_contents(title, text), "source": root.name, "title": title}


def _documents(source: str) -> tuple[Iterator[dict[str, Any]], str]:
    """The documents of ``source`` and a short description of it."""
    if source in {"default", "dictd"}:
        return _dictd_documents(DEFAULT_SOURCES), "dictd:" + ",".join(DEFAULT_SOURCES)
    if source.startswith("dictd:"):
        names = [n for n in source[len("dictd:") :].split(",") if n]
        return _dictd_documents(names), source
    path = Path(source).expanduser()
    if path.is_dir():
        return _folder_documents(path), f"folder:{path}"
    if path.is_file():
        return _jsonl_documents(path), f"jsonl:{path}"
    raise SparringError(f"corpus source {source!r} is neither 'default', 'dictd:NAME,...', a JSONL file nor a folder.")


def _mentions(titles: dict[str, int], texts: Iterable[tuple[int, str, list[str]]]) -> Counter[str]:
    """How many documents other than a title's own mention it (by link, else by n-gram)."""
    counts: Counter[str] = Counter()
    for index, text, links in texts:
        if links:
            found = {normalize_answer(link) for link in links}
        else:
            words = normalize_answer(text).split()
            found = {
                " ".join(words[i : i + n])
                for n in range(1, _SEED_MAX_WORDS + 1)
                for i in range(len(words) - n + 1)
                if " ".join(words[i : i + n]) in titles
            }
        for key in found:
            if key in titles and titles[key] != index:
                counts[key] += 1
    return counts


def _seed_candidate(title: str) -> bool:
    """A title that reads as an answer: 1-4 plain words (no markup, symbols or stress marks)."""
    return len(title.split()) <= _SEED_MAX_WORDS and 3 <= len(title) <= 40 and bool(_SEED_TITLE_RE.match(title))


def _write_seeds(folder: Path, is_barred: Callable[[str], bool]) -> int:
    """Write ``seeds.jsonl``: each candidate title's first entry, with the answers it accepts.

    A title is barred when any of its entries accepts a barred answer (``is_barred``: held out, or
    a prompt's example). A WordNet synonym that is a held-out headword shares the held-out
    question's gloss, so neither a drawn question nor a proposer's question may be made from it.
    """
    from sparring.envs.search.heldout import accepted_answers

    corpus = Corpus(folder)
    try:
        titles: dict[str, int] = {}
        display: dict[str, tuple[str, str, list[str]]] = {}
        barred_keys: set[str] = set()
        for i, doc in enumerate(corpus.documents()):
            title = doc.get("title") or split_contents(doc["contents"])[0]
            key = normalize_answer(title)
            if not key or key in barred_keys or not _seed_candidate(title):
                continue
            answers = accepted_answers(doc | {"title": title})
            if any(map(is_barred, answers)):
                barred_keys.add(key)
                titles.pop(key, None)
                display.pop(key, None)
            elif key not in titles:
                titles[key] = i
                display[key] = (title, doc["id"], answers)
        texts = ((i, split_contents(d["contents"])[1], d.get("links") or []) for i, d in enumerate(corpus.documents()))
        counts = _mentions(titles, texts)
    finally:
        corpus.close()
    seeds = [
        {"answer": display[k][0], "answers": display[k][2], "doc": display[k][1], "index": titles[k], "mentions": n}
        for k, n in sorted(counts.items())
        if MIN_SEED_MENTIONS <= n <= MAX_SEED_MENTIONS
    ]
    with (folder / "seeds.jsonl").open("w") as fh:
        for seed in seeds:
            fh.write(json.dumps(seed, ensure_ascii=False) + "\n")
    return len(seeds)


def _write_documents(
    work: Path, documents: Iterable[dict[str, Any]], described: str, heldout: bool = True
) -> dict[str, Any]:
    """Write ``corpus.jsonl``, ``offsets.npy`` and ``heldout.jsonl``; return the statistics.

    A held-out question's own entry is withheld from the corpus. Which questions are kept is known
    only once every document has been read (a question must stay answerable), so the candidates
    are buffered and the entries of questions not kept are written at the end. Without
    ``heldout`` every document is written as it comes and the held-out set is empty.
    """
    from sparring.envs.search.heldout import heldout_row, save_heldout, select_heldout

    offsets: list[int] = []
    sources: Counter[str] = Counter()
    tokens = 0
    seen: set[str] = set()
    candidates: list[tuple[dict[str, Any], dict[str, Any]]] = []
    known: set[str] = set()  # normalised titles and cross-references of the kept documents
    with (work / "corpus.jsonl").open("wb") as fh:

        def write(doc: dict[str, Any]) -> None:
            nonlocal tokens
            offsets.append(fh.tell())
            fh.write(json.dumps(doc, ensure_ascii=False).encode("utf-8") + b"\n")
            sources[str(doc.get("source", ""))] += 1
            tokens += len(doc["contents"].split())

        for doc in documents:
            if doc["id"] in seen:
                raise SparringError(f"document id {doc['id']!r} occurs twice in {described}; ids must be unique.")
            seen.add(doc["id"])
            row = heldout_row(doc) if heldout else None
            if row is not None:
                candidates.append((row, doc))
                continue
            known.add(normalize_answer(doc.get("title") or ""))
            known.update(normalize_answer(link) for link in doc.get("links") or [])
            write(doc)
        chosen = select_heldout([row for row, _ in candidates], known)
        withheld = {row["doc"] for row in chosen}
        for _, doc in candidates:
            if doc["id"] not in withheld:
                write(doc)
    if not offsets:
        raise SparringError(f"{described} yielded no documents; check the source.")
    np.save(work / "offsets.npy", np.asarray(offsets, dtype=np.int64))
    save_heldout(work, chosen)
    return {"documents": len(offsets), "tokens": tokens, "sources": sources, "heldout": len(chosen)}


def build_corpus(
    source: str = "default",
    name: str | None = None,
    *,
    finish: Callable[[Path], object] | None = None,
    progress: Callable[[str], None] = lambda _: None,
    heldout: bool = True,
) -> Path:
    """Build a corpus from ``source`` into ``corpus_dir(name)`` and return its folder.

    Args:
        source: ``"default"`` (Debian dictd databases), ``"dictd:foldoc,jargon"``, a FlashRAG
            JSONL file, or a folder of text/markdown files.
        name: Corpus name or folder; defaults to ``"default"`` for the default source, else the
            source's file or folder name.
        finish: Called with the build folder before it is moved into place, to add what belongs
            with the documents (``sparring corpus build`` passes the BM25 index builder), so a
            failed index build also leaves an earlier build intact.
        progress: Called with a line of text at each stage.
        heldout: Make the held-out QA set (withholding its entries). A user's own corpus
            (``sparring corpus add``) keeps every document: its questions come from a file
            (``sparring eval search --questions``), so its held-out set is empty.

    The corpus is written to a temporary folder next to the target and moved into place at the
    end, so a failed build leaves an earlier build intact.
    """
    from sparring.envs.search.heldout import is_heldout, load_heldout

    documents, described = _documents(source)
    if name is None:
        name = DEFAULT_CORPUS if source in {"default", "dictd"} else Path(source).stem or "corpus"
    target = corpus_dir(name)
    work = target.with_name(target.name + ".building")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        progress(f"reading {described}")
        info: dict[str, Any] = {"name": name, "source": described, "format": CORPUS_FORMAT}
        info |= _write_documents(work, documents, described, heldout)
        held = {normalize_answer(a) for row in load_heldout(work) for a in row["answers"]}
        progress(f"{info['documents']} documents, {info['heldout']} held-out questions; finding seed answers")
        # The answers the prompts show as examples are never a seed's: a copied example is no answer.
        barred = held | {normalize_answer(a) for a in EXAMPLE_ANSWERS}
        info["seeds"] = _write_seeds(
            work, lambda title: (heldout and is_heldout(title)) or normalize_answer(title) in barred
        )
        (work / "info.json").write_text(json.dumps(info, indent=2))
        if finish is not None:
            progress("building the index")
            finish(work)
        if target.exists():
            old = target.with_name(target.name + ".old")
            shutil.rmtree(old, ignore_errors=True)
            target.rename(old)
            work.rename(target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            work.rename(target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return target
