"""Episode records for training: group, sampling, weights version, format version; old files still load."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from sparring import SparringError
from sparring.agents import (
    SCHEMA_VERSION,
    EpisodeRunner,
    EpisodeSpec,
    Generation,
    Generator,
    ReplayAgent,
    RunnerConfig,
    SamplingParams,
    episodes_to_dataset,
    read_jsonl,
    write_jsonl,
)
from tests.toy_env import SumEnv

#: A line as format 1 wrote it (before group, sampling, weights and format versions were recorded).
FORMAT_1_LINE = json.dumps(
    {
        "env_id": "SumEnv",
        "role": "solver",
        "domain": "toy",
        "task_id": "sum-8-3-1",
        "task": {"id": "sum-8-3-1", "numbers": [8, 3, 1]},
        "prompt": "There are 3 hidden numbers.",
        "turns": [
            {
                "action": "<answer>12</answer>",
                "observation": "",
                "reward": 1.0,
                "tool": None,
                "error": None,
                "seconds": 0.01,
            }
        ],
        "reward": 1.0,
        "outcome": {"correct": True, "target": 12},
        "terminated": True,
        "truncated": False,
        "error": None,
        "seed": 3,
        "token_ids": [1, 2, 3],
        "token_turn": [-1, 0, 0],
        "action_mask": [False, True, True],
        "logprobs": [0.0, -0.5, -0.25],
        "timings": {"wall": 0.2},
    }
)


def test_a_format_1_file_loads_with_the_new_fields_unknown(tmp_path):
    path = tmp_path / "old.jsonl"
    path.write_text(FORMAT_1_LINE + "\n")
    (episode,) = read_jsonl(path)
    assert episode.schema_version == 1 and SCHEMA_VERSION == 2
    assert episode.group_id is None and episode.sampling == {} and episode.weights_version is None
    assert episode.reward == 1.0 and episode.turns[0].action == "<answer>12</answer>" and episode.logprobs[1] == -0.5
    write_jsonl([episode], path)  # written back, it says which format its content came from
    assert read_jsonl(path)[0] == episode


def test_a_newer_format_is_refused_in_one_sentence(tmp_path):
    path = tmp_path / "future.jsonl"
    path.write_text(json.dumps(json.loads(FORMAT_1_LINE) | {"schema_version": SCHEMA_VERSION + 1}) + "\n")
    with pytest.raises(SparringError, match=r"line 1 .* newer than this Sparring reads"):
        read_jsonl(path)


def test_runner_records_group_ids_and_scripted_episodes_sample_nothing(tmp_path):
    specs = [EpisodeSpec(lambda: SumEnv(), seed=1, group_id="task-1") for _ in range(2)]
    specs.append(EpisodeSpec(lambda: SumEnv(), seed=2))
    runner = EpisodeRunner(lambda spec: ReplayAgent(["<answer>0</answer>"]), RunnerConfig(progress=False))
    episodes = runner.run(specs)
    assert [ep.group_id for ep in episodes] == ["task-1", "task-1", None]
    assert all(ep.sampling == {} and ep.weights_version is None for ep in episodes)
    assert all(ep.schema_version == SCHEMA_VERSION for ep in episodes)
    path = write_jsonl(episodes, tmp_path / "eps.jsonl")
    assert read_jsonl(path) == episodes
    rows = episodes_to_dataset(episodes)
    assert rows[0]["group_id"] == "task-1" and json.loads(rows[0]["sampling"]) == {}


class PeekingPolicy:
    """A token :class:`Generator` without a stream that always peeks, and whose weights change after
    every call (as if a trainer updated them between rounds)."""

    def __init__(self, tokenizer: Any):
        """Use the real tokenizer, so the runner's chat template and token buffers are the real ones."""
        self.tokenizer = tokenizer
        self.name = "peeking"
        self.weights_version = 5

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Generation]:
        """The same action for every prompt; the weights move on after the round."""
        text = "<peek>0</peek>"
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        self.update_weights()
        return [Generation(list(ids), [-0.1] * len(ids), text, "stop") for _ in prompts]

    def update_weights(self, state_dict: Mapping[str, Any] | None = None) -> int:
        """Count an update."""
        self.weights_version += 1
        return self.weights_version


@pytest.mark.model
def test_runner_records_sampling_and_the_oldest_weights_of_an_episode(tokenizer):
    policy = PeekingPolicy(tokenizer)
    assert isinstance(policy, Generator)
    sampling = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=16, seed=11)
    config = RunnerConfig(concurrency=1, sampling=sampling, progress=False)
    specs = [EpisodeSpec(lambda: SumEnv(max_turns=3), seed=s, group_id="g") for s in range(2)]
    first, second = EpisodeRunner(policy, config).run(specs)
    assert len(first.turns) == len(second.turns) == 3  # three rounds each, one after the other
    assert (first.weights_version, second.weights_version, policy.weights_version) == (5, 8, 11)
    assert first.sampling["temperature"] == 0.7 and first.sampling["top_p"] == 0.9
    assert first.sampling["max_new_tokens"] == 16 and first.sampling["seed"] == 11
    assert "</peek>" in first.sampling["stop"]  # the env's tools' closing tags, as the turns used them


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_streamed_episodes_record_the_generator_weights_version(hf_generator):
    # what is recorded does not depend on what the turns say: a few tokens each keep the decode short
    sampling = SamplingParams(temperature=0.0, max_new_tokens=4, seed=3)
    config = RunnerConfig(concurrency=2, sampling=sampling, progress=False)
    specs = [EpisodeSpec(lambda: SumEnv(max_turns=2), seed=s, group_id=f"task-{s}") for s in range(2)]
    episodes = EpisodeRunner(hf_generator, config).run(specs)
    assert [ep.group_id for ep in episodes] == ["task-0", "task-1"]
    assert all(ep.weights_version == hf_generator.weights_version for ep in episodes)
    assert all(ep.sampling["seed"] == 3 and ep.sampling["temperature"] == 0.0 for ep in episodes)
