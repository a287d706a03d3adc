"""How much spread a policy's solver groups have at given sampling settings (docs/experiments.md).

Plays the same drawn search tasks once per setting, G attempts each (the cpu-learn preset's group
size, turn limit and tokens per turn), and prints one JSON line per setting: the groups whose
attempts scored differently (the only ones self-play learns from), the mean solve rate, how many
attempts degenerated (a turn of 100+ characters that closes no tag) and how many different first
actions each group played.

    python scripts/probe_sampling.py runs/learn13/checkpoints/iter-000000/model 1.0/1.0,1.5/1.0,1.5/0.9
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from sparring.training.config import load_config
from sparring.training.game import GAMES, ReplayBuffer, Rollout, play_iteration
from sparring.training.trainer import Trainer


def _degenerate(rollout: Rollout) -> bool:
    return any(len(turn.action) > 100 and "</" not in turn.action for turn in rollout.episode.turns)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", help="a model folder (a checkpoint's model/)")
    parser.add_argument("settings", help="temperature/top_p pairs, comma-separated: 1.0/1.0,1.5/0.9")
    parser.add_argument("--tasks", type=int, default=16, help="drawn tasks per setting")
    parser.add_argument("--seed", type=int, default=7, help="draws the tasks (the same at every setting)")
    args = parser.parse_args()
    overrides = [f"model={args.model}", "proposals=0", f"drawn_tasks={args.tasks}", "max_top_ups=0",
                 "out=runs/probe-sampling", "threads=2"]  # fmt: skip
    config = load_config("cpu-learn", overrides)
    trainer = Trainer(config)
    for pair in args.settings.split(","):
        config.temperature, config.top_p = (float(x) for x in pair.split("/"))
        result = play_iteration(
            GAMES["search"], trainer.generator, config, 0, np.random.default_rng(args.seed), ReplayBuffer()
        )
        groups: dict[tuple[str, str, str], list[Rollout]] = {}
        for rollout in result.rollouts:
            if not rollout.masked:  # a masked rollout has no reward (NaN)
                groups.setdefault(rollout.group, []).append(rollout)
        rates = [float(np.mean([r.reward for r in group])) for group in groups.values()]
        line = {
            "temperature": config.temperature,
            "top_p": config.top_p,
            "groups": len(groups),
            "spread": sum(len({r.reward for r in group}) > 1 for group in groups.values()),
            "solve_rate": round(float(np.mean(rates)), 3),
            "degenerate": sum(_degenerate(r) for r in result.rollouts),
            "attempts": len(result.rollouts),
            "distinct_first_actions": [len({r.episode.turns[0].action for r in group}) for group in groups.values()],
        }
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
