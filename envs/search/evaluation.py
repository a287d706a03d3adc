"""``sparring eval search``: a policy answers the held-out questions with the search tool.

Episodes run side by side: at each turn every unfinished episode's conversation goes to the
policy in one batch, so a batched generator works at full width. The policy is a
:data:`~sparring.envs.search.validation.ChatFn`; :func:`retrieve_baseline` is a model-free
floor (search the question, answer the top document's title).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparring.envs.search.answer_env import SearchAnswerEnv
from sparring.envs.search.corpus import DEFAULT_CORPUS, corpus_dir
from sparring.envs.search.heldout import load_heldout
from sparring.envs.search.retrieval import Retriever
from sparring.envs.search.validation import ChatFn

__all__ = ["SearchEvalConfig", "evaluate_search", "retrieve_baseline"]


@dataclass
class SearchEvalConfig:
    """What ``sparring eval search`` runs."""

    corpus: str = DEFAULT_CORPUS
    """Corpus whose held-out set is read."""
    limit: int | None = 50
    """Questions to evaluate (None: all)."""
    max_turns: int = 4
    """Turn limit per question."""
    topk: int = 3
    """Documents per search."""


def retrieve_baseline(retriever: Retriever) -> ChatFn:
    """A model-free policy: search the question, then answer the title of the top document."""

    def chat(conversations: list[list[dict[str, Any]]]) -> list[str]:
        out = []
        for conversation in conversations:
            if len(conversation) == 1:
                question = conversation[0]["content"].rsplit("Question:", 1)[-1].strip()
                out.append(f"<search>{question}</search>")
            else:
                hits = conversation[-1]["content"]
                title = hits.split("(Title: ", 1)[1].split(")", 1)[0] if "(Title: " in hits else ""
                out.append(f"<answer>{title}</answer>")
        return out

    return chat


def evaluate_search(
    policy: ChatFn, config: SearchEvalConfig, retriever: Retriever | str | None = None
) -> dict[str, Any]:
    """Run ``policy`` on the held-out questions; returns the summary and the per-question records."""
    rows = load_heldout(corpus_dir(config.corpus), config.limit)
    envs = [
        SearchAnswerEnv(max_turns=config.max_turns, corpus=config.corpus, retriever=retriever, topk=config.topk)
        for _ in rows
    ]
    conversations: list[list[dict[str, Any]]] = []
    for env, row in zip(envs, rows, strict=True):
        obs, _ = env.reset(options={"task": row})
        conversations.append([{"role": "user", "content": obs}])
    outcomes: list[dict[str, Any] | None] = [None] * len(rows)
    started = time.perf_counter()
    while active := [i for i, o in enumerate(outcomes) if o is None]:
        actions = policy([conversations[i] for i in active])
        for i, action in zip(active, actions, strict=True):
            obs, _, terminated, truncated, info = envs[i].step(action)
            conversations[i] += [{"role": "assistant", "content": action}, {"role": "user", "content": obs}]
            if terminated or truncated:
                outcomes[i] = info["outcome"] | {"id": rows[i]["id"], "question": rows[i]["question"]}
    for env in envs:
        env.close()
    done = [o for o in outcomes if o is not None]
    n = max(1, len(done))
    return {
        "corpus": config.corpus,
        "questions": len(done),
        "em": sum(o["em"] for o in done) / n,
        "f1": sum(o["f1"] for o in done) / n,
        "searches_per_question": sum(len(o["queries"]) for o in done) / n,
        "answered": sum(o["answer"] is not None for o in done) / n,
        "seconds": time.perf_counter() - started,
        "records": done,
    }


def write_records(path: Path, records: list[dict[str, Any]]) -> None:
    """Write per-question records as JSONL."""
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        for record in records:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
