"""Commands and setup requirements of the search room.

``sparring corpus build|add|info|embed``, ``sparring serve-retriever`` and ``sparring bench
retrieval``; setup builds the default corpus and its BM25 index.
"""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.console import Console

from sparring import SparringError, print_figures
from sparring.envs.search.corpus import CORPUS_FORMAT, DEFAULT_CORPUS, built_format, corpus_dir

__all__ = ["register", "requirements"]

console = Console(stderr=True)


def _default_corpus_state() -> tuple[bool, str]:
    folder = corpus_dir(DEFAULT_CORPUS)
    if not (folder / "bm25" / "params.index.json").is_file() or not (folder / "info.json").is_file():
        return False, f"not built in {folder}"
    if (built := built_format(folder)) != CORPUS_FORMAT:
        return False, f"built in an older format ({built}, now {CORPUS_FORMAT}) in {folder}"
    info = json.loads((folder / "info.json").read_text())
    return True, f"{info['documents']} documents, BM25 index ({folder})"


def _build_default() -> None:
    from sparring.envs.search.corpus import build_corpus
    from sparring.envs.search.retrieval import build_bm25

    build_corpus("default", finish=build_bm25, progress=lambda line: console.print(f"  {line}"))


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
    from sparring.envs.search.retrieval import build_bm25

    folder = build_corpus(source, name, finish=build_bm25, progress=lambda line: console.print(f"  {line}"))
    _corpus_info(str(folder))


def _corpus_add(
    name: str = typer.Argument(..., help="Name of the new corpus (or a folder to build it in)."),
    source: str = typer.Argument(..., help='A FlashRAG corpus JSONL file ({"id", "contents": "\\"title\\"\\ntext"}).'),
) -> None:
    """Add your own corpus: index a FlashRAG JSONL file with BM25, keeping every document.

    Use it with `--corpus NAME` (`eval search --questions FILE`, `serve-retriever`, the envs' corpus=).
    """
    from pathlib import Path

    from sparring.envs.search.corpus import build_corpus
    from sparring.envs.search.retrieval import build_bm25

    if name == DEFAULT_CORPUS:
        raise SparringError(f"{DEFAULT_CORPUS!r} is the dictionary corpus that setup builds; name yours otherwise.")
    if not Path(source).expanduser().exists():
        raise SparringError(f"no corpus file at {source}; pass a FlashRAG JSONL file (one document a line).")
    folder = build_corpus(
        source, name, finish=build_bm25, progress=lambda line: console.print(f"  {line}"), heldout=False
    )
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


def _bench_retrieval(
    corpus: str = typer.Option(DEFAULT_CORPUS, "--corpus"),
    queries: int = typer.Option(1000, "--queries", help="Queries in the batch measurement."),
    rank_bm25_queries: int = typer.Option(5, "--rank-bm25-queries", help="Queries for rank-bm25 (slow)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """BM25 latency p50 and batch QPS vs rank-bm25 and raw bm25s on the same queries."""
    from sparring.envs.search.bench import bench_retrieval

    result = bench_retrieval(corpus, queries=queries, rank_bm25_queries=rank_bm25_queries)
    print_figures(result, as_json)


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    """Add the search commands to the CLI."""
    groups["corpus"].command("build")(_corpus_build)
    groups["corpus"].command("add")(_corpus_add)
    groups["corpus"].command("info")(_corpus_info)
    groups["corpus"].command("embed")(_corpus_embed)
    app.command("serve-retriever")(_serve)
    groups["bench"].command("retrieval")(_bench_retrieval)
