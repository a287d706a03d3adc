"""Two training ranks on CPU (torchrun, gloo), each given different work, as real runs give them.

Each test starts ``tests/training/ranks_worker.py`` on two ranks with one scenario; a collective that one
rank never joins times out there (60 s) and fails the run instead of hanging it. The last ones start the
ranks with ``accelerate launch`` and the project's accelerate configs, and check what a launcher's config
may not ask of the trainer.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sparring import SparringError
from tests.conftest import default_corpus_built, require

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


ROOT = Path(__file__).resolve().parents[2]


def torchrun(port: int) -> list[list[str]]:
    """The launch of two ranks on this machine by torchrun (as the docs' one-node command)."""
    return [[sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
             "--master_port", str(port)]]  # fmt: skip


def launch(
    scenarios: list[str],
    model_dir: Path,
    tmp_path: Path,
    *overrides: str,
    launchers: Callable[[int], list[list[str]]] = torchrun,
) -> dict[str, list[dict[str, Any]]]:
    """Run the worker's ``scenarios`` one after the other on two ranks (``overrides``: config ``key=value``).

    ``launchers`` gives, for a free loopback port, the commands that start the ranks (several for several
    "nodes", run at once); the worker's module and arguments follow each. The trainer's Accelerator finds the
    ranks and uses gloo on CPU.

    Returns every rank's result of each scenario, by name.
    """
    out = tmp_path / f"{'+'.join(scenarios)}.json"
    tmp_path.mkdir(parents=True, exist_ok=True)
    with socket.socket() as s:  # a free loopback port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    worker = ["-m", "tests.training.ranks_worker", ",".join(scenarios), str(out), str(model_dir), *overrides]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    logs, processes = [], []
    for i, start in enumerate(launchers(port)):  # output to files: a full pipe would stall one node's ranks
        logs.append(tmp_path / f"launch{i}.log")
        with logs[-1].open("w") as log:
            command = [*start, *worker]
            processes.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT))
    codes = [p.wait(timeout=540) for p in processes]
    texts = [log.read_text() for log in logs]
    assert codes == [0] * len(codes), "\n".join(text[-3000:] for text in texts)
    for text in texts:  # a rank that ended well printed no traceback on its way out either (an exit code hides it)
        shown = re.search(r"^(\[rank\d+\]: )?Traceback \(most recent call last\)", text, re.M)
        assert shown is None, text[shown.start() : shown.start() + 3000]
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


@pytest.mark.parametrize("distributed", ["ddp", "fsdp"])
def test_async_rollouts_on_two_ranks_overlap_each_update_with_the_ranks_own_next_play(
    tiny_model_dir: Path, tmp_path: Path, distributed: str
) -> None:
    # Three iterations of the search game: each rank plays its own tasks while its update (collectives with the other
    # rank's update, never with a play) runs in the worker thread; a collective met out of turn fails the run (60 s).
    require(default_corpus_built(), "the default corpus")
    first, second = two_ranks("async_run", tiny_model_dir, tmp_path, f"distributed={distributed}")
    for rank in (first, second):
        assert rank["iterations"] == 3 and rank["moved"]
        updates = rank["updates"]
        assert len(updates) == 3 and not any(u["main_thread"] for u in updates)
        assert rank["overlapped"] == [True, True, False]  # the last update has no next unit to play beside it
        for j, u in enumerate(updates):
            assert u["generator"] == j  # every rank's generator took each update's weights before the next
            assert set(u["episodes"]) == {max(0, j - 1)}  # fresh, then one version behind
        assert rank["version"] == 3 and rank["generator_is_policy"]
    assert [u["tokens"] for u in first["updates"]] != [u["tokens"] for u in second["updates"]]  # different work
    assert first["whole_checksum"] == second["whole_checksum"]  # one policy on both ranks after the overlapped updates


# ------------------------------------------------------------------------------- accelerate launch

ACCELERATE = [sys.executable, "-m", "accelerate.commands.launch", "--config_file"]


def test_accelerate_launch_with_the_one_node_config_starts_the_ranks(tiny_model_dir: Path, tmp_path: Path) -> None:
    # scripts/accelerate/one-node.yaml as docs/scale.md gives it, with 2 processes for the 8 GPUs it names
    def one_node(port: int) -> list[list[str]]:
        config = str(ROOT / "scripts/accelerate/one-node.yaml")
        return [[*ACCELERATE, config, "--num_processes", "2", "--main_process_port", str(port)]]

    first, second = launch(["placement"], tiny_model_dir, tmp_path, launchers=one_node)["placement"]
    assert [(r["rank"], r["local"], r["world"]) for r in (first, second)] == [(0, 0, 2), (1, 1, 2)]
    assert first["checksum"] == second["checksum"]  # each rank's own episodes, one update: equal replicas
    assert first["reduced"] == second["reduced"] == {"rank": 0.5, "tokens": 4.5}


