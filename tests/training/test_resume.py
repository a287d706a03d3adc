"""A run killed with SIGKILL mid-run resumes from its latest checkpoint, losing at most the iteration in flight."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from sparring.training.metrics import read_log
from tests.conftest import default_corpus_built, require

SPARRING = str(Path(sys.executable).with_name("sparring"))


def _train(out: Path, model: Path, *extra: str) -> list[str]:
    return [
        SPARRING, "train", f"model={model}", f"out={out}", "games=search", "backend=hf", "warm_start=false",
        "iterations=3",
        "proposals=2", "search_group=2", "drawn_tasks=1", "search_max_turns=2", "max_new_tokens=8",
        "concurrency=4", "checkpoint_every=1", "threads=1", *extra,
    ]  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_killed_run_resumes_where_its_last_checkpoint_left_it(tiny_model_dir: Path, tmp_path: Path) -> None:
    require(default_corpus_built(), "the default corpus")
    out = tmp_path / "run"
    env = {**os.environ, "COLUMNS": "200"}
    process = subprocess.Popen(_train(out, tiny_model_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    pointer = out / "checkpoints" / "latest"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and process.poll() is None:
        if pointer.is_file() and pointer.read_text().strip() == "iter-000001":
            break
        time.sleep(0.2)
    assert process.poll() is None, process.stderr.read().decode()[-2000:] if process.stderr else ""
    process.send_signal(signal.SIGKILL)  # mid-run: iteration 2 is in flight
    process.wait()
    assert pointer.read_text().strip() == "iter-000001"

    again = subprocess.run([*_train(out, tiny_model_dir), "--resume"], capture_output=True, text=True, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resumed from" in again.stderr and "(iteration 1)" in again.stderr
    assert pointer.read_text().strip() == "iter-000003"
    steps = [row["step"] for row in read_log(out)]
    assert steps == [1, 2, 3]  # iteration 2 was played again from the checkpoint, nothing else was lost
    state = json.loads((out / "checkpoints" / "iter-000003" / "config.json").read_text())
    assert state["iterations"] == 3 and (out / "summary.png").is_file()

    refused = subprocess.run(_train(out, tiny_model_dir), capture_output=True, text=True, env=env)
    assert refused.returncode == 2 and "already holds a run" in " ".join(refused.stderr.split())


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_after_a_resume_the_kl_reference_is_the_policy_at_the_start_of_self_play(
    smol_tokenizer: Any, tmp_path: Path
) -> None:
    # The reference was frozen from the weights the run resumed with: after a resume the KL pulled
    # toward a later policy instead of the warm start the config documents.
    require(default_corpus_built(), "the default corpus")
    from safetensors.torch import load_file, save_file

    from sparring.training.config import load_config
    from sparring.training.run import run_training
    from sparring.training.trainer import Trainer
    from tests.training.conftest import tiny_model

    def run(iterations: int, resume: bool) -> Trainer:
        config = load_config(None, [
            f"out={tmp_path / 'run'}", "games=search", "backend=hf", "warm_start=false", f"iterations={iterations}",
            "kl_coef=0.1",
            "lr=0.01", "weight_decay=0.5", "proposals=1", "search_group=2", "drawn_tasks=1", "search_max_turns=1",
            "max_new_tokens=4", "threads=1",
        ])  # fmt: skip
        trainer = Trainer(config, model=tiny_model(smol_tokenizer, seed=iterations), tokenizer=smol_tokenizer)
        run_training(config, resume=resume, trainer=trainer)
        return trainer

    run(1, resume=False)
    checkpoints = tmp_path / "run" / "checkpoints"
    # The policy moves on after the start of self-play (an update with nothing to train leaves the
    # weights alone, so the tiny run may not move them itself): the resumed weights differ from it.
    moved = checkpoints / "iter-000001" / "model" / "model.safetensors"
    save_file({k: v + 0.01 for k, v in load_file(str(moved)).items()}, str(moved), metadata={"format": "pt"})
    trainer = run(2, resume=True)
    start = load_file(str(checkpoints / "iter-000000" / "model" / "model.safetensors"))
    resumed = load_file(str(checkpoints / "iter-000001" / "model" / "model.safetensors"))
    assert trainer.reference is not None
    reference = trainer.reference.state_dict()
    assert all(torch.equal(reference[k], v) for k, v in start.items())
    assert any(not torch.equal(start[k], resumed[k]) for k in start)  # the policy had moved on from it
