"""Token-exact episodes with the HF backend and the default model."""

from __future__ import annotations

import pytest

from sparring.agents import EpisodeRunner, EpisodeSpec, RunnerConfig, SamplingParams
from tests.agents.conftest import assert_token_exact
from tests.toy_env import SumEnv

pytestmark = [pytest.mark.model, pytest.mark.slow]


@pytest.mark.timeout(600)
def test_three_turn_episode_is_token_exact(hf_generator):
    config = RunnerConfig(
        concurrency=1, max_turns=3, progress=False, sampling=SamplingParams(temperature=0.0, max_new_tokens=20)
    )
    (episode,) = EpisodeRunner(hf_generator, config).run([EpisodeSpec(lambda: SumEnv(max_turns=3), seed=1)])
    assert_token_exact(hf_generator.tokenizer, hf_generator, episode)
    assert episode.role == "solver" and episode.domain == "toy" and episode.task_id == "sum-4-5-7"
    assert set(episode.timings) >= {"reset", "generate", "env", "wall"}


@pytest.mark.timeout(600)
def test_sampled_episode_is_token_exact(hf_generator):
    """With temperature and top-p the logprobs are those of logits / temperature, as the trainer computes.

    Eight sampled tokens a turn: exactness is per token, and three turns still put observations between them.
    """
    sampling = SamplingParams(temperature=0.8, top_p=0.9, max_new_tokens=8, seed=7)
    config = RunnerConfig(concurrency=2, max_turns=3, progress=False, sampling=sampling)
    episodes = EpisodeRunner(hf_generator, config).run(
        [EpisodeSpec(lambda: SumEnv(max_turns=3), seed=s) for s in (2, 3)]
    )
    for episode in episodes:
        if len(episode.turns) < 3:  # the model may answer early; exactness holds for any length
            assert episode.terminated
        first = episode.action_mask.index(True)
        recomputed = hf_generator.logprobs([episode.token_ids], [first], temperature=0.8)[0]
        diffs = [
            abs(recomputed[p - first] - episode.logprobs[p])
            for p in range(first, len(episode.token_ids))
            if episode.action_mask[p]
        ]
        assert diffs and max(diffs) < 1e-3


def test_batched_generation_matches_single(hf_generator):
    """Left padding does not change what a prompt generates (greedy) or its logprobs."""
    tok = hf_generator.tokenizer
    prompts = [tok("The capital of France is", add_special_tokens=False)["input_ids"], tok("1, 2, 3,")["input_ids"]]
    sampling = SamplingParams(temperature=0.0, max_new_tokens=6)
    batched = hf_generator.generate(prompts, sampling)
    for prompt, together in zip(prompts, batched, strict=True):
        (alone,) = hf_generator.generate([prompt], sampling)
        assert alone.token_ids == together.token_ids
        assert max(abs(a - b) for a, b in zip(alone.logprobs, together.logprobs, strict=True)) < 1e-3


def test_stop_strings_end_each_sequence_on_its_own(hf_generator):
    tok = hf_generator.tokenizer
    prompt = tok("Count: 1, 2, 3, 4, 5, 6, 7, 8,", add_special_tokens=False)["input_ids"]
    (free,) = hf_generator.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=8))
    stop = free.text.strip()[:2]
    assert stop
    stopped, unstopped = hf_generator.generate(
        [prompt, tok("Hello", add_special_tokens=False)["input_ids"]],
        SamplingParams(temperature=0.0, max_new_tokens=8, stop=(stop,)),
    )
    assert stopped.finish_reason == "stop" and stop in stopped.text and len(stopped.token_ids) < 8
    assert len(stopped.logprobs) == len(stopped.token_ids)
    assert stop not in unstopped.text or unstopped.finish_reason == "stop"
