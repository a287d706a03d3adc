"""What a run folder lets a user inspect: sampled episodes, the saved summary, held-out curves, clear names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sparring import SparringError
from sparring.agents.chat import append_tokens
from sparring.envs.core import Episode, Turn
from sparring.training.config import load_config
from sparring.training.game import Rollout
from sparring.training.metrics import MetricsLog, plot, read_log, write_summary
from sparring.training.samples import EPISODES_FILE, EpisodeSampler
from sparring.training.trainer import Trainer
from tests.training.conftest import tiny_model

#: Agent output a sample must survive: a lone surrogate, a NUL, a code fence, HTML, a line of spaces.
HOSTILE = "ans\udcffwer\x00 ```\n</pre><script>x</script>\n    \n```"


def _trainer(tokenizer: Any, tmp_path: Path, *overrides: str) -> Trainer:
    config = load_config(None, [f"out={tmp_path / 'run'}", "games=search", "backend=hf", "threads=1", *overrides])
    return Trainer(config, model=tiny_model(tokenizer), tokenizer=tokenizer)


def _rollout(tokenizer: Any, role: str, group: str, reward: float, action: str) -> Rollout:
    """A two-turn episode whose second turn is ``action``: tokens as the runner records them."""
    ep = Episode(env_id="toy", role=role, domain="search", task_id=group, task={}, prompt="Find the word.")
    append_tokens(ep, tokenizer.encode("Find the word."), -1, action=False)
    for t, text in enumerate(["search: x", action]):
        ids = tokenizer.encode(text.encode("utf-8", "replace").decode("utf-8"))
        append_tokens(ep, ids, t, action=True, logprobs=[-1.0] * len(ids))
        append_tokens(ep, tokenizer.encode(" result "), -1, action=False)
        ep.turns.append(Turn(action=text, observation=f"result {t}", reward=0.25 if t == 0 else reward))
    ep.terminated = True
    ep.outcome = {"reward": reward, "answer": action}
    return Rollout(ep, reward, [0.25, 0.0], ("search", role, group), "done")


def _tb_texts(folder: Path) -> dict[str, list[tuple[int, str]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"tensors": 0})
    events.Reload()
    tags = [tag for tag in events.Tags()["tensors"] if tag.startswith("episodes/")]
    texts = {tag: [(e.step, e.tensor_proto.string_val[0].decode()) for e in events.Tensors(tag)] for tag in tags}
    return {tag.removesuffix("/text_summary"): entries for tag, entries in texts.items()}


def test_sampled_episodes_carry_the_models_text_rewards_and_trained_advantages(
    smol_tokenizer: Any, tmp_path: Path
) -> None:
    """Two per (domain, role): the decoded buffer, each turn's A^O + λ·A^T, valid UTF-8 whatever the agent wrote."""
    trainer = _trainer(smol_tokenizer, tmp_path, "std_scale=false", "lam=0.5")
    rollouts = [_rollout(smol_tokenizer, "solver", "q1", r, a) for r, a in [(1.0, "yes"), (0.0, "no"), (0.0, "x")]]
    rollouts += [_rollout(smol_tokenizer, "proposer", "p", 0.5, HOSTILE)]
    rollouts[-1].turn_rewards = [0.0, 0.0]  # a group of one with no turn signal: nothing to train on
    metrics = MetricsLog(trainer.out)
    sampler = EpisodeSampler(trainer.out, 2, seed=0, metrics=metrics, tokenizer=smol_tokenizer)
    assert sampler.add(rollouts, 1, trainer) == 3  # two of the solvers, the only proposer
    assert sampler.pick(rollouts, 1) == sampler.pick(rollouts, 1)  # a replayed iteration samples the same ones

    lines = (trainer.out / EPISODES_FILE).read_bytes().decode("utf-8").splitlines()  # strict: valid UTF-8
    records = [json.loads(line) for line in lines]
    assert {(r["domain"], r["role"]) for r in records} == {("search", "solver"), ("search", "proposer")}
    for r in records:
        assert {"iteration", "text", "prompt", "turns", "reward", "turn_rewards", "turn_advantages", "outcome",
                "end_reason", "trained", "group"} <= set(r)  # fmt: skip
        assert r["iteration"] == 1 and r["end_reason"] == "done" and r["prompt"] == "Find the word."
        played = next(x for x in rollouts if x.episode.outcome["answer"][:2] == r["outcome"]["answer"][:2])
        assert r["text"] == smol_tokenizer.decode(played.episode.token_ids)  # the buffer as the model saw it
        assert [t["observation"] for t in r["turns"]] == ["result 0", "result 1"]
    proposer = next(r for r in records if r["role"] == "proposer")
    assert proposer["trained"] is False and proposer["turn_advantages"] is None  # a group of one: dropped
    solvers = [r for r in records if r["role"] == "solver"]
    # group rewards (1, 0, 0): A^O = R - 1/3; turn rewards (0.25, 0): returns-to-go (0.25, 0), pooled mean 0.125
    for r in solvers:
        assert r["trained"] is True
        a_out = r["reward"] - 1 / 3
        assert r["turn_advantages"] == pytest.approx([a_out + 0.5 * 0.125, a_out - 0.5 * 0.125])
        assert [t["advantage"] for t in r["turns"]] == pytest.approx(r["turn_advantages"])
    # the proposer's lone surrogate is a '?' now, the rest kept as the agent wrote it
    assert proposer["turns"][1]["action"] == "ans?wer\x00 ```\n</pre><script>x</script>\n    \n```"

    assert sampler.add(rollouts, 2, trainer) == 3
    sampler.resume(1)  # a run resumed from iteration 1's checkpoint plays iteration 2 again
    assert (trainer.out / EPISODES_FILE).read_text(encoding="utf-8").splitlines() == lines

    metrics.close()
    texts = _tb_texts(trainer.out / "tb")
    assert set(texts) == {"episodes/search/solver", "episodes/search/proposer"}
    step, text = texts["episodes/search/solver"][0]
    assert step == 1 and "**1. task q1: reward" in text and "**2. task q1: reward" in text
    assert all(line.startswith("    ") for line in text.split("**\n\n")[1].split("\n\n**")[0].splitlines())


