"""Train a model further on RAG validation demonstrations only, and save it (docs/experiments.md).

The demonstrations are the warm start's: scripted proposals with their seed answer in the evidence,
each the validation prompt and the seed answer. Then compare the proposer's valid rate before and
after with ``sparring eval search-propose`` on the same seed draws.

    python scripts/probe_validator.py runs/learn13/checkpoints/iter-000000/model 64 runs/probe-v64
    sparring eval search-propose --model runs/probe-v64 --limit 100 --max-turns 3 --max-new-tokens 40
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from sparring.training.config import load_config
from sparring.training.demos import demonstrations
from sparring.training.trainer import Trainer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", help="the model folder to start from (a checkpoint's model/)")
    parser.add_argument("proposals", type=int, help="scripted proposals to play for demonstrations")
    parser.add_argument("out", help="folder to save the trained model and its tokenizer in")
    parser.add_argument("--seed", type=int, default=1_000_003, help="draws the proposals' seeds")
    args = parser.parse_args()
    overrides = [f"model={args.model}", "warm_start_episodes=0", f"warm_start_proposer_episodes={args.proposals}",
                 f"warm_start_validator_demos={args.proposals}", f"out={args.out}-run", "threads=2"]  # fmt: skip
    config = load_config("cpu-learn", overrides)
    trainer = Trainer(config)
    t0 = time.perf_counter()
    demos, _ = demonstrations(config, trainer.generator, np.random.default_rng(args.seed))
    rag = [d for d in demos if d.role == "validator"]
    tokens = sum(len(d.token_ids) for d in rag)
    print(f"{len(rag)} validation demonstrations of {args.proposals} proposals, {tokens} tokens, "
          f"{time.perf_counter() - t0:.0f} s")  # fmt: skip
    stats = trainer.supervised(rag, 1, config.warm_start_lr)
    print(f"trained on {stats.tokens} action tokens: last batch NLL {stats.loss:.4f}, {stats.seconds:.0f} s")
    trainer.policy_model.save_pretrained(args.out)
    trainer.tokenizer.save_pretrained(args.out)
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
