"""Shared test fixtures and policies.

Tests run the real thing (containers, repositories, the model, the corpus). A test that needs a
piece which setup provides is skipped locally when the piece is missing, but under CI (``CI`` set)
a missing piece is a failure: CI runs setup first, so absence there is a bug.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from sparring.envs.search.corpus import CORPUS_FORMAT, Corpus, built_format, corpus_dir
from sparring.envs.search.retrieval import BM25Retriever, open_retriever

# The quick start runs the suite in two pytest-xdist workers that take whole files in collection order; the
# file of the longest single test goes first, so that it does not run alone at the end.
RUN_FIRST = ("tests/training/test_learning.py",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the files of ``RUN_FIRST`` first, the rest in their usual order."""
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in RUN_FIRST)


def require(ok: bool, what: str) -> None:
    """Skip (locally) or fail (under CI) when a piece that setup provides is missing."""
    if ok:
        return
    message = f"{what} is missing; run `sparring setup --for test`"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def sparring_cli(*args: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it, with ENV added; COLUMNS is wide so that rich neither wraps nor elides a message
    (a worker's temporary paths are long)."""
    environ = {**os.environ, "COLUMNS": "250", **env}
    command = [sys.executable, "-m", "sparring.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environ)


def cpu_grpo_settings(output_dir: Any) -> dict[str, Any]:
    """TRL ``GRPOConfig`` settings of a one-step CPU smoke run: fp32, no reports, checkpoints or
    activation recomputation, seed 0."""
    from sparring.agents.model import checkpointing_argument

    fast = {"output_dir": str(output_dir), "use_cpu": True, "bf16": False, "report_to": "none", "max_steps": 1}
    return fast | {"save_strategy": "no", "logging_steps": 1, "seed": 0} | checkpointing_argument(False)


def cpu_grpo_config(output_dir: Any, **kwargs: Any) -> Any:
    """TRL's ``GRPOConfig`` of :func:`cpu_grpo_settings`; ``kwargs`` (batch, generations, lengths) add to it."""
    import trl

    return trl.GRPOConfig(**(cpu_grpo_settings(output_dir) | kwargs))


def default_corpus_built() -> bool:
    """Whether setup has built the default corpus and its index, in the current format (setup rebuilds an older one)."""
    folder = corpus_dir("default")
    built = (folder / "bm25" / "params.index.json").is_file() and (folder / "info.json").is_file()
    return built and built_format(folder) == CORPUS_FORMAT


@pytest.fixture(scope="session")
def corpus() -> Corpus:
    """The default corpus (skips locally, fails under CI, when setup has not built it)."""
    require(default_corpus_built(), "the default corpus (in its current format)")
    return Corpus.open("default")


@pytest.fixture(scope="session")
def bm25(corpus: Corpus) -> BM25Retriever:
    """BM25 over the default corpus, shared with the envs of the same process."""
    retriever = open_retriever("default")
    assert isinstance(retriever, BM25Retriever)
    return retriever


@pytest.fixture(scope="session")
def smollm2() -> Any:
    """The default policy (SmolLM2-135M-Instruct) on the HF backend, loaded once per session."""
    from sparring.agents.model import default_model_present

    require(default_model_present(), "the default model (SmolLM2-135M-Instruct)")
    from sparring.agents.hf_backend import HFGenerator

    return HFGenerator()


@pytest.fixture(scope="session")
def bug_verdicts(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The inflection test bugs' validation verdicts, each validated once per session (``tests.envs.swe.bugs``);
    under pytest-xdist once for all the workers, in the folder above theirs (this run's own)."""
    from tests.envs.swe.bugs import Verdicts

    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return Verdicts(tmp_path_factory.getbasetemp().parent if worker else None)
