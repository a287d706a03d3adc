"""The game's bookkeeping on real search envs with scripted players: solve rates, masked proposals,
runner truncations scored as the env's turn limit, and reward settings from the training config."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from sparring.agents import ReplayAgent
from sparring.agents.demonstrators import DefinitionProposerAgent, DefinitionSearchAgent
from sparring.agents.runner import EpisodeSpec
from sparring.envs.search.rewards import SearchRewards
from sparring.envs.swe.rewards import SWERewards
from sparring.training.config import TrainConfig, config_help, load_config, reward_settings
from sparring.training.game import GAMES, ReplayBuffer, play_iteration
from sparring.training.outcomes import MASKED_DROPPED_GROUP, TRUNCATED_SCORED, end_reason, truncation_score

BASE = ["games=search", "proposals=3", "search_group=2", "drawn_tasks=0", "search_max_turns=3"]


class CrashingAgent:
    """A solver whose episode ends in an error of the agent's side (not a wrong answer)."""

    name = "crash"

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        """Nothing to set up."""

    def act(self, observation: str, info: dict[str, Any]) -> str:
        """Fails, as an episode a question broke would."""
        raise RuntimeError("the question broke the episode")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_proposal_whose_solver_group_crashed_gets_no_reward_and_is_counted(corpus: Any) -> None:
    # Errored attempts counted as unsolved: a group of one crash and one wrong answer had a solve rate of
    # 0, and its proposer earned 1 - 0 = 1, the highest reward, for a question that broke its solvers.
    lock, attempts = threading.Lock(), []

    def agents(spec: EpisodeSpec) -> Any:
        if "Propose" in spec.env_id:
            return DefinitionProposerAgent()
        with lock:
            attempts.append(spec.group_id)
            first = attempts.count(spec.group_id) == 1
        return CrashingAgent() if first else ReplayAgent(["<answer>not it</answer>"])

    config = load_config(None, BASE)
    result = play_iteration(GAMES["search"], agents, config, 0, np.random.default_rng(3), ReplayBuffer())

    proposers = [r for r in result.rollouts if r.role == "proposer"]
    valid = [r for r in proposers if r.episode.outcome.get("valid")]
    assert valid, "the scripted proposer writes valid questions: the checks below have work"
    assert all(r.masked and r.scoring == MASKED_DROPPED_GROUP and r.reward != r.reward for r in valid)
    assert all(not r.masked and r.reward == 0.0 for r in proposers if r not in valid)
    assert result.stats["proposer/masked_dropped_group"] == len(valid)
    assert result.stats["solver/dropped_groups"] == len(valid) and "solver/solve_rate" not in result.stats
    assert not [r for r in result.rollouts if r.role == "solver"]  # a partial group is never trained on


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("overlong", ["score", "mask"])
def test_a_runner_truncation_scores_what_the_envs_turn_limit_gives_its_role(corpus: Any, overlong: str) -> None:
    # A runner truncation fell back to the sum of turn rewards (0): where a failure scores below 0 (SWE's
    # -1, or these settings' -0.5), running out of time or context paid better than trying and failing.
    rewards = ["search_solver_wrong=-0.5", "search_proposer_invalid=-0.25"]
    config = load_config(None, [*BASE, "drawn_tasks=1", f"overlong={overlong}", "episode_seconds=1e-6", *rewards])

    def agents(spec: EpisodeSpec) -> Any:
        return DefinitionProposerAgent() if "Propose" in spec.env_id else DefinitionSearchAgent()

    result = play_iteration(GAMES["search"], agents, config, 0, np.random.default_rng(3), ReplayBuffer())
    assert {r.reason for r in result.rollouts} == {"timeout"}
    solvers = [r for r in result.rollouts if r.role == "solver"]
    proposers = [r for r in result.rollouts if r.role == "proposer"]
    assert len(solvers) == 2 and len(proposers) == 3
    if overlong == "score":
        assert [r.reward for r in solvers] == [-0.5, -0.5] and {r.scoring for r in solvers} == {TRUNCATED_SCORED}
        assert [r.reward for r in proposers] == [-0.25] * 3 and not any(r.masked for r in result.rollouts)
        assert result.stats["solver/truncated_scored"] == 2 and result.stats["proposer/truncated_scored"] == 3
    else:
        assert all(r.masked and r.reward != r.reward for r in result.rollouts)
        assert result.stats["solver/truncated_masked"] == 2 and result.stats["solver/truncated_scored"] == 0

    # ... which is exactly what the env's own turn limit gives, with the same settings
    solver = gym.make("sparring/SearchAnswer-v0", max_turns=1, rewards=reward_settings(config, "search"))
    solver.reset(seed=0)
    _, reward, _, truncated, info = solver.step("<search>anything</search>")
    assert truncated and reward == info["outcome"]["reward"] == -0.5
    ended = dataclasses.replace(solvers[0].episode, outcome=info["outcome"], truncated=True)
    assert end_reason(ended) == "turn_limit"


def test_the_reward_settings_are_config_keys_with_help_and_the_envs_defaults() -> None:
    helps = config_help()
    for game, cls in (("search", SearchRewards), ("swe", SWERewards)):
        assert reward_settings(TrainConfig(), game) == cls()  # the defaults are the envs' own
        for item in dataclasses.fields(cls):
            assert helps[f"{game}_{item.name}"], f"{game}_{item.name} has no help line"
    config = load_config(None, ["swe_alpha=0.5", "swe_injector_invalid=-0.5", "search_proposer_invalid=-0.1"])
    swe = reward_settings(config, "swe")
    assert swe.proposer(True, 0.5) == pytest.approx(0.25) and swe.proposer(True, 1.0) == -0.5
    assert swe.proposer(False, None) == -0.5
    assert reward_settings(config, "search").proposer(False, None) == -0.1
    # a runner truncation of each role gets its env's turn-limit reward: -1 for an unfinished SWE repair
    assert truncation_score("solver", SWERewards(), "score") == (-1.0, TRUNCATED_SCORED)
    assert truncation_score("proposer", swe, "score") == (-0.5, TRUNCATED_SCORED)
    assert truncation_score("solver", SearchRewards(), "score") == (0.0, TRUNCATED_SCORED)
    reward, how = truncation_score("solver", SWERewards(), "mask")
    assert reward != reward and how == "truncated_masked"
