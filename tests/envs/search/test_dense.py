"""Dense (MiniLM, offline) and hybrid retrieval on a small real corpus built from text files."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparring import SparringError
from sparring.envs.search.corpus import Corpus, build_corpus
from sparring.envs.search.retrieval import DenseRetriever, HybridRetriever, build_bm25, build_dense, open_retriever

DOCS = {
    "volcano.md": "# Volcano\nA rupture in the crust of a planet that lets molten lava, ash and gases escape.",
    "glacier.md": "# Glacier\nA persistent body of dense ice that moves slowly under its own weight.",
    "compiler.md": "# Compiler\nA program that translates source code of a programming language into machine code.",
    "violin.md": "# Violin\nA wooden string instrument played with a bow, the smallest of its family.",
}


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    root = tmp_path_factory.mktemp("dense")
    for name, text in DOCS.items():
        (root / "docs").mkdir(exist_ok=True)
        (root / "docs" / name).write_text(text)
    return Corpus(build_corpus(str(root / "docs"), str(root / "corpus"), finish=build_bm25))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_dense_and_hybrid_find_paraphrased_queries(small_corpus: Corpus):
    with pytest.raises(SparringError, match="sparring corpus embed"):
        DenseRetriever(small_corpus)
    build_dense(small_corpus.folder, show_progress=False)
    dense = DenseRetriever(small_corpus)
    # no word in common with the entry: only the embedding can find it
    hits = dense.retrieve(["frozen river of ice creeping down a mountain", "fiddle"], topk=2)
    assert hits[0][0].id == "glacier.md" and hits[1][0].id == "violin.md"
    assert hits[0][0].score > hits[0][1].score
    hybrid = HybridRetriever(small_corpus)
    fused = hybrid.retrieve(["molten lava eruption", "translates source code"], topk=3)
    assert fused[0][0].id == "volcano.md" and fused[1][0].id == "compiler.md"
    assert open_retriever(str(small_corpus.folder), "hybrid").retrieve(["bow string instrument"], 1)[0][0].id == (
        "violin.md"
    )


def test_unknown_method_is_a_clear_error(small_corpus: Corpus):
    with pytest.raises(SparringError, match="unknown retrieval method"):
        open_retriever(str(small_corpus.folder) + "/", "sparse-magic")


def test_corpus_path_objects_are_accepted(small_corpus: Corpus):
    assert open_retriever(Path(small_corpus.folder)).retrieve(["glacier"], 1)[0][0].id == "glacier.md"
