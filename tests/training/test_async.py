"""Asynchronous rollouts: the next iteration is played during the update, within max_staleness, importance-weighted."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from sparring import SparringError
from sparring.agents.chat import append_tokens
from sparring.agents.generation import SamplingParams
from sparring.envs.core import Episode, Turn
from sparring.training.config import load_config
from sparring.training.game import Rollout
from sparring.training.metrics import read_log
from sparring.training.pipeline import fresh_enough
from sparring.training.sequences import action_logprobs, to_sequence
from sparring.training.trainer import Trainer
from tests.conftest import default_corpus_built, require
from tests.training.conftest import tiny_model

RUN = ["games=search", "backend=hf", "warm_start=false", "proposals=1", "search_group=2", "drawn_tasks=1",
       "search_max_turns=1", "max_new_tokens=4", "threads=1", "lr=0.01", "drop_zero_variance=false",
       "log_episodes=0"]  # fmt: skip


def _trainer(tokenizer: Any, tmp_path: Path, *overrides: str) -> Trainer:
    config = load_config(None, [f"out={tmp_path / 'run'}", *RUN, *overrides])
    return Trainer(config, model=tiny_model(tokenizer), tokenizer=tokenizer)


def _run(trainer: Trainer, resume: bool = False) -> dict[str, Any]:
    """``sparring train``'s loop on ``trainer`` (on real search envs over the default corpus)."""
    require(default_corpus_built(), "the default corpus")
    from sparring.training.run import run_training

    return run_training(trainer.config, resume=resume, trainer=trainer)


class _Updates:
    """Records what each of a trainer's updates was given: the thread, the generator's version, the episodes'."""

    def __init__(self, trainer: Trainer, monkeypatch: pytest.MonkeyPatch):
        self.calls: list[dict[str, Any]] = []
        real = trainer.update

        def update(rollouts: list[Rollout], *args: Any) -> Any:
            self.calls.append({
                "main_thread": threading.current_thread() is threading.main_thread(),
                "generator": trainer.generator.weights_version,
                "episodes": [r.episode.weights_version for r in rollouts],
            })  # fmt: skip
            return real(rollouts, *args)

        monkeypatch.setattr(trainer, "update", update)


def test_async_rollouts_are_off_by_default_and_refuse_a_bound_they_would_break() -> None:
    config = load_config(None, [])
    assert config.async_rollouts is False and config.max_staleness == 1
    with pytest.raises(SparringError, match="needs max_staleness of at least 1"):
        load_config(None, ["async_rollouts=true", "max_staleness=0"])
    with pytest.raises(SparringError, match="max_staleness"):
        load_config(None, ["max_staleness=-1"])


def _rollout(group: str, version: int | None) -> Rollout:
    ep = Episode(env_id="toy", role="solver", domain="search", task_id="t", task={}, prompt="p")
    ep.weights_version = version
    return Rollout(ep, 1.0, [0.0], ("search", "solver", group), "done")