def test_accelerate_launch_with_the_multi_node_config_joins_two_nodes(tiny_model_dir: Path, tmp_path: Path) -> None:
    # scripts/accelerate/multi-node.yaml with the flags of docs/scale.md's SLURM script: two launches, one a node,
    # here both on this machine with a rank each
    def two_nodes(port: int) -> list[list[str]]:
        config = str(ROOT / "scripts/accelerate/multi-node.yaml")
        flags = ["--num_machines", "2", "--num_processes", "2", "--main_process_ip", "127.0.0.1"]
        return [[*ACCELERATE, config, *flags, "--main_process_port", str(port), "--machine_rank", str(node)]
                for node in (0, 1)]  # fmt: skip

    first, second = launch(["placement"], tiny_model_dir, tmp_path, launchers=two_nodes)["placement"]
    assert [(r["rank"], r["local"], r["node"], r["world"]) for r in (first, second)] == [(0, 0, 0, 2), (1, 0, 1, 2)]
    assert first["checksum"] == second["checksum"]
    assert first["reduced"] == second["reduced"] == {"rank": 0.5, "tokens": 4.5}


@pytest.mark.parametrize(
    ("setting", "sentence"),
    [
        ("distributed_type: FSDP", "accelerate launch was configured for FSDP, which this trainer does not use"),
        ("mixed_precision: fp16", "accelerate launch asks for mixed_precision fp16 but the run's bf16 is False"),
    ],
)
def test_accelerate_launch_asking_for_what_the_trainer_does_not_do_stops_in_one_sentence(
    setting: str, sentence: str, tmp_path: Path
) -> None:
    # The project's one-node config with one line changed, as a user's own `accelerate config` would: the run
    # stops at its start (before any preflight) instead of training other than the config says.
    lines = (ROOT / "scripts/accelerate/one-node.yaml").read_text().splitlines()
    key = setting.split(":")[0]
    config = tmp_path / "accelerate.yaml"
    config.write_text("\n".join(setting if line.startswith(f"{key}:") else line for line in lines) + "\n")
    command = [*ACCELERATE, str(config), "--num_processes", "1", "-m", "sparring.cli", "train", "games=search",
               f"out={tmp_path / 'run'}"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert done.returncode != 0
    assert sentence in " ".join((done.stdout + done.stderr).split())  # the console wraps it at its width
    assert not (tmp_path / "run").exists()


def test_each_launcher_request_the_trainer_would_drop_is_refused(tmp_path: Path) -> None:
    # The variables as accelerate's launcher writes them (its own spelling: "True", "NO"); the two launches above
    # check the real launcher with FSDP and fp16, and that the project's configs pass.
    from sparring.training.config import load_config
    from sparring.training.trainer import check_launcher

    plain = load_config(None, [f"out={tmp_path}"])
    bf16 = load_config(None, [f"out={tmp_path}", "bf16=true"])
    launcher = {"ACCELERATE_MIXED_PRECISION": "no", "ACCELERATE_DYNAMO_BACKEND": "NO", "ACCELERATE_USE_CPU": "False"}
    check_launcher(plain, "cuda", launcher)  # one-node.yaml's: nothing the run's config does not decide
    check_launcher(bf16, "cuda", {**launcher, "ACCELERATE_MIXED_PRECISION": "bf16"})  # the launcher agrees
    check_launcher(plain, "cpu", {**launcher, "ACCELERATE_USE_CPU": "True"})  # `accelerate launch --cpu`, cpu run
    check_launcher(plain, "cpu", {})  # no launcher (torchrun, one process)
    check_launcher(plain, "cuda", {**launcher, "ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "1"})
    refused = [
        (plain, "cuda", {"ACCELERATE_USE_DEEPSPEED": "true"}, "configured for DeepSpeed"),
        (plain, "cuda", {"ACCELERATE_USE_MEGATRON_LM": "true"}, "configured for Megatron-LM"),
        (bf16, "cuda", {"ACCELERATE_USE_FSDP": "true"}, "configured for FSDP"),
        (plain, "cuda", {"ACCELERATE_MIXED_PRECISION": "bf16"}, "mixed_precision bf16 but the run's bf16 is False"),
        (bf16, "cuda", {"ACCELERATE_MIXED_PRECISION": "fp8"}, "mixed_precision fp8 but the run's bf16 is True"),
        (plain, "cuda", {"ACCELERATE_DYNAMO_BACKEND": "INDUCTOR"}, "torch.compile (dynamo_backend inductor)"),
        (plain, "cuda", {"ACCELERATE_USE_CPU": "True"}, "told to run on CPU (--cpu or use_cpu) but the run's device"),
        (plain, "cuda", {"ACCELERATE_USE_FSDP": "1"}, "configured for FSDP"),  # accelerate's flags take 1, yes, on
        (plain, "cuda", {"ACCELERATE_USE_CPU": "yes"}, "told to run on CPU"),
        (plain, "cuda", {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "4"}, "gradient_accumulation_steps 4, which"),
    ]
    for config, device, environ, sentence in refused:
        with pytest.raises(SparringError, match=rf"^accelerate launch .*{re.escape(sentence)}.*\.$"):
            check_launcher(config, device, {**launcher, **environ})
