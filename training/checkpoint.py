"""Checkpoints: everything a run needs to continue after a crash, losing at most the iteration in flight.

A checkpoint is a folder ``OUT/checkpoints/iter-NNNNNN`` holding the model as a Hugging Face folder
(so ``sparring eval --model`` takes it as it is; a sharded run's weights are gathered into the same
files), the optimizer (a sharded run's by parameter name, loadable sharded or not), the RNG states, the replay
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
from sparring.training.fsdp import is_sharded, load_model_state, load_optimizer_state, optimizer_state, save_model
from sparring.training.ranks import gather_objects

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
    rngs = gather_objects(rng_state(trainer))  # every rank's, in rank order: each draws its own tasks after a resume
    folder = _root(trainer.out) / f"iter-{trainer.iteration:06d}"
    work = folder.with_name(folder.name + ".saving")
    sharded = is_sharded(trainer.policy_model)
    if acc.is_main_process:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
    if sharded:  # gathered from every rank, whole on rank 0: the same files as an unsharded run's
        save_model(trainer.policy_model, work / "model")
        optimizer = optimizer_state(trainer.policy_model, trainer.optimizer)
    else:
        optimizer = trainer.optimizer.state_dict()
    if acc.is_main_process:
        if not sharded:
            trainer.policy_model.save_pretrained(work / "model", safe_serialization=True)
        trainer.tokenizer.save_pretrained(work / "model")
        state = {
            "iteration": trainer.iteration,
            "warm_started": trainer.warm_started,
            "weights_version": trainer.generator.weights_version,
            "seconds": trainer.elapsed(),
            "longest_iteration": trainer.longest_iteration,
            "optimizer": optimizer,
            "rng_ranks": rngs,
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
    if is_sharded(model):
        missing, unexpected = load_model_state(model, tensors)
    else:
        missing, unexpected = model.load_state_dict(tensors, strict=False)
    real_missing = [k for k in missing if "lm_head" not in k]  # tied to the embeddings, saved once
    if real_missing or unexpected:
        raise SparringError(f"checkpoint {folder} does not fit the model ({len(real_missing)} missing weights).")


def load_checkpoint(trainer: Trainer, folder: Path) -> None:
    """Restore the trainer from ``folder`` (model weights, optimizer, RNG, replay, counters)."""
    state: dict[str, Any] = torch.load(folder / STATE, weights_only=False)
    load_weights(trainer.policy_model, folder)
    load_optimizer_state(trainer.policy_model, trainer.optimizer, state["optimizer"])
    restore_rng(trainer, state)
    for name, tasks in state["replay"].items():
        if name in trainer.replay:
            trainer.replay[name].tasks = list(tasks)
            trainer.replay[name].higher_order = list(state.get("higher_order", {}).get(name, []))
    trainer.iteration = int(state["iteration"])
    trainer.warm_started = bool(state["warm_started"])
    trainer.seconds_before = float(state.get("seconds", 0.0))  # checkpoints from before the time budget lack them
    trainer.longest_iteration = float(state.get("longest_iteration", 0.0))
    trainer.sync_generator()


def rng_state(trainer: Trainer) -> dict[str, Any]:
    """This rank's random states: the trainer's generator, python's, numpy's global one, torch's (and CUDA's)."""
    state = {
        "numpy": trainer.rng.bit_generator.state,
        "numpy_global": np.random.get_state(),
        "python": random.getstate(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and trainer.accelerator.device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(trainer.accelerator.device)
    return state


def restore_rng(trainer: Trainer, state: dict[str, Any]) -> None:
    """Give this rank the random states it saved.

    A run resumed on more ranks than it saved gives each extra rank a fresh stream of its own (seeded by
    rank and iteration) rather than a copy of another rank's.
    """
    ranks: list[dict[str, Any]] = state.get("rng_ranks") or [state["rng"]]  # older checkpoints kept rank 0's alone
    rank = trainer.accelerator.process_index
    if rank >= len(ranks):
        seed = trainer.config.seed + 1000 * rank + trainer.iteration
        trainer.rng = np.random.default_rng(seed)
        np.random.seed(seed)
        random.seed(seed)
        torch.manual_seed(seed)
        return
    mine = ranks[rank]
    trainer.rng.bit_generator.state = mine["numpy"]
    random.setstate(mine["python"])
    torch.set_rng_state(mine["torch"])
    if "numpy_global" in mine:
        np.random.set_state(mine["numpy_global"])
    else:
        np.random.seed(trainer.config.seed + trainer.iteration)
    if "cuda" in mine and trainer.accelerator.device.type == "cuda":
        torch.cuda.set_rng_state(mine["cuda"], trainer.accelerator.device)
