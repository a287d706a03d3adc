"""Which of its search's results each answer of a held-out evaluation came from (docs/experiments.md).

Each record's last query is searched again on the default corpus (BM25 is deterministic) and the
answer is looked up among the three results' titles: rank 1-3, or 0 for none of them. A policy
that only copies the first result answers rank 1; one that reads the results answers later ones
where they hold the definition.

    python scripts/probe_answer_rank.py evals/learn15-warm evals/learn15-final
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

from sparring.agents.scripted import copied_title
from sparring.envs.search.corpus import DEFAULT_CORPUS, corpus_dir
from sparring.envs.search.retrieval import Retriever, open_retriever
from sparring.envs.search.scoring import normalize_answer


def answer_ranks(records: list[dict], retriever: Retriever, topk: int = 3) -> collections.Counter:
    """(rank of the answer among the last query's results, right) -> count."""
    queries = [(rec.get("outcome", {}).get("queries") or [""])[-1] for rec in records]
    counts: collections.Counter = collections.Counter()
    for rec, hits in zip(records, retriever.retrieve(queries, topk=topk), strict=True):
        titles = [normalize_answer(copied_title(hit.title)) for hit in hits]
        answer = normalize_answer(rec.get("answer") or "")
        rank = titles.index(answer) + 1 if answer and answer in titles else 0
        counts[(rank, bool(rec.get("em")))] += 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("evals", nargs="+", help="folders of `sparring eval search` runs (their records.jsonl)")
    args = parser.parse_args()
    retriever = open_retriever(corpus_dir(DEFAULT_CORPUS))
    print("| evaluation | first result: right / wrong | second | third | none of the three |")
    print("| --- | --- | --- | --- | --- |")
    for folder in args.evals:
        lines = (Path(folder) / "records.jsonl").read_text().splitlines()
        counts = answer_ranks([json.loads(line) for line in lines if line.strip()], retriever)
        cells = [f"{counts[(rank, True)]} / {counts[(rank, False)]}" for rank in (1, 2, 3, 0)]
        print(f"| {folder} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