def test_a_group_with_an_episode_older_than_the_bound_is_dropped_whole_and_counted() -> None:
    rollouts = [_rollout("a", 4), _rollout("a", 5), _rollout("b", 2), _rollout("b", 5), _rollout("c", None)]
    kept, stats = fresh_enough(rollouts, version=5, max_staleness=2)
    assert [r.group[2] for r in kept] == ["a", "a", "c"]  # b's version-2 episode is 3 behind: all of b goes
    assert stats == {"stale_dropped": 2, "staleness_mean": pytest.approx(4 / 5), "staleness_max": 3.0}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_an_async_run_trains_each_iteration_on_episodes_played_during_the_update_before(
    smol_tokenizer: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer = _trainer(smol_tokenizer, tmp_path, "iterations=3", "async_rollouts=true")
    # The HF backend samples from a copy of its own: an update on the trainer's weights never reaches it mid-play.
    assert trainer.sampled_model is not trainer.policy_model
    updates = _Updates(trainer, monkeypatch)
    start = trainer.generator.weights_version
    assert _run(trainer)["iterations"] == 3
    calls = updates.calls
    assert len(calls) == 3 and not any(c["main_thread"] for c in calls)  # each update ran beside a play
    for j, call in enumerate(calls):
        assert call["generator"] == start + j  # the generator took every update's weights before the next one
        # the first iteration was played before any update; each later one during the update before it
        assert call["episodes"] and set(call["episodes"]) == {start + max(0, j - 1)}
        assert start + j - min(call["episodes"]) <= trainer.config.max_staleness
    assert trainer.generator.weights_version == start + 3
    generator = dict(trainer.sampled_model.state_dict())
    assert all(torch.equal(generator[k], v) for k, v in trainer.policy_model.state_dict().items())
    rows = read_log(tmp_path / "run")
    assert [row["search/update/staleness_max"] for row in rows] == [0.0, 1.0, 1.0]
    assert all(row["search/update/stale_dropped"] == 0 and row["search/update/tis_max"] > 0 for row in rows)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_an_async_run_resumes_from_its_checkpoint_and_plays_the_next_iteration_again(
    smol_tokenizer: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sparring.training.checkpoint import latest_checkpoint

    _run(_trainer(smol_tokenizer, tmp_path, "iterations=1", "async_rollouts=true"))
    resumed = _trainer(smol_tokenizer, tmp_path, "iterations=3", "async_rollouts=true")
    updates = _Updates(resumed, monkeypatch)
    assert _run(resumed, resume=True)["iterations"] == 3
    latest = latest_checkpoint(tmp_path / "run")
    assert latest is not None and latest.name == "iter-000003"
    versions = [(c["generator"], set(c["episodes"])) for c in updates.calls]
    now = versions[0][0]  # the checkpoint's weights, pushed on loading: the replayed iteration is fresh
    assert versions == [(now, {now}), (now + 1, {now})]
    assert [row["step"] for row in read_log(tmp_path / "run")] == [1, 2, 3]


def _sampled(trainer: Trainer, prompt: list[int], reward: float, seed: int) -> Rollout:
    """A real generation of the trainer's generator, as an episode recording its behaviour logprobs and version."""
    generation = trainer.generator.generate([prompt], SamplingParams(temperature=1.0, max_new_tokens=6, seed=seed))[0]
    ep = Episode(env_id="toy", role="solver", domain="search", task_id="t", task={}, prompt="p")
    append_tokens(ep, prompt, -1, action=False)
    append_tokens(ep, generation.token_ids, 0, action=True, logprobs=generation.logprobs)
    ep.turns.append(Turn(action=generation.text, observation="", reward=reward))
    ep.terminated, ep.outcome, ep.weights_version = True, {"reward": reward}, trainer.generator.weights_version
    return Rollout(ep, reward, [0.0], ("search", "solver", "g"), "done")


def test_the_importance_weight_is_one_on_fresh_episodes_and_corrects_stale_ones(
    smol_tokenizer: Any, tmp_path: Path
) -> None:
    trainer = _trainer(smol_tokenizer, tmp_path, "async_rollouts=true", "tis_cap=1000")
    prompt = list(smol_tokenizer("Name a colour and say why:")["input_ids"])
    rollouts = [_sampled(trainer, prompt, 1.0, seed=1), _sampled(trainer, prompt, 0.0, seed=2)]
    fresh = trainer.update(rollouts, np.random.default_rng(0)).extra or {}
    # Sampled by the weights being stepped: the generator's logprobs are the trainer's (up to float rounding).
    assert fresh["staleness_max"] == 0 and fresh["tis_mean"] == pytest.approx(1.0, abs=1e-4)
    assert fresh["tis_max"] == pytest.approx(1.0, abs=1e-4)
    # The same episodes one update later (as async_rollouts trains them): w = π_old / μ, by hand for every token.
    with torch.no_grad():
        old = torch.cat([action_logprobs(trainer.policy_model, to_sequence(r.episode)).cpu() for r in rollouts])
    behaviour = torch.cat([to_sequence(r.episode).behaviour_logprobs for r in rollouts])
    weights = torch.exp(old - behaviour)
    stale = trainer.update(rollouts, np.random.default_rng(0)).extra or {}
    assert stale["staleness_max"] == 1 and stale["stale_dropped"] == 0
    assert stale["tis_max"] == pytest.approx(float(weights.max()), rel=1e-4)
    assert stale["tis_mean"] == pytest.approx(float(weights.mean()), rel=1e-4)
    assert abs(stale["tis_max"] - 1) > 1e-2  # the step moved the policy: the weights correct for it
