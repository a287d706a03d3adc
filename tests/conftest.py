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
# so the end of the run is short files on both workers rather than one long file alone (a file missing here ran
# last and alone for 200 s): seconds per file (setup, tests and teardown) from the whole suite in two workers
# (2026-11-28, cpu-2c-zen4); every file of 25 s or more.
HEAVY_FIRST = (
    "tests/envs/swe/test_adversarial_validation.py",  # 285 s
    "tests/envs/swe/test_adversarial_runtime.py",  # 268 s
    "tests/envs/swe/test_validation.py",  # 258 s
    "tests/training/test_ranks.py",  # 216 s
    "tests/training/test_vllm_training.py",  # 204 s
    "tests/envs/swe/test_adversarial_injector.py",  # 180 s
    "tests/training/test_server_ranks.py",  # 160 s
    "tests/training/test_learning.py",  # 154 s
    "tests/agents/test_vllm_server.py",  # 150 s
    "tests/envs/swe/test_adversarial_plain.py",  # 150 s
    "tests/training/test_game.py",  # 150 s
    "tests/agents/test_swe_bench_export.py",  # 138 s
    "tests/agents/test_runner.py",  # 120 s
    "tests/envs/swe/test_bugstore.py",  # 120 s
    "tests/training/test_fsdp.py",  # 111 s
    "tests/training/test_judging.py",  # 107 s
    "tests/training/test_demos.py",  # 106 s
    "tests/envs/swe/test_repair_env.py",  # 94 s
    "tests/agents/test_evaluation_swe.py",  # 90 s
    "tests/envs/swe/test_inject_env.py",  # 88 s
    "tests/containers/test_sandbox.py",  # 81 s
    "tests/test_integrations_docs.py",  # 81 s
    "tests/agents/test_vllm_backend.py",  # 70 s
    "tests/agents/test_http.py",  # 69 s
    "tests/envs/swe/test_adversarial_solver.py",  # 67 s
    "tests/training/test_bench_train.py",  # 63 s
    "tests/envs/swe/test_bench_validate.py",  # 63 s
    "tests/agents/test_answering.py",  # 62 s
    "tests/training/test_resume.py",  # 53 s
    "tests/envs/swe/test_visible.py",  # 53 s
    "tests/envs/swe/test_injector_solver_view.py",  # 48 s
    "tests/agents/test_evaluation_judge_swe.py",  # 38 s
    "tests/envs/swe/test_adversarial_inplace.py",  # 36 s
    "tests/test_front_door.py",  # 35 s
    "tests/containers/test_remote_engine.py",  # 34 s
    "tests/agents/test_hf_episodes.py",  # 31 s
    "tests/agents/test_evaluation.py",  # 30 s
    "tests/agents/test_evaluation_propose.py",  # 29 s
    "tests/envs/swe/test_hostile_files.py",  # 26 s
    "tests/agents/test_evaluation_judge.py",  # 25 s
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files of ``HEAVY_FIRST`` first, in its order; the rest after them in their usual order."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    gone = [path for path in HEAVY_FIRST if not os.path.isfile(os.path.join(root, path))]
    if gone:  # a renamed heavy file would go back to xdist's order, where it may run last and alone
        raise pytest.UsageError(f"tests/conftest.py's HEAVY_FIRST names files that are gone: {', '.join(gone)}")
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
