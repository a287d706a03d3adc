"""The corpus builders and the default corpus from Debian's dictd databases."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sparring import SparringError
from sparring.envs.search.corpus import CORPUS_FORMAT, Corpus, _write_seeds, build_corpus
from sparring.envs.search.dictd import decode_offset, read_database
from sparring.envs.search.documents import format_contents, split_contents
from sparring.envs.search.heldout import accepted_answers, is_heldout, load_heldout
from sparring.envs.search.retrieval import BM25Retriever, build_bm25
from sparring.envs.search.scoring import EXAMPLE_ANSWERS, answer_in_text, normalize_answer


def test_default_corpus_has_every_dictd_source_and_over_100k_documents(corpus: Corpus):
    info = corpus.info
    assert info["documents"] == len(corpus) > 100_000
    for source in ("foldoc", "jargon", "gcide", "wn", "elements"):
        assert info["sources"][source] > 0, source
    assert info["tokens"] > 1_000_000


def test_documents_are_flashrag_records_with_cross_references(corpus: Corpus, bm25: BM25Retriever):
    hit = bm25.retrieve(["Jargon File"], 1)[0][0]
    doc = corpus.document(hit.index)
    assert doc["id"] == "foldoc:Jargon File" and doc["source"] == "foldoc"
    title, text = split_contents(doc["contents"])
    assert title == "Jargon File" and "Eric S. Raymond" in text
    # FOLDOC's {term} cross-references stay as plain text and are listed as links
    assert "{" not in text
    assert "Eric S. Raymond" in doc["links"] and all(link in text for link in doc["links"])


@pytest.mark.parametrize(
    ("query", "entry"),
    [("daemon", "daemon"), ("Jargon File", "Jargon File"), ("lambda calculus", "lambda-calculus"), ("unix", "Unix")],
)
def test_a_foldoc_term_returns_its_entry_first(bm25: BM25Retriever, query: str, entry: str):
    hits = bm25.retrieve([query], 5)[0]
    assert hits[0].id == f"foldoc:{entry}", [h.id for h in hits]
    assert hits[0].score >= hits[1].score


def test_seed_answers_are_mentioned_elsewhere_and_never_held_out(corpus: Corpus):
    seeds = corpus.seeds()
    assert len(seeds) > 1000
    held = {normalize_answer(a) for row in load_heldout(corpus.folder) for a in row["answers"]}
    for seed in seeds[::50]:
        assert seed["mentions"] >= 3
        assert corpus.document(seed["index"])["id"] == seed["doc"]
    examples = {normalize_answer(a) for a in EXAMPLE_ANSWERS}  # "mars" was a seed
    for seed in seeds:  # no accepted answer (a WordNet synonym included) is held out or a prompt's example
        assert seed["answers"][0] == seed["answer"]
        assert not any(is_heldout(a) or normalize_answer(a) in held | examples for a in seed["answers"]), seed
    assert sum(len(seed["answers"]) > 1 for seed in seeds) > 1000


def test_a_seed_whose_entry_accepts_a_held_out_answer_is_barred(tmp_path: Path):
    # A WordNet entry whose synonym is a held-out answer shares that held-out question's gloss, so
    # its title is no seed, even where another entry of the same title accepts nothing held out.
    def wn(title: str, syns: str) -> dict:
        contents = f'"{title}"\n{title}\nn 1: a thing of the test\n[syn: {syns}]'
        return {"id": f"wn:{title}", "contents": contents, "source": "wn", "title": title}

    docs = [
        {"id": "gcide:Alpha", "contents": '"Alpha"\nAlpha\nThe first.', "source": "gcide", "title": "Alpha"},
        wn("Alpha", "Alpha, Heldword"),
        wn("Beta", "Beta, Gamma"),
    ] + [{"id": f"note{n}", "contents": f'"Note {n}"\nAlpha and Beta.', "links": ["Alpha", "Beta"]} for n in range(3)]
    with (tmp_path / "corpus.jsonl").open("wb") as fh:
        offsets = []
        for doc in docs:
            offsets.append(fh.tell())
            fh.write(json.dumps(doc).encode() + b"\n")
    np.save(tmp_path / "offsets.npy", np.asarray(offsets, dtype=np.int64))
    assert _write_seeds(tmp_path, lambda title: title == "Heldword") == 1
    (seed,) = [json.loads(line) for line in (tmp_path / "seeds.jsonl").open()]
    assert (seed["answer"], seed["answers"], seed["doc"]) == ("Beta", ["Beta", "Gamma"], "wn:Beta")


def test_a_corpus_of_an_older_format_asks_to_be_rebuilt(corpus: Corpus, tmp_path: Path):
    old = tmp_path / "old"
    old.mkdir()
    for name in ("corpus.jsonl", "offsets.npy"):
        (old / name).symlink_to(corpus.folder / name)
    (old / "seeds.jsonl").write_text(json.dumps({"answer": "iron", "doc": "wn:iron", "index": 0, "mentions": 3}) + "\n")
    (old / "info.json").write_text(json.dumps({"documents": len(corpus)}))
    with pytest.raises(SparringError, match="older format.*sparring corpus build"):
        Corpus(old).seeds()


def test_no_question_or_accepted_answer_carries_dictd_markup(corpus: Corpus):
    # Format 3 had {doze\noff} in 217 of the 1,000 held-out questions' answers and 6,767 seeds'.
    def marked(text: str) -> bool:
        return any(c in text for c in "{}\n")

    rows = load_heldout(corpus.folder)
    assert not [row["id"] for row in rows if marked(row["question"]) or any(map(marked, row["answers"]))]
    assert not [seed["answer"] for seed in corpus.seeds() if any(map(marked, seed["answers"]))]


def test_heldout_questions_are_answerable_but_their_entries_are_withheld(corpus: Corpus, bm25: BM25Retriever):
    rows = load_heldout(corpus.folder)
    assert len(rows) >= 500
    for row in rows:
        assert is_heldout(row["answers"][0]) and not answer_in_text(row["answers"][0], row["question"])
    retrieved = bm25.retrieve([row["question"] for row in rows[:100]], 10)
    withheld = {row["doc"] for row in rows}
    assert not withheld & {hit.id for hits in retrieved for hit in hits}
    titles = {
        normalize_answer(hit.title)
        for hits in bm25.retrieve([row["answers"][0] for row in rows[:100]], 1)
        for hit in hits
    }
    answers = {normalize_answer(row["answers"][0]) for row in rows[:100]}
    assert len(titles & answers) >= 30  # many answers are the title of another entry (GCIDE, ...)


def test_dictd_offsets_decode():
    assert decode_offset("A") == 0 and decode_offset("B") == 1 and decode_offset("BA") == 64


def _b64(n: int) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    digits = ""
    while True:
        digits = alphabet[n % 64] + digits
        n //= 64
        if not n:
            return digits


def _dictd(folder: Path, name: str, entries: dict[str, str]) -> Path:
    """A dictd database as the Debian packages ship it: NAME.index (base-64 offsets) and NAME.dict.dz (gzip)."""
    import gzip

    data, index = b"", []
    for word, text in entries.items():
        raw = text.encode()
        index.append(f"{word}\t{_b64(len(data))}\t{_b64(len(raw))}\n")
        data += raw
    (folder / f"{name}.index").write_text("".join(index))
    (folder / f"{name}.dict.dz").write_bytes(gzip.compress(data))
    return folder


def test_a_dictd_reference_wrapped_onto_two_lines_is_one_term(tmp_path: Path):
    # WordNet wraps a third of its synonym lists' references ({doze\n off}); the braces and the line
    # break reached the titles, the links and the accepted answers of 217 of the 1,000 held-out questions.
    wn = (
        "nod off\n     v 1: change from a waking to a sleeping state\n"
        "          [syn: {fall asleep}, {dope off}, {doze\n          off}, {slate-\n          colored junco}]\n"
    )
    jargon = "worm\n\n   A program that propagates itself (see {\n   worm}).\n"
    code = "brace\n\n   In C: {\n     x = 1;\n     y = 2;\n   } is a block.\n"
    entries = {
        e.title: e for e in read_database(_dictd(tmp_path, "wn", {"nod off": wn, "worm": jargon, "brace": code}), "wn")
    }
    nod = entries["nod off"]
    assert nod.links == ["fall asleep", "dope off", "doze off", "slate-colored junco"]
    assert "[syn: fall asleep, dope off, doze off, slate-colored junco]" in " ".join(nod.text.split())
    doc = {"title": "nod off", "source": "wn", "contents": format_contents("nod off", nod.text)}
    assert accepted_answers(doc) == ["nod off", "fall asleep", "dope off", "doze off", "slate-colored junco"]
    assert entries["worm"].links == ["worm"] and "{" not in entries["worm"].text
    assert entries["brace"].links == [] and "x = 1;" in entries["brace"].text and "{" in entries["brace"].text  # code


def test_jsonl_builder_names_file_and_line_of_a_malformed_line(tmp_path: Path):
    source = tmp_path / "mini.jsonl"
    good = json.dumps({"id": "1", "contents": format_contents("Alpha", "first letter")})
    source.write_text(good + "\n" + '{"id": "2", "contents": \n')
    with pytest.raises(SparringError, match=rf"{source}:2: not valid JSON"):
        build_corpus(str(source), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()
    source.write_text(good + "\n" + json.dumps({"id": "2"}) + "\n")
    with pytest.raises(SparringError, match=rf"{source}:2: a corpus line must be an object"):
        build_corpus(str(source), str(tmp_path / "out"))


def test_folder_and_jsonl_builders(tmp_path: Path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "gravity.md").write_text("# Gravity\nGravity pulls masses together; Newton described it.\n")
    (docs / "newton.txt").write_text("Isaac Newton wrote the Principia and described gravity.\n")
    (docs / "ignored.bin").write_bytes(b"\0\1")
    folder = build_corpus(str(docs), str(tmp_path / "folder-corpus"), finish=build_bm25)
    corpus = Corpus(folder)
    assert len(corpus) == 2 and corpus.document(0)["title"] == "Gravity"
    assert BM25Retriever(corpus).retrieve(["principia"], 1)[0][0].id == "newton.txt"

    jsonl = tmp_path / "flashrag.jsonl"
    with jsonl.open("w") as fh:
        for i, doc in enumerate(corpus.documents()):
            fh.write(json.dumps({"id": f"d{i}", "contents": doc["contents"]}) + "\n")
    again = Corpus(build_corpus(str(jsonl), str(tmp_path / "jsonl-corpus")))
    assert [d["contents"] for d in again.documents()] == [d["contents"] for d in corpus.documents()]
    assert again.info["documents"] == 2 and again.info["sources"] == {"flashrag": 2}


def test_a_corpus_without_links_finds_seeds_by_mention(tmp_path: Path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "kepler.md").write_text("# Johannes Kepler\nAn astronomer who found the laws of planetary motion.")
    for n, text in enumerate(
        ["Johannes Kepler used Tycho's data.", "The laws of johannes kepler.", "Johannes Kepler!"]
    ):
        (docs / f"note{n}.txt").write_text(text)
    (docs / "other.txt").write_text("Nothing here mentions the astronomer.")
    corpus = Corpus(build_corpus(str(docs), str(tmp_path / "c")))
    assert [(s["answer"], s["doc"], s["mentions"]) for s in corpus.seeds()] == [("Johannes Kepler", "kepler.md", 3)]


def test_a_missing_corpus_is_a_clear_error(tmp_path: Path):
    with pytest.raises(SparringError, match="sparring corpus build"):
        Corpus(tmp_path / "nothing")
    with pytest.raises(SparringError, match="neither"):
        build_corpus(str(tmp_path / "no-such-source"))


def test_setup_rebuilds_a_default_corpus_of_an_older_format(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from sparring.envs.search.cli import requirements

    folder = tmp_path / "corpora" / "default"
    (folder / "bm25").mkdir(parents=True)
    (folder / "bm25" / "params.index.json").write_text("{}")
    (folder / "info.json").write_text(json.dumps({"documents": 3}))
    monkeypatch.setenv("SPARRING_HOME", str(tmp_path))
    (corpus_requirement,) = requirements()
    present, detail = corpus_requirement.check()
    assert not present and "older format" in detail
    (folder / "info.json").write_text(json.dumps({"documents": 3, "format": CORPUS_FORMAT}))
    assert corpus_requirement.check()[0]
