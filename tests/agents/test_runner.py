"""The episode runner: concurrency, isolation of failing envs, limits, scripted agents, export."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from sparring import SparringError
from sparring.agents import (
    EpisodeRunner,
    EpisodeSpec,
    RandomToolAgent,
    ReplayAgent,
    RunnerConfig,
    SamplingParams,
    episodes_to_dataset,
    read_jsonl,
    require_token_exact,
    write_jsonl,
)
from tests.agents.conftest import FlakySumEnv, ShownSumEnv
from tests.toy_env import SumEnv


def _solve(numbers_seed: int) -> list[str]:
    """The actions that solve SumEnv's task for this seed (peek everything, answer the sum)."""
    env = SumEnv()
    _, info = env.reset(seed=numbers_seed)
    total = sum(info["task"]["numbers"])
    return [
        "<peek>0</peek>",
        '<tool_call>{"name": "peek", "arguments": {"index": 1}}</tool_call>',
        f"<answer>{total}</answer>",
    ]


def test_replay_agent_solves_and_records_turns():
    specs = [EpisodeSpec(lambda: SumEnv(), seed=s) for s in range(3)]
    episodes = EpisodeRunner(lambda spec: ReplayAgent(_solve(spec.seed)), RunnerConfig(progress=False)).run(specs)
    assert [ep.reward for ep in episodes] == [1.0, 1.0, 1.0]
    assert all(ep.terminated and not ep.truncated and len(ep.turns) == 3 for ep in episodes)
    assert episodes[0].turns[0].observation.startswith("number 0 is 8")
    assert episodes[0].outcome == {"correct": True, "target": 19, "reward": 1.0}
    assert episodes[0].token_ids == []  # scripted episodes carry text only


def test_on_episode_sees_each_episode_as_it_ends():
    """The per-episode hook gets every episode once, by index, before run() returns them all."""
    seen: dict[int, object] = {}
    specs = [EpisodeSpec(lambda: SumEnv(), seed=s) for s in range(4)]
    runner = EpisodeRunner(
        lambda spec: ReplayAgent(_solve(spec.seed)),
        RunnerConfig(concurrency=2, progress=False),
        on_episode=lambda index, episode: seen.setdefault(index, episode),
    )
    episodes = runner.run(specs)
    assert sorted(seen) == [0, 1, 2, 3]
    assert all(seen[i] is episodes[i] for i in range(4))


def test_turns_record_the_tool_each_action_called(corpus):
    from sparring.envs.search.answer_env import SearchAnswerEnv

    task = {"id": "q1", "question": "Which chemical element has the symbol Fe?", "answers": ["iron"]}
    actions = ["<search>element symbol Fe</search>", "I am not sure", "<answer>iron</answer>"]
    spec = EpisodeSpec(lambda: SearchAnswerEnv(), options={"task": task})
    (episode,) = EpisodeRunner(lambda _: ReplayAgent(actions), RunnerConfig(progress=False)).run([spec])
    assert [t.tool for t in episode.turns] == ["search", None, "answer"] and episode.reward == 1.0
    assert episode.turns[1].error and "no tool call" in episode.turns[1].error


def test_env_that_raises_fails_only_its_episode():
    """Seed 1 draws numbers [4, 5, 7]: its env raises on the first peek; the other seven finish."""
    specs = [EpisodeSpec(lambda: FlakySumEnv(crash_on=4), seed=s) for s in range(8)]
    runner = EpisodeRunner(lambda spec: ReplayAgent(_solve(spec.seed)), RunnerConfig(concurrency=4, progress=False))
    episodes = runner.run(specs)
    assert len(episodes) == 8
    failed = [ep for ep in episodes if ep.error]
    assert [ep.seed for ep in failed] == [1, 6]  # seeds 1 and 6 both start with a 4
    assert all("the backing service went away" in ep.error for ep in failed)
    assert all(ep.reward == 1.0 and ep.error is None for ep in episodes if ep.seed not in (1, 6))
    assert runner.stats.failed == 2 and runner.stats.episodes == 8


def test_env_that_raises_on_construction_or_reset():
    def broken():
        raise SparringError("no bug store exists")

    episodes = EpisodeRunner(lambda spec: ReplayAgent(_solve(0)), RunnerConfig(progress=False)).run(
        [EpisodeSpec(broken, seed=0, env_id="broken"), EpisodeSpec(lambda: SumEnv(), seed=0)]
    )
    assert episodes[0].error == "SparringError: no bug store exists" and episodes[0].env_id == "broken"
    assert episodes[1].reward == 1.0


