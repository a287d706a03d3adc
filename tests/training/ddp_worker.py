"""Run by ``torchrun --nproc_per_node 2``: one reinforce update on different episodes per rank.

Writes, from rank 0, a JSON file (the first argument) with each rank's parameter checksum after the
update and the metrics reduced across ranks.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from sparring.agents.chat import append_tokens
from sparring.agents.model import load_tokenizer
from sparring.envs.core import Episode, Turn
from sparring.training.config import load_config
from sparring.training.game import Rollout
from sparring.training.trainer import Trainer
from tests.training.conftest import tiny_model


def _episode(action: list[int], reward: float) -> Episode:
    ep = Episode(env_id="toy", role="solver", domain="search", task_id="t", task={}, prompt="p")
    append_tokens(ep, [1, 2, 3], -1, action=False)
    append_tokens(ep, action, 0, action=True, logprobs=[-10.0] * len(action))
    ep.turns.append(Turn(action="a", observation="", reward=reward))
    ep.terminated = True
    return ep


def main() -> None:
    out = Path(sys.argv[1])
    tokenizer = load_tokenizer(sys.argv[2])
    config = load_config(None, [f"out={out.parent / 'run'}", "games=search", "threads=1", "lr=0.01"])
    trainer = Trainer(config, model=tiny_model(tokenizer, seed=0), tokenizer=tokenizer)
    rank = trainer.rank
    group = ("search", "solver", f"g{rank}")
    # Each rank learns from its own episodes: without the gradient all-reduce the ranks would diverge.
    rollouts = [
        Rollout(_episode([5 + rank, 6], 1.0), 1.0, [0.0], group, "done"),
        Rollout(_episode([9, 10 + rank], 0.0), 0.0, [0.0], group, "done"),
    ]
    trainer.reinforce(rollouts)
    checksum = torch.tensor([float(sum(p.detach().double().sum() for p in trainer.model.parameters()))])
    sums = trainer.accelerator.gather(checksum).tolist()
    reduced = trainer.reduce({"rank": float(rank), "tokens": 4.0 + rank})
    if trainer.accelerator.is_main_process:
        out.write_text(json.dumps({"checksums": sums, "reduced": reduced, "ranks": trainer.accelerator.num_processes}))


if __name__ == "__main__":
    main()
