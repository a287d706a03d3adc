"""Checkpoints: everything a run needs to continue after a crash, losing at most the iteration in flight.

A checkpoint is a folder ``OUT/checkpoints/iter-NNNNNN`` holding the model as a Hugging Face folder
(so ``sparring eval --model`` takes it as it is), the optimizer, the RNG states, the replay
buffers, the iteration, the weights version and the config. It is written into a temporary
folder and renamed into place, and ``OUT/checkpoints/latest`` names the newest complete one, so
a process killed while saving leaves the previous checkpoint as the latest.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sparring import SparringError
from sparring.training.config import to_dict

if TYPE_CHECKING:
    from sparring.training.trainer import Trainer

__all__ = ["WARM_START", "latest_checkpoint", "load_checkpoint", "load_weights", "save_checkpoint", "start_checkpoint"]

STATE = "trainer_state.pt"


#: The checkpoint the warm start saves (iteration 0); rotation keeps it.
WARM_START = "iter-000000"


def _root(out: Path) -> Path:
    return out / "checkpoints"


def latest_checkpoint(out: str | Path) -> Path | None:
    """The newest complete checkpoint of run folder ``out``, or None."""
    pointer = _root(Path(out)) / "latest"
    if not pointer.is_file():
        return None
    folder = _root(Path(out)) / pointer.read_text().strip()
    return folder if (folder / STATE).is_file() else None


def save_checkpoint(trainer: Trainer, keep: int = 2) -> Path | None:
    """Write the trainer's state (rank 0 writes; every rank waits for it); returns the folder.

    The ``keep`` newest checkpoints stay, and the warm start's (``iter-000000``) always: evaluating
    the policy before and after self-play needs both.
    """
    acc = trainer.accelerator
    acc.wait_for_everyone()
    folder = _root(trainer.out) / f"iter-{trainer.iteration:06d}"
    if acc.is_main_process:
        work = folder.with_name(folder.name + ".saving")
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        trainer.policy_model.save_pretrained(work / "model", safe_serialization=True)
        trainer.tokenizer.save_pretrained(work / "model")
        state = {
            "iteration": trainer.iteration,
            "warm_started": trainer.warm_started,
            "weights_version": trainer.generator.weights_version,
            "seconds": trainer.elapsed(),
            "longest_iteration": trainer.longest_iteration,
            "optimizer": trainer.optimizer.state_dict(),
            "rng": {
                "numpy": trainer.rng.bit_generator.state,
                "python": random.getstate(),
                "torch": torch.get_rng_state(),
            },
            "replay": {name: buffer.state() for name, buffer in trainer.replay.items()},
            "higher_order": {name: list(buffer.higher_order) for name, buffer in trainer.replay.items()},
            "config": to_dict(trainer.config),
        }
        torch.save(state, work / STATE)
        (work / "config.json").write_text(json.dumps(state["config"], indent=2))
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(work, folder)
        pointer = _root(trainer.out) / "latest"
        tmp = pointer.with_suffix(".tmp")
        tmp.write_text(folder.name)
        os.replace(tmp, pointer)
        done = sorted(p for p in _root(trainer.out).glob("iter-*") if p.is_dir() and not p.name.endswith(".saving"))
        done = [p for p in done if p.name != WARM_START]  # the policy before self-play: the baseline of its evaluation
        for old in done[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    acc.wait_for_everyone()
    return folder


def start_checkpoint(out: str | Path) -> Path | None:
    """The checkpoint of the policy at the start of self-play (``iter-000000``) of run folder ``out``, or None."""
    folder = _root(Path(out)) / WARM_START
    return folder if (folder / STATE).is_file() else None


def load_weights(model: Any, folder: Path) -> None:
    """Load the model weights of checkpoint ``folder`` into ``model``."""
    from safetensors.torch import load_file

    weights = folder / "model" / "model.safetensors"
    if not weights.is_file():
        raise SparringError(f"checkpoint {folder} has no model.safetensors; it is incomplete: delete it and resume.")
    tensors = load_file(str(weights))
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    real_missing = [k for k in missing if "lm_head" not in k]  # tied to the embeddings, saved once
    if real_missing or unexpected:
        raise SparringError(f"checkpoint {folder} does not fit the model ({len(real_missing)} missing weights).")


def load_checkpoint(trainer: Trainer, folder: Path) -> None:
    """Restore the trainer from ``folder`` (model weights, optimizer, RNG, replay, counters)."""
    state: dict[str, Any] = torch.load(folder / STATE, weights_only=False)
    load_weights(trainer.policy_model, folder)
    trainer.optimizer.load_state_dict(state["optimizer"])
    trainer.rng.bit_generator.state = state["rng"]["numpy"]
    random.setstate(state["rng"]["python"])
    torch.set_rng_state(state["rng"]["torch"])
    for name, tasks in state["replay"].items():
        if name in trainer.replay:
            trainer.replay[name].tasks = list(tasks)
            trainer.replay[name].higher_order = list(state.get("higher_order", {}).get(name, []))
    trainer.iteration = int(state["iteration"])
    trainer.warm_started = bool(state["warm_started"])
    trainer.seconds_before = float(state.get("seconds", 0.0))  # checkpoints from before the time budget lack them
    trainer.longest_iteration = float(state.get("longest_iteration", 0.0))
    trainer.generator.update_weights()
    np.random.seed(trainer.config.seed + trainer.iteration)