def test_an_agent_that_raises_fails_only_its_episode():
    """A scripted agent that raises in reset or in act ends its own episode with the error."""

    class Broken(ReplayAgent):
        def __init__(self, actions, where):
            super().__init__(actions)
            self.where = where

        def reset(self, observation, info):
            if self.where == "reset":
                raise RuntimeError("agent could not start")
            super().reset(observation, info)

        def act(self, observation, info):
            if self.where == "act":
                raise RuntimeError("agent lost its plan")
            return super().act(observation, info)

    where = {0: "reset", 1: "act"}
    runner = EpisodeRunner(
        lambda spec: Broken(_solve(spec.seed), where.get(spec.seed)), RunnerConfig(concurrency=3, progress=False)
    )
    episodes = runner.run([EpisodeSpec(lambda: SumEnv(), seed=s) for s in range(3)])
    assert [ep.error for ep in episodes] == [
        "agent: RuntimeError: agent could not start",
        "agent: RuntimeError: agent lost its plan",
        None,
    ]
    assert episodes[1].turns == [] and episodes[2].reward == 1.0 and runner.stats.failed == 2


def test_turn_and_time_limits():
    loop = ["<peek>0</peek>"]
    (by_turns,) = EpisodeRunner(lambda spec: ReplayAgent(loop), RunnerConfig(max_turns=2, progress=False)).run(
        [EpisodeSpec(lambda: SumEnv(max_turns=10), seed=0)]
    )
    assert len(by_turns.turns) == 2 and by_turns.truncated
    assert by_turns.outcome == {"status": "turn_limit", "reward": 0.0}

    class SlowSumEnv(SumEnv):
        def step(self, action):
            time.sleep(0.2)
            return super().step(action)

    (by_time,) = EpisodeRunner(lambda spec: ReplayAgent(loop), RunnerConfig(max_seconds=0.5, progress=False)).run(
        [EpisodeSpec(lambda: SlowSumEnv(max_turns=50), seed=0)]
    )
    assert by_time.truncated and by_time.outcome == {"status": "time_limit"} and 2 <= len(by_time.turns) < 10


def test_random_tool_agent_plays_any_env():
    episodes = EpisodeRunner(lambda spec: RandomToolAgent(seed=spec.seed), RunnerConfig(progress=False)).run(
        [EpisodeSpec(lambda: SumEnv(max_turns=4), seed=s) for s in range(4)]
    )
    actions = [t.action for ep in episodes for t in ep.turns]
    assert any(a.startswith("<tool_call>") for a in actions) and any(
        a.startswith(("<peek>", "<answer>")) for a in actions
    )
    assert all(ep.terminated or ep.truncated for ep in episodes)


def test_export_jsonl_and_dataset(tmp_path):
    episodes = EpisodeRunner(lambda spec: ReplayAgent(_solve(spec.seed)), RunnerConfig(progress=False)).run(
        [EpisodeSpec(lambda: SumEnv(), seed=s) for s in range(2)]
    )
    path = write_jsonl(episodes, tmp_path / "episodes.jsonl")
    again = read_jsonl(path)
    assert [e.to_dict() for e in again] == [e.to_dict() for e in episodes]
    ds = episodes_to_dataset(episodes)
    assert ds.num_rows == 2 and ds[0]["turn_rewards"] == [0.0, 0.0, 1.0] and ds[1]["task_id"] == "sum-4-5-7"
    (tmp_path / "bad.jsonl").write_text("{not json}\n")
    with pytest.raises(SparringError, match="line 1"):
        read_jsonl(tmp_path / "bad.jsonl")