def test_the_summary_is_saved_with_wall_clock_and_held_out_rows_and_the_plot_draws_a_line_per_game(
    tmp_path: Path,
) -> None:
    rows = [
        {"step": 0, "eval/search/em": 0.1, "eval/search/em_ci_low": 0.0, "eval/search/em_ci_high": 0.3},
        {"step": 1, "search/update/loss": 0.5, "swe/update/loss": 0.7, "search/solver/reward_mean": 0.2},
        {"step": 2, "search/update/loss": 0.4, "swe/update/loss": 0.6, "eval/search/em": 0.4,
         "eval/search/em_ci_low": 0.2, "eval/search/em_ci_high": 0.6},
    ]  # fmt: skip
    md, js = write_summary(tmp_path, rows, {"wall_clock": "0:01:05", "wall_clock_seconds": 65.0})
    data = json.loads(js.read_text())
    assert data["wall_clock_seconds"] == 65.0
    losses = {m["metric"]: (m["first"], m["last"]) for m in data["metrics"]}
    assert losses["search/update/loss"] == (0.5, 0.4) and losses["swe/update/loss"] == (0.7, 0.6)
    assert [e["step"] for e in data["evaluations"]] == [0, 2]
    text = md.read_text()
    assert "- wall_clock: 0:01:05" in text and "| swe/update/loss | 0.7 | 0.6 | 0.65 |" in text
    assert "| 2 | 0.4 [0.2, 0.6] |" in text
    assert plot(rows, tmp_path / "summary.png") == tmp_path / "summary.png"


def test_the_inspection_keys_have_ranges() -> None:
    for bad, message in [
        ("log_episodes=-1", r"'log_episodes' must not be negative \(0: none\)"),
        ("eval_every=-2", r"'eval_every' must not be negative \(0: never\)"),
        ("eval_limit=0", "'eval_limit' must be at least 1"),
        ("eval_games=search,chess", "eval_games must be some of search, swe"),
    ]:
        with pytest.raises(SparringError, match=message):
            load_config(None, [bad])


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_one_iteration_run_leaves_episodes_a_summary_and_a_held_out_curve(
    smol_tokenizer: Any, tmp_path: Path
) -> None:
    from sparring.training.run import run_training
    from tests.conftest import default_corpus_built, require

    require(default_corpus_built(), "the default corpus")
    trainer = _trainer(
        smol_tokenizer, tmp_path, "warm_start=false", "iterations=1", "proposals=2", "search_group=2",
        "drawn_tasks=1", "search_max_turns=2", "max_new_tokens=8", "concurrency=4", "log_episodes=1",
        "eval_every=1", "eval_limit=3",
    )  # fmt: skip
    summary = run_training(trainer.config, trainer=trainer)
    out = tmp_path / "run"
    records = [json.loads(line) for line in (out / EPISODES_FILE).read_text(encoding="utf-8").splitlines()]
    assert sorted(r["role"] for r in records) == ["proposer", "solver"]  # one per (domain, role)
    assert all(r["iteration"] == 1 and r["domain"] == "search" and r["text"] and r["turns"] for r in records)

    rows = read_log(out)
    assert [row["step"] for row in rows] == [0, 1]  # step 0: the baseline evaluation before self-play
    for row in rows:
        assert row["eval/search/instances"] == 3
        assert row["eval/search/em_ci_low"] <= row["eval/search/em"] <= row["eval/search/em_ci_high"]
        assert (out / "evals" / f"search-step-{row['step']:06d}" / "report.md").is_file()
    assert "search/update/loss" in rows[1] and not any(k.startswith("update/") for k in rows[1])

    data = json.loads((out / "summary.json").read_text())
    assert data["iterations"] == 1 and data["wall_clock_seconds"] > 0 and len(data["evaluations"]) == 2
    md = (out / "summary.md").read_text()
    assert "wall_clock:" in md and "## Held-out evaluation" in md and "search/update/loss" in md
    assert summary["summary"] == [str(out / "summary.md"), str(out / "summary.json")]
    assert (out / "summary.png").is_file() and "episodes/search/solver" in _tb_texts(out / "tb")


@pytest.mark.docker
def test_a_held_out_swe_evaluation_without_its_images_stops_before_loading_anything(tmp_path: Path) -> None:
    from sparring.envs.swe.bugs.store import available_repos
    from sparring.training.run import run_training

    if available_repos("heldout"):
        pytest.skip("held-out repository images are built here: the evaluation would run")
    config = load_config(None, ["games=search", "eval_every=2", "eval_games=swe", f"out={tmp_path / 'run'}"])
    with pytest.raises(SparringError, match="no heldout repository image is built; run `sparring build repos"):
        run_training(config)
    assert not (tmp_path / "run").exists()
