"""The trainer on a tiny random model: updates, weight sync, checkpoints, config, demonstrations, the game."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from sparring import SparringError
from sparring.agents.chat import append_tokens
from sparring.envs.core import Episode, Turn
from sparring.training.checkpoint import STATE, latest_checkpoint, load_checkpoint, save_checkpoint
from sparring.training.config import TrainConfig, load_config, presets
from sparring.training.game import ReplayBuffer, Rollout, end_reason
from sparring.training.metrics import read_log
from sparring.training.sequences import action_logprobs, action_scores, bucket, to_sequence
from sparring.training.trainer import Trainer
from tests.training.conftest import tiny_model


def _trainer(tokenizer: Any, tmp_path: Path, *overrides: str, seed: int = 0) -> Trainer:
    config = load_config(None, [f"out={tmp_path / 'run'}", "games=search", "backend=hf", "threads=1", *overrides])
    return Trainer(config, model=tiny_model(tokenizer, seed), tokenizer=tokenizer)


def _episode(prompt: list[int], action: list[int], reward: float = 0.0) -> Episode:
    ep = Episode(env_id="toy", role="solver", domain="search", task_id="t", task={}, prompt="p")
    append_tokens(ep, prompt, -1, action=False)
    append_tokens(ep, action, 0, action=True, logprobs=[-10.0] * len(action))
    ep.turns.append(Turn(action="a", observation="", reward=reward))
    ep.terminated = True
    ep.outcome = {"reward": reward}
    return ep


def _logprob(trainer: Trainer, ep: Episode) -> float:
    with torch.no_grad():
        return float(action_logprobs(trainer.model, to_sequence(ep)).sum())


@pytest.mark.parametrize("optimizer", ["adamw", "adafactor"])
def test_an_update_moves_probability_toward_the_better_episode_and_syncs_the_generator(
    smol_tokenizer: Any, tmp_path: Path, optimizer: str
) -> None:
    trainer = _trainer(smol_tokenizer, tmp_path, "lr=0.01", "std_scale=false", f"optimizer={optimizer}")
    good, bad = _episode([1, 2, 3, 4], [5, 6, 7], 1.0), _episode([1, 2, 3, 4], [8, 9, 10], 0.0)
    before = (_logprob(trainer, good), _logprob(trainer, bad))
    prompt = [1, 2, 3, 4]
    generated_before = trainer.generator.logprobs([prompt + [5, 6, 7]], [4])[0]
    group = ("search", "solver", "g")
    stats = trainer.reinforce([Rollout(good, 1.0, [0.0], group, "done"), Rollout(bad, 0.0, [0.0], group, "done")])
    after = (_logprob(trainer, good), _logprob(trainer, bad))
    assert stats.sequences == 2 and stats.tokens == 6
    assert after[0] > before[0] and after[1] < before[1]
    extra = stats.extra or {}
    # group of two, rewards 1 and 0, no std scaling: token advantages +0.5 and -0.5 on 3 tokens each
    assert extra["adv_mean"] == pytest.approx(0.0) and extra["adv_abs_max"] == pytest.approx(0.5)
    assert extra["adv_zero_frac"] == 0.0
    assert 0.0 < extra["entropy"] <= float(np.log(trainer.model.config.vocab_size)) + 1e-4
    assert trainer.generator.weights_version == 1  # the generator now samples from the new weights
    generated_after = trainer.generator.logprobs([prompt + [5, 6, 7]], [4])[0]
    assert sum(generated_after) > sum(generated_before)
    held = sum(t.numel() for st in trainer.optimizer.state.values() for t in st.values() if torch.is_tensor(t))
    size = sum(p.numel() for p in trainer.model.parameters())
    assert held >= 2 * size if optimizer == "adamw" else held < size / 10  # Adafactor: factored, no first moment


@pytest.mark.parametrize(("updates", "bf16"), [(1, False), (1, True), (2, False), (2, True)])
def test_later_mini_batches_are_scored_against_the_logprobs_before_the_first_step(
    smol_tokenizer: Any, tmp_path: Path, updates: int, bf16: bool
) -> None:
    """PPO's ratio is new / old policy: 1 in the first mini-batch, away from 1 once a step was taken.

    In bfloat16 autocast too: the pre-step and trained logprobs are rounded alike, and the update
    still favours the better episode of each group.
    """
    options = (f"updates_per_iteration={updates}", f"update_bf16={bf16}", "kl_coef=0.05")
    trainer = _trainer(smol_tokenizer, tmp_path, "lr=0.01", "std_scale=false", *options)
    trainer.freeze_reference()  # as a run does after its warm start: the KL's frozen copy is scored too
    rollouts = []
    for g in range(2):
        group = ("search", "solver", f"g{g}")
        rollouts += [
            Rollout(_episode([1, 2, 3, 4 + g], [5, 6, 7], 1.0), 1.0, [0.0], group, "done"),
            Rollout(_episode([1, 2, 3, 4 + g], [8, 9, 10], 0.0), 0.0, [0.0], group, "done"),
        ]
    before = [_logprob(trainer, r.episode) for r in rollouts]
    stats = trainer.reinforce(rollouts)
    after = [_logprob(trainer, r.episode) for r in rollouts]
    extra = stats.extra or {}
    assert stats.sequences == 4
    gaps = [(after[i] - after[i + 1]) - (before[i] - before[i + 1]) for i in (0, 2)]
    assert all(gap > 0 for gap in gaps), gaps  # each group's better episode gained on its worse one
    if updates == 1:
        assert extra["ratio_dev"] == pytest.approx(0.0, abs=1e-6)
        assert extra["kl"] == 0.0  # the reference is the policy before the step, scored in the same precision
    else:  # the second half's ratios carry the first step's change
        assert extra["ratio_dev"] > 1e-4


def test_the_warm_start_steps_once_per_batch_of_demonstrations(smol_tokenizer: Any, tmp_path: Path) -> None:
    """Seven demonstrations in batches of three, two epochs: 3 + 3 steps, and the demonstrated actions gain."""
    trainer = _trainer(smol_tokenizer, tmp_path, "warm_start_batch=3")
    demos = [_episode([1, 2, 3, 4], [5 + i, 6, 7]) for i in range(7)]
    before = sum(_logprob(trainer, ep) for ep in demos)
    stats = trainer.supervised(demos, epochs=2, lr=1e-3)
    assert (stats.extra or {})["optimizer_steps"] == 6 and stats.sequences == 7 and stats.tokens == 2 * 7 * 3
    assert sum(_logprob(trainer, ep) for ep in demos) > before
    assert trainer.optimizer.param_groups[0]["lr"] == trainer.config.lr  # the run's rate is back for self-play


def test_action_scores_entropy_matches_the_distribution(smol_tokenizer: Any, tmp_path: Path) -> None:
    """The entropy metric is -Σ p log p of the next-token distribution at each action position."""
    trainer = _trainer(smol_tokenizer, tmp_path)
    seq = to_sequence(_episode([1, 2, 3, 4], [5, 6, 7]))
    with torch.no_grad():
        logp, entropy = action_scores(trainer.model, seq, temperature=0.7)
        ids = seq.input_ids.to(trainer.accelerator.device)  # on a GPU too
        logits = trainer.model(input_ids=ids.unsqueeze(0)).logits[0, seq.targets - 1].float() / 0.7
    dist = torch.distributions.Categorical(logits=logits)
    assert torch.allclose(entropy, dist.entropy(), atol=1e-4)
    assert torch.allclose(logp, dist.log_prob(ids[seq.targets]), atol=1e-4)


def test_padding_to_a_bucket_changes_neither_the_logprobs_nor_their_gradient(
    smol_tokenizer: Any, tmp_path: Path
) -> None:
    """The padded pass scores what the plain one does: padding comes after every scored position."""
    trainer = _trainer(smol_tokenizer, tmp_path)
    ep = _episode(list(range(1, 71)), list(range(100, 105)))  # 75 tokens, padded to 128; 5 targets to 64
    append_tokens(ep, list(range(200, 230)), -1, action=False)
    append_tokens(ep, list(range(300, 303)), 0, action=True, logprobs=[-10.0] * 3)
    seq = to_sequence(ep)
    model = trainer.model
    with trainer._training():  # the autograd-capable layers, as in an update
        padded = action_logprobs(model, seq).sum()
        padded.backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        assert len(grads) > 2
        model.zero_grad()
        ids = seq.input_ids.unsqueeze(0).to(trainer.accelerator.device)
        plain = torch.log_softmax(model(input_ids=ids).logits[0, seq.targets - 1].float(), -1)
        plain = plain.gather(-1, ids[0, seq.targets].unsqueeze(-1)).sum()
        plain.backward()
    assert seq.tokens == 8 and bucket(len(seq.input_ids)) == 128
    assert float(padded.detach()) == pytest.approx(float(plain.detach()), abs=1e-4)
    after = [p.grad for p in model.parameters() if p.grad is not None]
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(grads, after, strict=True))


def test_buckets_are_few_and_pad_little() -> None:
    """24 shapes up to 2,048 tokens, never shorter than asked, at most an eighth longer above 512."""
    sizes = [bucket(n) for n in range(1, 4097)]
    assert all(b >= n for n, b in enumerate(sizes, start=1))
    assert len(set(sizes[:2048])) == 24 and len(set(sizes)) == 32
    assert all(b - n <= n / 8 for n, b in enumerate(sizes, start=1) if n > 512)


def test_equal_rewards_are_no_signal_and_are_dropped(smol_tokenizer: Any, tmp_path: Path) -> None:
    trainer = _trainer(smol_tokenizer, tmp_path)
    weights = [p.detach().clone() for p in trainer.model.parameters()]
    group = ("search", "solver", "g")
    rollouts = [Rollout(_episode([1, 2], [3, 4], 1.0), 1.0, [0.0], group, "done") for _ in range(3)]
    stats = trainer.reinforce(rollouts)
    assert stats.dropped_zero_variance == 1 and stats.sequences == 0
    assert all(torch.equal(a, b) for a, b in zip(weights, trainer.model.parameters(), strict=True))


def test_masked_rollouts_are_left_out_of_the_loss_and_of_their_groups_baseline(
    smol_tokenizer: Any, tmp_path: Path
) -> None:
    trainer = _trainer(smol_tokenizer, tmp_path)
    group = ("search", "solver", "g")
    rollouts = [
        Rollout(_episode([1, 2], [3, 4], 1.0), 1.0, [0.0], group, "done"),
        Rollout(_episode([1, 2], [5, 6], 0.0), 0.0, [0.0], group, "overlong", "truncated_scored"),
        Rollout(_episode([1, 2], [7, 8], 0.0), float("nan"), [0.0], group, "overlong", "truncated_masked"),
    ]
    kept, advantages, dropped = trainer.credit(rollouts)
    assert [r.scoring for r in kept] == ["outcome", "truncated_scored"] and dropped == 0
    assert all(np.isfinite(a).all() for a in advantages)
    # a masked rollout does not keep an otherwise flat group alive, nor feed it a NaN
    kept, _, dropped = trainer.credit([rollouts[0], rollouts[2]])
    assert kept == [] and dropped == 1


def test_old_logprobs_are_taken_with_dropout_off_and_mini_batches_mix_roles_and_groups(
    smol_tokenizer: Any, tmp_path: Path
) -> None:
    """With dropout on, old logprobs in train mode were noise: the importance weight to the generator's
    logprobs (taken in eval mode) was far from 1 for the very weights that sampled the tokens. Mini-batches
    were contiguous slices of play order: the first step saw only proposers."""
    config = load_config(None, [f"out={tmp_path / 'run'}", "games=search", "backend=hf", "threads=1",
                                "updates_per_iteration=2", "lr=1e-9", "std_scale=false"])  # fmt: skip
    model = tiny_model(smol_tokenizer, attention_dropout=0.5)  # Llama applies it in train mode only
    trainer = Trainer(config, model=model, tokenizer=smol_tokenizer)
    trainer.model.eval()  # as the generator samples (a model built here starts in train mode)
    rollouts = []
    for r, role in enumerate(("proposer", "solver")):
        for g in range(2):
            group = ("search", role, f"{role}{g}")
            for k, reward in enumerate((1.0, 0.0)):
                ep = _episode([1, 2, 3 + 10 * r, 4 + g], [5 + 3 * k, 6 + 3 * k, 7 + 3 * k] * 4, reward)
                with torch.no_grad():  # the generator's logprobs: the weights that sampled, dropout off
                    ep.logprobs = [0.0] * 4 + action_logprobs(trainer.model, to_sequence(ep)).tolist()
                rollouts.append(Rollout(ep, reward, [0.0], group, "done"))
    trainer.model.train()
    sequences = [to_sequence(r.episode) for r in rollouts[:2]]
    first, again = trainer.old_logprobs(sequences, 1.0), trainer.old_logprobs(sequences, 1.0)
    assert trainer.model.training  # train mode is restored after
    assert all(torch.equal(first[id(s)], again[id(s)]) for s in sequences)  # no dropout noise
    trainer.model.eval()

    steps: list[list[str]] = []
    step = trainer._step

    def spy(chunk: list[Any], score: Any) -> Any:
        steps.append(sorted({r.role for r in rollouts for s in chunk if s.input_ids.tolist() == r.episode.token_ids}))
        return step(chunk, score)

    trainer._step = spy  # type: ignore[method-assign]
    stats = trainer.reinforce(rollouts)
    assert stats.extra is not None and stats.extra["tis_mean"] == pytest.approx(1.0, abs=1e-3)
    assert steps == [["proposer", "solver"], ["proposer", "solver"]]


def test_a_checkpoint_restores_weights_optimizer_rng_replay_and_counters(smol_tokenizer: Any, tmp_path: Path) -> None:
    trainer = _trainer(smol_tokenizer, tmp_path, "lr=0.01")
    group = ("search", "solver", "g")
    trainer.reinforce(
        [Rollout(_episode([1, 2], [3, 4], 1.0), 1.0, [0.0], group, "done"),
         Rollout(_episode([1, 2], [5, 6], 0.0), 0.0, [0.0], group, "done")]
    )  # fmt: skip
    trainer.iteration, trainer.warm_started = 3, True
    trainer.replay["search"].add([{"id": "q1", "question": "?", "answers": ["a"]}])
    folder = save_checkpoint(trainer)
    assert folder is not None and latest_checkpoint(trainer.out) == folder
    expected_draw = trainer.rng.integers(0, 2**31)

    fresh = _trainer(smol_tokenizer, tmp_path, seed=1)
    load_checkpoint(fresh, folder)
    assert all(torch.equal(a, b) for a, b in zip(trainer.model.parameters(), fresh.model.parameters(), strict=True))
    assert fresh.iteration == 3 and fresh.warm_started and fresh.replay["search"].tasks[0]["id"] == "q1"
    assert fresh.rng.integers(0, 2**31) == expected_draw
    state = fresh.optimizer.state_dict()["state"]
    original = trainer.optimizer.state_dict()["state"]
    assert state and all(torch.equal(state[k]["exp_avg"], original[k]["exp_avg"]) for k in state)
    assert fresh.generator.weights_version >= 1  # its generator samples from the loaded weights


def test_checkpoint_rotation_keeps_the_newest_and_the_warm_start(smol_tokenizer: Any, tmp_path: Path) -> None:
    trainer = _trainer(smol_tokenizer, tmp_path)
    for iteration in range(5):
        trainer.iteration = iteration
        save_checkpoint(trainer, keep=2)
    names = sorted(p.name for p in (trainer.out / "checkpoints").glob("iter-*"))
    assert names == ["iter-000000", "iter-000003", "iter-000004"]
    assert latest_checkpoint(trainer.out) == trainer.out / "checkpoints" / "iter-000004"


def test_config_presets_overrides_and_errors() -> None:
    assert {"cpu-demo", "cpu-learn", "gpu-1", "gpu-8"} <= set(presets())
    config = load_config("cpu-learn", ["iterations=7", "lam=0.25", "games=search", "threads=none", "bf16=false"])
    assert (config.iterations, config.lam, config.games, config.threads) == (7, 0.25, ["search"], None)
    assert load_config(None, []) == TrainConfig()
    for bad, message in [
        (["iteratons=3"], "unknown config key 'iteratons'.*did you mean iterations"),
        (["iterations=many"], "takes an int"),
        (["games=chess"], "games must be some of search, swe"),
        (["swe_tasks=all"], "must be one of policy, procedural, mix"),
        (["search_teacher=oracle"], "'search_teacher' must be one of definition-match, definition-search"),
        (["iterations"], "is not key=value"),
    ]:
        with pytest.raises(SparringError, match=message):
            load_config("cpu-demo", bad)
    with pytest.raises(SparringError, match="no preset 'nope'"):
        load_config("nope")


def test_every_numeric_config_key_has_a_range_and_a_value_outside_it_is_one_sentence() -> None:
    from sparring.config_cli import numeric_fields
    from sparring.training.config import RANGES

    assert numeric_fields(TrainConfig) == set(RANGES), "a numeric config key without a range, or a range for no key"
    for name in presets():
        load_config(name)  # every preset is inside the ranges
    for bad, message in [
        ("warm_start_episodes=-3", "'warm_start_episodes' must not be negative, not -3"),
        ("warm_start_proposer_episodes=-1", "'warm_start_proposer_episodes' must not be negative"),
        ("search_group=0", "'search_group' must be at least 1, not 0"),
        ("lr=0", "'lr' must be above 0, not 0.0"),
        ("lr=nan", "'lr' must be above 0, not nan"),
        ("temperature=-1", r"'temperature' must not be negative \(0: greedy\)"),
        ("gamma=1.5", "'gamma' must be between 0 and 1, not 1.5"),
        ("clip_low=1", "'clip_low' must be between 0 and 1, 1 excluded, not 1.0"),
        ("top_p=0", "'top_p' must be between 0 and 1, 0 excluded, not 0.0"),
        ("top_p=1.2", "'top_p' must be between 0 and 1, 0 excluded, not 1.2"),
        ("threads=0", "'threads' must be at least 1"),
        ("swe_alpha=-0.1", "'swe_alpha' must not be negative"),
        ("swe_solver_unsolved=-2", "'swe_solver_unsolved' must be between -1 and 1, not -2.0"),
        ("search_solver_wrong=1", "'search_solver_correct' \\(1.0\\) must be above 'search_solver_wrong' \\(1.0\\)"),
    ]:
        with pytest.raises(SparringError, match=message):
            load_config("cpu-learn", [bad])
    assert load_config("cpu-learn", ["warm_start_episodes=0", "temperature=0", "threads=none"]).temperature == 0.0


def test_end_reasons_and_the_replay_buffer() -> None:
    ep = _episode([1], [2])
    assert end_reason(ep) == "done"
    ep.terminated, ep.truncated, ep.outcome = False, True, {"status": "context_limit"}
    assert end_reason(ep) == "overlong"
    ep.outcome = {"status": "time_limit"}
    assert end_reason(ep) == "timeout"
    ep.outcome = {"status": "turn_limit"}  # the runner's own turn bound: no outcome reward
    assert end_reason(ep) == "turn_cap"
    ep.outcome = {"status": "turn_limit", "reward": -1.0}  # the env's turn limit, scored by the env
    assert end_reason(ep) == "turn_limit"
    ep.outcome, ep.error = {}, "RuntimeError: container died"
    assert end_reason(ep) == "env_error"
    replay = ReplayBuffer(clear_every=2)
    replay.add([{"id": str(i)} for i in range(5)])
    picks = replay.sample(3, np.random.default_rng(0))
    assert len({p["id"] for p in picks}) == 3
    replay.tick(0)
    assert len(replay.tasks) == 5
    replay.tick(1)
    assert replay.tasks == []


def test_a_search_run_without_a_current_corpus_stops_before_loading_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sparring.training.run import run_training

    monkeypatch.setenv("SPARRING_HOME", str(tmp_path / "home"))  # no corpus built there
    config = load_config(None, ["games=search", f"out={tmp_path / 'run'}"])
    with pytest.raises(SparringError, match="sparring corpus build"):
        run_training(config)
    assert not (tmp_path / "run").exists()


def test_the_time_budget_counts_the_longest_iteration_and_refuses_a_negative_budget(
    smol_tokenizer: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sparring.training.run import out_of_time

    trainer = _trainer(smol_tokenizer, tmp_path, "time_limit_minutes=2")
    monkeypatch.setattr(trainer, "elapsed", lambda: 100.0)
    trainer.longest_iteration = 10.0
    assert not out_of_time(trainer)  # 100 s + 10 s fits in 120 s
    trainer.longest_iteration = 30.0
    assert out_of_time(trainer)  # 100 s + 30 s does not
    trainer.config.time_limit_minutes = 0.0
    assert not out_of_time(trainer)  # no budget
    with pytest.raises(SparringError, match="time_limit_minutes"):
        load_config(None, ["time_limit_minutes=-1"])


def test_an_iterations_speeds_add_up_every_game_and_leave_out_an_update_that_trained_nothing() -> None:
    from sparring.training.run import iteration_speeds

    # search: 300 tokens in 10 s of play, 60 trained in 6 s; swe: 100 tokens in 30 s, 40 trained in 4 s
    assert iteration_speeds(generated=400, play_seconds=40, trained=100, update_seconds=10) == {
        "speed/generate_tokens_per_s": 10.0,
        "speed/train_tokens_per_s": 10.0,
    }
    assert iteration_speeds(generated=400, play_seconds=40, trained=0, update_seconds=0.5) == {
        "speed/generate_tokens_per_s": 10.0
    }
    assert iteration_speeds(generated=0, play_seconds=0, trained=0, update_seconds=0) == {}


@pytest.mark.slow
def test_a_run_out_of_time_stops_between_iterations_with_a_checkpoint(
    smol_tokenizer: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sparring.training.run import out_of_time, run_training
    from tests.conftest import default_corpus_built, require

    require(default_corpus_built(), "the default corpus")
    trainer = _trainer(
        smol_tokenizer, tmp_path, "warm_start=false", "iterations=6", "checkpoint_every=2", "time_limit_minutes=4",
        "proposals=2", "search_group=2", "drawn_tasks=1", "search_max_turns=2", "max_new_tokens=8", "concurrency=4",
    )  # fmt: skip
    # A clock that reads 100 s per finished iteration: the fourth would start at 300 s, past the 240 s budget.
    monkeypatch.setattr(trainer, "elapsed", lambda: 100.0 * trainer.iteration)
    summary = run_training(trainer.config, trainer=trainer)
    assert summary["iterations"] == 3 and summary["stopped_by_time_limit"] is True
    rows = read_log(tmp_path / "run")
    for row in rows:  # every iteration's own rates, not only the game's prefixed copies
        rate = row["search/generated_tokens"] / row["search/seconds_play"]
        assert row["speed/generate_tokens_per_s"] == pytest.approx(rate)
        trained = row["search/update/tokens"] > 0
        assert ("speed/train_tokens_per_s" in row) == trained, row
    latest = latest_checkpoint(tmp_path / "run")
    assert latest is not None and latest.name == "iter-000003"  # saved at the stop, between checkpoint_every's
    state = torch.load(latest / STATE, weights_only=False)
    assert state["seconds"] == 300.0 and 0 < state["longest_iteration"] < 50

    resumed = _trainer(smol_tokenizer, tmp_path, "iterations=6", "time_limit_minutes=4")
    load_checkpoint(resumed, latest)  # a resumed run remembers the time spent before it
    assert resumed.elapsed() >= 300.0 and resumed.longest_iteration == state["longest_iteration"]
    assert out_of_time(resumed)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_self_play_samples_with_the_configured_nucleus(smol_tokenizer: Any, corpus: Any, tmp_path: Path) -> None:
    """A near-uniform tiny model's attempts at one task differ; with a vanishing nucleus each is the argmax."""
    firsts = {}
    for top_p in (1.0, 1e-6):
        settings = ["proposals=0", "drawn_tasks=1", "search_group=4", "search_max_turns=1", "max_new_tokens=6",
                    "max_top_ups=0", "temperature=1.5", f"top_p={top_p}"]  # fmt: skip
        rollouts, _ = _trainer(smol_tokenizer, tmp_path, *settings).play("search")
        assert len(rollouts) == 4
        firsts[top_p] = {tuple(r.episode.token_ids[r.episode.action_mask.index(1) :]) for r in rollouts}
    assert len(firsts[1.0]) > 1, "four samples of a near-uniform distribution came out the same"
    assert len(firsts[1e-6]) == 1, "top_p did not reach the sampler"