def test_training_refuses_a_chat_only_policy():
    class HostedChat:
        name = "hosted-model"

        def chat(self, conversations, sampling, tools=None):
            return []

    with pytest.raises(SparringError, match="chat-only"):
        require_token_exact(HostedChat())


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_concurrent_episodes_equal_sequential(hf_generator):
    """8 episodes at once give the same episodes as one by one (same seeds, greedy)."""
    sampling = SamplingParams(temperature=0.0, max_new_tokens=12)
    specs = [EpisodeSpec(lambda: ShownSumEnv(max_turns=2), seed=s) for s in range(8)]
    concurrent = EpisodeRunner(hf_generator, RunnerConfig(concurrency=8, sampling=sampling, progress=False))
    together = concurrent.run(specs)
    alone = EpisodeRunner(hf_generator, RunnerConfig(concurrency=1, sampling=sampling, progress=False)).run(specs)
    assert concurrent.stats.generate_calls < 8 * 2  # generation really was batched
    for a, b in zip(together, alone, strict=True):
        assert a.error is None and b.error is None
        assert a.token_ids == b.token_ids and a.action_mask == b.action_mask and a.token_turn == b.token_turn
        assert [t.action for t in a.turns] == [t.action for t in b.turns]
        assert a.turn_rewards == b.turn_rewards and a.outcome == b.outcome
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-3
    assert len({tuple(ep.token_ids) for ep in together}) == 8  # different tasks, different episodes


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_concurrent_episodes_of_a_real_env_equal_sequential(hf_generator):
    """The same on ``SearchAnswer-v0`` over the default corpus: 4 real search episodes at once."""
    import gymnasium as gym

    import sparring  # noqa: F401  (registers the envs)
    from tests.conftest import default_corpus_built, require

    require(default_corpus_built(), "the default corpus")
    sampling = SamplingParams(temperature=0.0, max_new_tokens=16)
    specs = [
        EpisodeSpec(lambda: gym.make("sparring/SearchAnswer-v0", max_turns=2), seed=s, env_id="SearchAnswer-v0")
        for s in range(4)
    ]
    config = RunnerConfig(concurrency=4, sampling=sampling, progress=False)
    concurrent = EpisodeRunner(hf_generator, config)
    together = concurrent.run(specs)
    alone = EpisodeRunner(hf_generator, replace(config, concurrency=1)).run(specs)
    assert concurrent.stats.generate_calls < 4 * 2
    for a, b in zip(together, alone, strict=True):
        assert a.error is None and b.error is None and a.task_id == b.task_id
        assert a.token_ids == b.token_ids and [t.observation for t in a.turns] == [t.observation for t in b.turns]
        assert a.outcome == b.outcome and a.reward == b.reward
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-3
    assert len({ep.task_id for ep in together}) == 4
    assert all(ep.turns and all(t.observation for t in ep.turns) for ep in together)


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_model_env_that_raises_does_not_stop_others(hf_generator):
    """With the model, an env that raises mid-episode (after the first action) fails alone."""

    class CrashOnSecondStep(SumEnv):
        def step(self, action):
            if self.task and self.task["numbers"][0] == 4 and self._turn >= 1:
                raise RuntimeError("container died")
            return super().step(action)

    sampling = SamplingParams(temperature=0.0, max_new_tokens=8)
    episodes = EpisodeRunner(hf_generator, RunnerConfig(concurrency=4, sampling=sampling, progress=False)).run(
        [EpisodeSpec(lambda: CrashOnSecondStep(max_turns=3), seed=s) for s in range(4)]
    )
    assert [ep.error is not None for ep in episodes] == [False, True, False, False]
    assert "container died" in episodes[1].error and len(episodes[1].turns) == 2
    assert all(len(ep.turns) >= 1 and ep.token_ids for ep in episodes)


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_bench_rollout_reports_same_run_figures():
    """`sparring bench rollout` plays the same episodes both ways and reports consistent figures."""
    from sparring.agents.bench import bench_rollout
    from sparring.agents.model import default_model_present
    from tests.conftest import default_corpus_built, require

    require(default_model_present() and default_corpus_built(), "the default model and corpus")
    result = bench_rollout(episodes=3, concurrency=3, max_turns=2, max_new_tokens=8, backend="hf")
    assert result["same_episodes"] is True and result["turns"] >= 3
    assert 0 < result["longest_episode_tokens"] <= result["generated_tokens"] <= 3 * 2 * 8
    ratio = result["sequential_wall_s"] / result["wall_s"]  # both rounded to 10 ms
    assert result["speedup_vs_sequential"] == pytest.approx(ratio, rel=0.05)
    # No episode takes longer alone than the sequential run, so the ceiling is a speed-up of 1 to 3 (episodes).
    assert 1.0 <= result["speedup_ceiling"] <= 3.0 + 0.01
    assert result["backend"] == "hf" and result["dtype"] == "float32" and result["cpus"] and result["machine"]


def test_a_runner_or_bench_with_nothing_to_run_at_once_is_refused_in_one_sentence():
    """Concurrency 0 would never start an episode (the run would spin forever); 0 episodes has no figures."""
    from sparring.agents.bench import bench_rollout

    with pytest.raises(SparringError, match=r"concurrency must be at least 1 episode at once, not 0\."):
        EpisodeRunner(lambda spec: ReplayAgent([]), RunnerConfig(concurrency=0, progress=False))
    for episodes, concurrency in ((0, 8), (8, 0)):  # refused before any model is loaded
        with pytest.raises(SparringError, match=r"--episodes and --concurrency must each be at least 1"):
            bench_rollout(episodes=episodes, concurrency=concurrency)
