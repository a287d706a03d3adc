"""Training on a small fixed task set raises the solver's reward beyond the noise of the same seeds.

SmolLM2 answers a fixed set of training questions (greedy, seeded); the same evaluation twice with
no update measures the noise; then the trainer learns from the scripted demonstrator's successful
episodes on those questions (the warm start) and one self-play update, and the evaluation is run
again on the same seeds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from sparring.agents.chat import ChatFormat
from sparring.agents.demonstrators import DefinitionSearchAgent
from sparring.agents.generation import SamplingParams
from sparring.agents.runner import EpisodeRunner, EpisodeSpec, RunnerConfig
from sparring.training.config import load_config
from sparring.training.demos import tokenize_episode
from sparring.training.game import Rollout, solved
from sparring.training.trainer import Trainer
from tests.agents.vllm_fixtures import require_vllm

pytestmark = [pytest.mark.slow, pytest.mark.model]

ENV = "sparring/SearchAnswer-v0"


def _make() -> Any:
    return gym.make(ENV, max_turns=2)


def _tasks(n: int) -> list[dict[str, Any]]:
    """``n`` training questions (never held-out ones), drawn as the env draws them."""
    env = _make()
    try:
        return [env.reset(seed=seed)[1]["task"] for seed in range(n)]
    finally:
        env.close()


def _solve_rate(policy: Any, tasks: list[dict[str, Any]], sampling: SamplingParams) -> float:
    config = RunnerConfig(concurrency=len(tasks), sampling=sampling, max_turns=2, progress=False)
    episodes = EpisodeRunner(policy, config).run([EpisodeSpec(_make, seed=0, options={"task": t}) for t in tasks])
    return sum(solved(ep) for ep in episodes) / len(episodes)


@pytest.mark.timeout(1200)
def test_training_raises_the_solver_reward_beyond_the_noise(corpus: Any, smollm2: Any, tmp_path: Path) -> None:
    from sparring.agents.model import load_model

    require_vllm()
    tasks = _tasks(6)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=32, seed=0)
    # vLLM samples (the default engine, with prefix caching: the plain HF reference took 264 s here), bf16 updates
    # (as the presets train; fp32's warm start alone took 63 s on 2 cores).
    config = load_config(None, [f"out={tmp_path}", "games=search", "backend=vllm", "lr=1e-5", "warm_start_lr=5e-5",
                                "warm_start_bf16=true", "update_bf16=true"])  # fmt: skip
    trainer = Trainer(config, model=load_model(None), tokenizer=smollm2.tokenizer)  # its own copy of SmolLM2

    before = _solve_rate(trainer.generator, tasks, greedy)
    again = _solve_rate(trainer.generator, tasks, greedy)
    noise = abs(before - again)

    shown = EpisodeRunner(lambda spec: DefinitionSearchAgent(), RunnerConfig(progress=False)).run(
        [EpisodeSpec(_make, seed=0, options={"task": t}) for t in tasks]
    )
    env = _make()
    tools = list(env.unwrapped.tools)
    env.close()
    chat = ChatFormat(trainer.tokenizer)
    demos = [tokenize_episode(chat, ep, tools) for ep in shown if solved(ep)]
    assert len(demos) >= 3, "the scripted demonstrator should solve most training questions"
    trainer.supervised(demos, epochs=2, lr=config.warm_start_lr)

    sampled = SamplingParams(temperature=1.0, max_new_tokens=32, seed=1)
    played = EpisodeRunner(trainer.generator, RunnerConfig(sampling=sampled, max_turns=2, progress=False)).run(
        [EpisodeSpec(_make, seed=0, options={"task": t}, group_id=t["id"]) for t in tasks for _ in range(4)]
    )
    rollouts = [
        Rollout(ep, float(ep.outcome.get("reward", 0.0)), [0.0] * len(ep.turns), ("search", "solver", str(ep.group_id)),
                "done")
        for ep in played
        if ep.error is None
    ]  # fmt: skip
    trainer.reinforce(rollouts)

    after = _solve_rate(trainer.generator, tasks, greedy)
    # Measured on corpus format 4 (2 cores, vLLM, bf16 updates): 0.00 before, 0.00 again (greedy), 0.33 after
    # (0.17 after with the HF reference and fp32 updates).
    assert after > before + noise, (before, again, after)
