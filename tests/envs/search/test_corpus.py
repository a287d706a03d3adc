"""The corpus builders and the default corpus from Debian's dictd databases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparring import SparringError
from sparring.envs.search.corpus import Corpus, build_corpus
from sparring.envs.search.dictd import decode_offset
from sparring.envs.search.documents import format_contents, split_contents
from sparring.envs.search.heldout import is_heldout, load_heldout
from sparring.envs.search.retrieval import BM25Retriever, build_bm25
from sparring.envs.search.scoring import answer_in_text, normalize_answer


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
        assert not is_heldout(seed["answer"]) and normalize_answer(seed["answer"]) not in held
        assert corpus.document(seed["index"])["id"] == seed["doc"]


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
