"""``sparring eval search``: a policy answers the held-out questions with search, through the runner.

The questions are the corpus's held-out set (never in training: their entries are withheld from
the corpus). Every question is one :class:`~sparring.envs.search.answer_env.SearchAnswerEnv`
episode played by :class:`~sparring.agents.runner.EpisodeRunner`, greedy, so a model, an
OpenAI-compatible endpoint and the scripted retrieval floor are measured the same way.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparring import SparringError
from sparring.agents.generation import SamplingParams
from sparring.agents.runner import EpisodeRunner, EpisodeSpec, RunnerConfig
from sparring.agents.scripted import RetrievalFloorAgent
from sparring.envs.core import Episode
from sparring.envs.search.corpus import DEFAULT_CORPUS

__all__ = ["SearchEvalConfig", "evaluate_search", "make_policy", "run_search_eval"]


@dataclass
class SearchEvalConfig:
    """What ``sparring eval search`` runs."""

    model: str = "default"
    """Hub id, local path, or 'default' (SmolLM2-135M-Instruct)."""
    backend: str = "hf"
    """hf, http or vllm; 'baseline' runs the model-free retrieval floor."""
    base_url: str | None = None
    """OpenAI-compatible server for --backend http (e.g. http://127.0.0.1:8000/v1)."""
    chat_only: bool = False
    """With --backend http: a chat-only API (hosted models): messages, not token ids."""
    corpus: str = DEFAULT_CORPUS
    """Corpus whose held-out questions are asked."""
    retriever: str | None = None
    """Retrieval server URL (default: BM25 over the corpus, in-process)."""
    limit: int | None = 50
    """Held-out questions to run (None: all)."""
    max_turns: int = 4
    """Turn limit per question."""
    max_new_tokens: int = 64
    """Tokens generated per turn at most."""
    topk: int = 3
    """Documents per search."""
    concurrency: int = 8
    """Questions played at once."""
    threads: int | None = None
    """Torch CPU threads (None: torch's choice)."""
    out: str | None = None
    """Write one record per question here (JSONL)."""


def make_policy(config: SearchEvalConfig) -> tuple[Any, str]:
    """The runner policy that ``config`` names, and the name the report gives it."""
    if config.backend == "baseline":
        return (lambda spec: RetrievalFloorAgent()), RetrievalFloorAgent.name
    if config.chat_only and config.backend != "http":
        raise SparringError("--chat-only goes with --backend http (a hosted OpenAI-compatible API).")
    from sparring.agents.factory import make_generator

    options: dict[str, Any] = {"base_url": config.base_url} if config.base_url else {}
    if config.chat_only:
        options["chat_only"] = True
    generator = make_generator(config.backend, None if config.model == "default" else config.model, **options)
    return generator, config.model


def evaluate_search(policy: Any, config: SearchEvalConfig) -> dict[str, Any]:
    """Play ``policy`` (a generator, or a factory of scripted agents) on the held-out questions.

    Returns:
        The summary (EM, F1, searches per question, share answered, seconds) and, under
        ``"records"``, one record per question in the held-out order.
    """
    from sparring.envs.search.answer_env import SearchAnswerEnv
    from sparring.envs.search.corpus import corpus_dir
    from sparring.envs.search.heldout import load_heldout

    rows = load_heldout(corpus_dir(config.corpus), config.limit)

    def env_of() -> Callable[[], SearchAnswerEnv]:
        return lambda: SearchAnswerEnv(
            max_turns=config.max_turns, corpus=config.corpus, retriever=config.retriever, topk=config.topk
        )

    specs = [EpisodeSpec(env_of(), seed=i, options={"task": row}) for i, row in enumerate(rows)]
    runner_config = RunnerConfig(
        concurrency=config.concurrency,
        sampling=SamplingParams(temperature=0.0, max_new_tokens=config.max_new_tokens),
        max_turns=config.max_turns,
    )
    started = time.perf_counter()
    episodes = EpisodeRunner(policy, runner_config).run(specs)
    records = [_record(row, episode) for row, episode in zip(rows, episodes, strict=True)]
    n = max(1, len(records))
    return {
        "corpus": config.corpus,
        "questions": len(records),
        "em": sum(r["em"] for r in records) / n,
        "f1": sum(r["f1"] for r in records) / n,
        "searches_per_question": sum(len(r["queries"]) for r in records) / n,
        "answered": sum(r["answer"] is not None for r in records) / n,
        "failed": sum(r["error"] is not None for r in records),
        "seconds": time.perf_counter() - started,
        "records": records,
    }


def _record(row: dict[str, Any], episode: Episode) -> dict[str, Any]:
    """One question's record; an episode that failed (env or server error) scores 0, never vanishes."""
    outcome = dict(episode.outcome)
    return {
        "id": row["id"],
        "question": row["question"],
        "em": float(outcome.get("em", 0.0)),
        "f1": float(outcome.get("f1", 0.0)),
        "answer": outcome.get("answer"),
        "queries": list(outcome.get("queries", [])),
        "turns": len(episode.turns),
        "error": episode.error,
    }


def run_search_eval(config: SearchEvalConfig) -> dict[str, Any]:
    """``sparring eval search``: evaluate, write the records if asked, print the summary as JSON."""
    policy, name = make_policy(config)
    report = evaluate_search(policy, config)
    records = report.pop("records")
    if config.out:
        path = Path(config.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as fh:
            for record in records:
                fh.write(json.dumps(record, ensure_ascii=False) + "\n")
    print(json.dumps(report | {"model": name}, indent=2))
    return report
