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


def two_ranks(scenario: str, model_dir: Path, tmp_path: Path, *overrides: str) -> list[dict[str, Any]]:
    """Run ``scenario`` of the worker on two ranks (``overrides``: config ``key=value``); every rank's result."""
    out = tmp_path / f"{scenario}.json"
    root = Path(__file__).resolve().parents[2]
    with socket.socket() as s:  # a free loopback port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # torchrun starts the two ranks; the trainer's Accelerator finds them and uses gloo on CPU.
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr",
               "127.0.0.1", "--master_port", str(port), "-m", "tests.training.ranks_worker", scenario, str(out),
               str(model_dir), *overrides]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=540, env=env, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())["ranks"]


def test_two_ranks_with_gloo_end_an_update_with_identical_parameters(tiny_model_dir: Path, tmp_path: Path) -> None:
    first, second = two_ranks("update", tiny_model_dir, tmp_path)
    assert first["checksum"] == second["checksum"]  # the gradient all-reduce kept the two replicas identical
    assert first["reduced"] == second["reduced"] == {"rank": 0.5, "tokens": 4.5}


def test_a_rank_with_nothing_to_train_still_joins_the_update(tiny_model_dir: Path, tmp_path: Path) -> None:
    first, second = two_ranks("idle", tiny_model_dir, tmp_path)
    assert first["before"] == second["before"]
    assert first["checksum"] == second["checksum"] != first["before"]  # rank 0's episodes moved both replicas


def test_metrics_are_reduced_by_name_when_the_ranks_log_different_keys(tiny_model_dir: Path, tmp_path: Path) -> None:
    first, second = two_ranks("keys", tiny_model_dir, tmp_path)
    # Each key's mean over the ranks that logged it.
    assert first["reduced"] == second["reduced"] == {"a": 1.0, "b": 3.0, "c": 6.0, "d": 8.0}


def test_ranks_with_different_numbers_of_demonstrations_take_the_same_warm_start_steps(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    first, second = two_ranks("warm", tiny_model_dir, tmp_path)
    assert first["steps"] == second["steps"] == 3  # the rank with one demonstration takes two empty steps
    assert first["checksum"] == second["checksum"]


def test_the_token_mean_divides_by_every_ranks_tokens(tiny_model_dir: Path, tmp_path: Path) -> None:
    for rank in two_ranks("tokens", tiny_model_dir, tmp_path):
        assert rank["compared"] > 0
        assert rank["worst_relative_error"] < 1e-4  # the gradient of one mean over the 2 + 6 tokens


def test_each_rank_resumes_its_own_random_streams(tiny_model_dir: Path, tmp_path: Path) -> None:
    first, second = two_ranks("resume", tiny_model_dir, tmp_path)
    for rank in (first, second):
        assert rank["after_load"] == rank["after_save"]
    assert all(a != b for a, b in zip(first["after_save"], second["after_save"], strict=True))


def test_async_rollouts_on_two_ranks_stop_at_the_start_in_one_sentence(tiny_model_dir: Path, tmp_path: Path) -> None:
    # The overlapped update's collectives beside each rank's play are untested: refused before anything runs.
    with pytest.raises(AssertionError, match="async_rollouts=true runs on one process only"):
        two_ranks("update", tiny_model_dir, tmp_path, "async_rollouts=true")
