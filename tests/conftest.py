"""Shared test fixtures and policies.

Tests run the real thing (containers, repositories, the model, the corpus). A test that needs a
piece which setup provides is skipped locally when the piece is missing, but under CI (``CI`` set)
a missing piece is a failure: CI runs setup first, so absence there is a bug.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any, NoReturn

import pytest

from sparring.envs.search.corpus import CORPUS_FORMAT, Corpus, built_format, corpus_dir
from sparring.envs.search.retrieval import BM25Retriever, open_retriever

# The quick start runs the suite in two pytest-xdist workers that take whole files, one at a time as each runs
# low, in collection order (``--no-loadscope-reorder``: xdist would otherwise order the files by their number of
# tests, which put the one-test learning file, the longest, last). The heaviest files go first, longest first,
# so the end of the run is short files on both workers rather than one long file alone: seconds per file from
# the whole suite in two workers (2026-11-27, cpu-2c-amx; setup, tests and teardown of each file's tests).
HEAVY_FIRST = (
    "tests/envs/swe/test_validation.py",  # 406 s
    "tests/envs/swe/test_adversarial_validation.py",  # 374 s
    "tests/envs/swe/test_repair_env.py",  # 235 s
    "tests/envs/swe/test_adversarial_injector.py",  # 198 s
    "tests/agents/test_runner.py",  # 197 s
    "tests/training/test_game.py",  # 159 s
    "tests/training/test_learning.py",  # 157 s
    "tests/training/test_server_ranks.py",  # 143 s alone, two servers (2026-11-27, cpu-2c-zen4; opt-in before)
    "tests/training/test_fsdp.py",  # 114 s
    "tests/agents/test_swe_bench_export.py",  # 113 s
    "tests/agents/test_vllm_backend.py",  # 110 s
    "tests/training/test_demos.py",  # 109 s
    "tests/agents/test_vllm_server.py",  # 108 s
    "tests/training/test_judging.py",  # 107 s
    "tests/envs/swe/test_bugstore.py",  # 98 s
    "tests/containers/test_sandbox.py",  # 96 s
    "tests/envs/swe/test_adversarial_plain.py",  # 95 s
    "tests/envs/swe/test_inject_env.py",  # 89 s
    "tests/agents/test_evaluation_swe.py",  # 88 s
    "tests/envs/swe/test_visible.py",  # 86 s
    "tests/test_integrations_docs.py",  # 72 s
    "tests/training/test_bench_train.py",  # 71 s
    "tests/training/test_ranks.py",  # 68 s
    "tests/envs/swe/test_adversarial_inplace.py",  # 68 s
    "tests/agents/test_http.py",  # 66 s
    "tests/agents/test_evaluation_judge_swe.py",  # 61 s
    "tests/envs/swe/test_adversarial_runtime.py",  # 60 s
    "tests/training/test_resume.py",  # 54 s
    "tests/containers/test_remote_engine.py",  # 52 s
    "tests/envs/swe/test_repos.py",  # 50 s
    "tests/agents/test_answering.py",  # 49 s
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files of ``HEAVY_FIRST`` first, in its order; the rest after them in their usual order."""
    rank = {path: i for i, path in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(HEAVY_FIRST)))


def unavailable(message: str) -> NoReturn:
    """Skip (locally) or fail (under CI, whose quick start provides everything the tests need) with ``message``."""
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def require(ok: bool, what: str) -> None:
    """Skip (locally) or fail (under CI) when a piece that setup provides is missing."""
    if not ok:
        unavailable(f"{what} is missing; run `sparring setup --for test`")


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
