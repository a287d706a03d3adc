"""Two training ranks on CPU (torchrun, gloo), each given different work, as real runs give them.

Each test starts ``tests/training/ranks_worker.py`` on two ranks with one scenario; a collective that one
rank never joins times out there (60 s) and fails the run instead of hanging it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def launch(scenarios: list[str], model_dir: Path, tmp_path: Path, *overrides: str) -> dict[str, list[dict[str, Any]]]:
    """Run the worker's ``scenarios`` one after the other on two ranks (``overrides``: config ``key=value``).

    Returns every rank's result of each scenario, by name.
    """
    out = tmp_path / f"{'+'.join(scenarios)}.json"
    root = Path(__file__).resolve().parents[2]
    with socket.socket() as s:  # a free loopback port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # torchrun starts the two ranks; the trainer's Accelerator finds them and uses gloo on CPU.
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr",
               "127.0.0.1", "--master_port", str(port), "-m", "tests.training.ranks_worker", ",".join(scenarios),
               str(out), str(model_dir), *overrides]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=540, env=env, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    results: dict[str, list[dict[str, Any]]] = json.loads(out.read_text())["scenarios"]
    return results


def two_ranks(scenario: str, model_dir: Path, tmp_path: Path, *overrides: str) -> list[dict[str, Any]]:
    """Run ``scenario`` of the worker on two ranks (``overrides``: config ``key=value``); every rank's result."""
    return launch([scenario], model_dir, tmp_path, *overrides)[scenario]


#: The scenarios with the default settings: one launch plays them all (starting two ranks costs more than each).
PLAIN = ["update", "idle", "keys", "warm", "tokens", "resume"]


@pytest.fixture(scope="module")
def plain(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    return launch(PLAIN, tiny_model_dir, tmp_path_factory.mktemp("ranks"))


def test_two_ranks_with_gloo_end_an_update_with_identical_parameters(plain: dict[str, Any]) -> None:
    first, second = plain["update"]
    assert first["checksum"] == second["checksum"]  # the gradient all-reduce kept the two replicas identical
    assert first["reduced"] == second["reduced"] == {"rank": 0.5, "tokens": 4.5}


def test_a_rank_with_nothing_to_train_still_joins_the_update(plain: dict[str, Any]) -> None:
    first, second = plain["idle"]
    assert first["before"] == second["before"]
    assert first["checksum"] == second["checksum"] != first["before"]  # rank 0's episodes moved both replicas


def test_metrics_are_reduced_by_name_when_the_ranks_log_different_keys(plain: dict[str, Any]) -> None:
    first, second = plain["keys"]
    # Each key's mean over the ranks that logged it.
    assert first["reduced"] == second["reduced"] == {"a": 1.0, "b": 3.0, "c": 6.0, "d": 8.0}


def test_ranks_with_different_numbers_of_demonstrations_take_the_same_warm_start_steps(plain: dict[str, Any]) -> None:
    first, second = plain["warm"]
    assert first["steps"] == second["steps"] == 3  # the rank with one demonstration takes two empty steps
    assert first["checksum"] == second["checksum"]


def test_the_token_mean_divides_by_every_ranks_tokens(plain: dict[str, Any]) -> None:
    for rank in plain["tokens"]:
        assert rank["compared"] > 0
        assert rank["worst_relative_error"] < 1e-4  # the gradient of one mean over the 2 + 6 tokens


def test_each_rank_resumes_its_own_random_streams(plain: dict[str, Any]) -> None:
    first, second = plain["resume"]
    for rank in (first, second):
        assert rank["after_load"] == rank["after_save"]
    assert all(a != b for a, b in zip(first["after_save"], second["after_save"], strict=True))


def test_async_rollouts_on_two_ranks_stop_at_the_start_in_one_sentence(tiny_model_dir: Path, tmp_path: Path) -> None:
    # The overlapped update's collectives beside each rank's play are untested: refused before anything runs.
    with pytest.raises(AssertionError, match="async_rollouts=true runs on one process only"):
        two_ranks("update", tiny_model_dir, tmp_path, "async_rollouts=true")
