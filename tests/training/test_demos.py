"""The warm start's RAG validation demonstrations: the prompt the validator is shown, the seed answer."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest

from sparring.agents.answering import ANSWER_PREFILL, chat_prompt_ids
from sparring.agents.demonstrators import DefinitionProposerAgent
from sparring.agents.runner import EpisodeRunner, EpisodeSpec, RunnerConfig
from sparring.envs.search.validation import PolicyValidator, Proposal
from sparring.training.demos import validator_demonstrations


def _proposals(n: int) -> list[Any]:
    """``n`` proposer episodes of the scripted proposer (grounding validation: no model needed)."""

    def make() -> Any:
        return gym.make("sparring/SearchPropose-v0", max_turns=3)

    runner = EpisodeRunner(lambda spec: DefinitionProposerAgent(), RunnerConfig(progress=False))
    return runner.run([EpisodeSpec(make, seed=seed) for seed in range(n)])


def test_each_grounded_proposal_becomes_the_prompt_the_validator_sees_and_its_seed_answer(
    corpus: Any, smol_tokenizer: Any
) -> None:
    played = _proposals(6)
    reached = [ep for ep in played if "validator_answer" in ep.outcome]
    assert len(reached) >= 3, "the scripted proposer should reach validation on most seeds"
    demos = validator_demonstrations(smol_tokenizer, played)
    assert demos and len(demos) <= len(reached)
    seen: list[str] = []
    validator = PolicyValidator(lambda prompts: seen.extend(prompts) or ["<answer>x</answer>"] * len(prompts))
    for demo in demos:
        source = next(ep for ep in reached if ep.task_id == demo.task_id)
        o = source.outcome
        validator.validate([Proposal(o["question"], o["answer"], o["documents"], o["noise"])])
        assert demo.prompt == seen[-1]  # the very text (documents in the same order) validation shows
        prompt_ids = [t for t, turn in zip(demo.token_ids, demo.token_turn, strict=True) if turn < 0]
        assert prompt_ids == chat_prompt_ids(smol_tokenizer, [{"role": "user", "content": demo.prompt}], ANSWER_PREFILL)
        action = [t for t, a in zip(demo.token_ids, demo.action_mask, strict=True) if a]
        assert smol_tokenizer.decode(action) == f"{o['answer']}</answer>"
        assert demo.role == "validator" and demo.domain == "search"


def test_proposals_without_the_answer_in_their_evidence_or_without_validation_are_left_out(
    corpus: Any, smol_tokenizer: Any
) -> None:
    played = [ep for ep in _proposals(4) if "validator_answer" in ep.outcome]
    assert played
    ungrounded = played[0]
    ungrounded.outcome = dict(ungrounded.outcome, documents=[{"id": "x", "contents": "Nothing\nunrelated text"}])
    unvalidated = played[-1] if len(played) > 1 else None
    if unvalidated is not None:
        unvalidated.outcome = {k: v for k, v in unvalidated.outcome.items() if k != "validator_answer"}
    demos = validator_demonstrations(smol_tokenizer, played)
    ids = {d.task_id for d in demos}
    assert ungrounded.task_id not in ids
    if unvalidated is not None:
        assert unvalidated.task_id not in ids


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_each_swe_role_plays_warm_start_swe_episodes_or_a_quarter_of_the_search_games(smol_tokenizer: Any) -> None:
    import types

    import numpy as np

    from sparring.training.config import load_config
    from sparring.training.demos import demonstrations

    policy = types.SimpleNamespace(tokenizer=smol_tokenizer)
    for extra, count in ((["warm_start_swe_episodes=1"], 1), ([], 2)):
        config = load_config(None, ["games=swe", "warm_start_episodes=8", "swe_max_turns=3", *extra])
        _, stats = demonstrations(config, policy, np.random.default_rng(0))
        assert stats.played["swe/solver"] == count
        assert stats.played.get("swe/proposer", count) == count  # no proposer demonstration without a stored bug
