"""Commands and setup requirements of the search room.

``sparring corpus build|info|embed``, ``sparring serve-retriever``, ``sparring eval search`` and
``sparring bench retrieval``; setup builds the default corpus and its BM25 index.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from sparring import SparringError
from sparring.envs.search.corpus import DEFAULT_CORPUS, corpus_dir

__all__ = ["register", "requirements"]

console = Console(stderr=True)


def _default_corpus_state() -> tuple[bool, str]:
    folder = corpus_dir(DEFAULT_CORPUS)
    if not (folder / "bm25" / "params.index.json").is_file() or not (folder / "info.json").is_file():
        return False, f"not built in {folder}"
    info = json.loads((folder / "info.json").read_text())
    return True, f"{info['documents']} documents, BM25 index ({folder})"


def _build_default() -> None:
    from sparring.envs.search.corpus import build_corpus

    build_corpus("default", progress=lambda line: console.print(f"  {line}"))


def requirements() -> list[Any]:
    """Setup builds the default corpus (with its BM25 index) for the demo and the tests."""
    from sparring.requirement import Requirement

    return [
        Requirement(
            name="default corpus",
            check=_default_corpus_state,
            ensure=_build_default,
            fix="sparring corpus build",
        )
    ]


def _corpus_build(
    source: str = typer.Option(
        "default", "--source", help="default (Debian dictd), dictd:NAME,..., a FlashRAG JSONL file or a folder."
    ),
    name: str = typer.Option(None, "--name", help="Corpus name or folder (default: from the source)."),
) -> None:
    """Build a corpus (documents, seed answers, held-out QA set, BM25 index)."""
    from sparring.envs.search.corpus import build_corpus

    folder = build_corpus(source, name, progress=lambda line: console.print(f"  {line}"))
    _corpus_info(str(folder))


def _corpus_info(name: str = typer.Argument(DEFAULT_CORPUS, help="Corpus name or folder.")) -> None:
    """Print a corpus's statistics (documents, tokens, sources) as JSON."""
    folder = corpus_dir(name)
    path = folder / "info.json"
    if not path.is_file():
        raise SparringError(f"no built corpus in {folder}; run `sparring corpus build`.")
    info = json.loads(path.read_text())
    info["folder"] = str(folder)
    info["bm25_index"] = (folder / "bm25" / "params.index.json").is_file()
    info["dense_index"] = (folder / "dense" / "embeddings.npy").is_file()
    print(json.dumps(info, indent=2))


def _corpus_embed(
    name: str = typer.Argument(DEFAULT_CORPUS, help="Corpus name or folder."),
    limit: int = typer.Option(None, "--limit", help="Embed only the first N documents (dense search sees only them)."),
) -> None:
    """Embed a corpus with MiniLM for dense and hybrid retrieval (slow on a CPU: use --limit)."""
    from sparring.envs.search.retrieval import build_dense

    out = build_dense(corpus_dir(name), limit)
    console.print(f"embeddings written to {out}")


def _serve(
    corpus: str = typer.Option(DEFAULT_CORPUS, "--corpus", help="Corpus name or folder."),
    method: str = typer.Option("bm25", "--method", help="bm25, dense or hybrid."),
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(8000, "--port"),
) -> None:
    """Serve a corpus over HTTP (Search-R1-compatible POST /retrieve) for many rollout workers."""
    from sparring.envs.search.retrieval import open_retriever
    from sparring.envs.search.server import serve

    retriever = open_retriever(corpus, method)
    console.print(f"serving {corpus} ({method}) on http://{host}:{port}/retrieve")
    serve(retriever, host, port, corpus)


def _eval_search(
    model: str = typer.Option("default", "--model", help="Hub id, local path, or 'default' (SmolLM2)."),
    backend: str = typer.Option("hf", "--backend", help="hf, http or vllm; 'baseline' runs the model-free floor."),
    base_url: str = typer.Option(None, "--base-url", help="OpenAI-compatible server for --backend http."),
    chat_only: bool = typer.Option(
        False,
        "--chat-only",
        help="With --backend http: a chat-only API (hosted models): messages, not token ids.",
    ),
    corpus: str = typer.Option(DEFAULT_CORPUS, "--corpus"),
    retriever: str = typer.Option(None, "--retriever", help="Retrieval server URL (default: BM25 in-process)."),
    limit: int = typer.Option(50, "--limit", help="Held-out questions to run."),
    max_turns: int = typer.Option(4, "--max-turns"),
    max_new_tokens: int = typer.Option(64, "--max-new-tokens"),
    out: str = typer.Option(None, "--out", help="Write per-question records here (JSONL)."),
) -> None:
    """Answer the held-out questions with search; print EM/F1 as JSON."""
    from sparring.envs.search.evaluation import SearchEvalConfig, evaluate_search, retrieve_baseline, write_records
    from sparring.envs.search.retrieval import open_retriever

    config = SearchEvalConfig(corpus=corpus, limit=limit, max_turns=max_turns)
    if backend == "baseline":
        policy = retrieve_baseline(open_retriever(retriever or corpus))
        model = "retrieve-baseline"
    else:
        from sparring.agents.generation import make_generator
        from sparring.envs.search.validation import generator_chat_fn

        options: dict[str, Any] = {"base_url": base_url} if base_url else {}
        if chat_only:
            if backend != "http":
                raise SparringError("--chat-only goes with --backend http (a hosted OpenAI-compatible API).")
            options["chat_only"] = True
        generator = make_generator(backend, None if model == "default" else model, **options)
        policy = generator_chat_fn(generator, max_new_tokens, stop=("</search>", "</answer>"))
    report = evaluate_search(policy, config, retriever)
    records = report.pop("records")
    if out:
        write_records(Path(out), records)
    print(json.dumps(report | {"model": model}, indent=2))


def _bench_retrieval(
    corpus: str = typer.Option(DEFAULT_CORPUS, "--corpus"),
    queries: int = typer.Option(1000, "--queries", help="Queries in the batch measurement."),
    rank_bm25_queries: int = typer.Option(5, "--rank-bm25-queries", help="Queries for rank-bm25 (slow)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """BM25 latency p50 and batch QPS vs rank-bm25 and raw bm25s on the same queries."""
    from sparring.envs.search.bench import bench_retrieval

    result = bench_retrieval(corpus, queries=queries, rank_bm25_queries=rank_bm25_queries)
    if as_json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            console.print(f"{key:>24}: {value}")


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    """Add the search commands to the CLI."""
    groups["corpus"].command("build")(_corpus_build)
    groups["corpus"].command("info")(_corpus_info)
    groups["corpus"].command("embed")(_corpus_embed)
    app.command("serve-retriever")(_serve)
    groups["eval"].command("search")(_eval_search)
    groups["bench"].command("retrieval")(_bench_retrieval)
