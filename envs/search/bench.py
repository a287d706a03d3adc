"""``sparring bench retrieval``: BM25 latency and throughput against rank-bm25 and raw bm25s.

All figures come from one run on the same queries (the held-out questions of the corpus):

* ``bm25_p50_ms`` — median latency of one query, top 10, through :class:`BM25Retriever`
  (tokenising, scoring and reading the documents);
* ``bm25_qps`` — queries per second of one batch call through :class:`BM25Retriever`;
* ``bm25s_raw_qps`` — the same batch through bm25s's own ``tokenize`` + ``retrieve`` on the same
  index (document ids only);
* ``rank_bm25_qps`` — rank-bm25's ``BM25Okapi.get_scores`` + top 10 over the same tokens; it
  scores every document in Python, so it runs on a few queries only.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from sparring import SparringError, bench_machine
from sparring.envs.search.corpus import DEFAULT_CORPUS, corpus_dir
from sparring.envs.search.heldout import load_heldout
from sparring.envs.search.retrieval import BM25Retriever

__all__ = ["bench_retrieval"]


def _rank_bm25_qps(retriever: BM25Retriever, queries: list[str], topk: int) -> tuple[float, float]:
    """rank-bm25 queries per second and its build seconds, on the corpus's own tokens."""
    try:
        from rank_bm25 import BM25Okapi
    except ImportError:
        raise SparringError("the retrieval benchmark compares with rank-bm25; pip install 'sparring[bench]'.") from None
    tokenizer = retriever.tokenizer
    t0 = time.perf_counter()
    docs = tokenizer.decode(
        tokenizer.tokenize(list(retriever.corpus.contents()), update_vocab=False, return_as="ids", show_progress=False)
    )
    model = BM25Okapi(docs)
    built = time.perf_counter() - t0
    query_tokens = tokenizer.decode(
        tokenizer.tokenize(queries, update_vocab=False, return_as="ids", show_progress=False)
    )
    t0 = time.perf_counter()
    for tokens in query_tokens:
        scores = model.get_scores(tokens)
        np.argpartition(-scores, topk)[:topk]
    return len(queries) / (time.perf_counter() - t0), built


def bench_retrieval(
    corpus: str = DEFAULT_CORPUS, queries: int = 1000, latency_queries: int = 200, rank_bm25_queries: int = 5
) -> dict[str, Any]:
    """Measure the figures of the module docstring; returns one JSON-serialisable dict."""
    import bm25s
    import Stemmer

    texts = [row["question"] for row in load_heldout(corpus_dir(corpus))]
    if not texts:
        raise SparringError(f"corpus {corpus!r} has no held-out questions to use as queries; rebuild it.")
    texts = (texts * (queries // len(texts) + 1))[:queries]
    t0 = time.perf_counter()
    retriever = BM25Retriever(corpus_dir(corpus))
    load_s = time.perf_counter() - t0
    topk = 10
    retriever.retrieve(texts[:20], topk)  # warm the page cache and the tokenizer

    latencies = []
    for text in texts[:latency_queries]:
        t0 = time.perf_counter()
        retriever.retrieve([text], topk)
        latencies.append((time.perf_counter() - t0) * 1000)

    t0 = time.perf_counter()
    retriever.retrieve(texts, topk)
    bm25_qps = len(texts) / (time.perf_counter() - t0)

    stemmer = Stemmer.Stemmer("english")
    t0 = time.perf_counter()
    raw_tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)
    retriever.model.retrieve(raw_tokens, k=topk, show_progress=False, n_threads=0)
    raw_qps = len(texts) / (time.perf_counter() - t0)

    rank_qps, rank_build_s = _rank_bm25_qps(retriever, texts[:rank_bm25_queries], topk)
    return {
        **bench_machine(),
        "corpus": corpus,
        "documents": len(retriever.corpus),
        "queries": len(texts),
        "topk": topk,
        "index_load_s": round(load_s, 3),
        "bm25_p50_ms": round(statistics.median(latencies), 3),
        "bm25_p90_ms": round(float(np.percentile(latencies, 90)), 3),
        "bm25_qps": round(bm25_qps, 1),
        "bm25s_raw_qps": round(raw_qps, 1),
        "rank_bm25_qps": round(rank_qps, 3),
        "rank_bm25_queries": rank_bm25_queries,
        "rank_bm25_build_s": round(rank_build_s, 1),
        "speedup_vs_rank_bm25": round(bm25_qps / rank_qps, 1),
        "ratio_vs_bm25s_raw": round(bm25_qps / raw_qps, 3),
    }
