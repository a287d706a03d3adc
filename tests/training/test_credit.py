"""Credit assignment against hand-computed numbers (the arithmetic is written next to each case)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sparring.envs.core import Episode, Turn
from sparring.training.credit import (
    group_key,
    outcome_advantages,
    returns_to_go,
    token_advantages,
    turn_advantages,
    zero_variance_groups,
)

SOLVER_Q1 = group_key("search", "solver", "q1")


def test_group_key_always_names_domain_and_role():
    assert group_key("search", "solver", "q1") == ("search", "solver", "q1")
    assert group_key("search", "solver", "q1") != group_key("swe", "solver", "q1")
    assert group_key("search", "solver", "q1") != group_key("search", "proposer", "q1")
    assert group_key("search", "proposer", None) != group_key("swe", "proposer", None)


def test_a_group_of_one_gets_zero():
    assert outcome_advantages([0.7], [SOLVER_Q1]).tolist() == [0.0]
    assert outcome_advantages([0.7], [SOLVER_Q1], std_scale=False).tolist() == [0.0]
    # One episode of one turn: nothing to compare its return with.
    assert turn_advantages([[0.3]], [SOLVER_Q1])[0].tolist() == [0.0]


def test_all_equal_rewards_give_exact_zeros_and_a_zero_variance_group():
    # 0.1 * 3 / 3 != 0.1 in floating point; equal rewards must still give exact zeros.
    for std_scale in (True, False):
        assert outcome_advantages([0.1, 0.1, 0.1], [SOLVER_Q1] * 3, std_scale=std_scale).tolist() == [0.0] * 3
    assert zero_variance_groups([0.1, 0.1, 0.1], [SOLVER_Q1] * 3) == {SOLVER_Q1}


def test_std_scaling_on_and_off_with_population_std():
    # R = [1, 0, 0, 0]: mean 0.25, centred [0.75, -0.25, -0.25, -0.25].
    # population var = (0.5625 + 3 * 0.0625) / 4 = 0.1875, std = sqrt(0.1875) = sqrt(3) / 4.
    # scaled: 0.75 / (sqrt(3)/4) = sqrt(3); -0.25 / (sqrt(3)/4) = -1/sqrt(3).
    # (The sample std, ddof=1, would be 0.5 and give 1.5 instead.)
    rewards = [1.0, 0.0, 0.0, 0.0]
    scaled = outcome_advantages(rewards, [SOLVER_Q1] * 4, eps=0.0)
    s3 = math.sqrt(3)
    np.testing.assert_allclose(scaled, [s3, -1 / s3, -1 / s3, -1 / s3], rtol=1e-12)
    # eps = 1e-6 moves it by about eps / std: 1.7320508 -> 1.7320468.
    np.testing.assert_allclose(outcome_advantages(rewards, [SOLVER_Q1] * 4), [1.7320468, -0.5773489] + [-0.5773489] * 2)
    assert outcome_advantages(rewards, [SOLVER_Q1] * 4, std_scale=False).tolist() == [0.75, -0.25, -0.25, -0.25]


def test_mixed_roles_and_domains_in_one_batch_keep_separate_baselines():
    search_q1 = group_key("search", "solver", "q1")
    swe_q1 = group_key("swe", "solver", "q1")  # same task name, other domain
    proposers = group_key("search", "proposer", None)
    rewards = [1.0, 0.2, 1.0, 0.0, 0.6, 1.0]
    keys = [search_q1, proposers, swe_q1, search_q1, proposers, swe_q1]
    # search/solver/q1: [1, 0] -> mean 0.5, std 0.5 -> [1, -1]
    # search/proposer: [0.2, 0.6] -> mean 0.4, std 0.2 -> [-1, 1]
    # swe/solver/q1: [1, 1] -> zeros (pooled with search/q1 it would not be)
    np.testing.assert_allclose(outcome_advantages(rewards, keys, eps=0.0), [1, -1, 0, -1, 1, 0], atol=1e-12)
    np.testing.assert_allclose(
        outcome_advantages(rewards, keys, std_scale=False), [0.5, -0.2, 0, -0.5, 0.2, 0], atol=1e-12
    )
    assert zero_variance_groups(rewards, keys) == {swe_q1}
    # Turns follow the same groups: the swe episodes' returns [1] and [1] are equal -> zeros.
    turns = turn_advantages([[r] for r in rewards], keys, eps=0.0)
    np.testing.assert_allclose(np.concatenate(turns), [1, -1, 0, -1, 1, 0], atol=1e-12)


def test_turn_advantages_pool_episodes_of_different_lengths():
    # gamma 1: episode a r = [0, 1] -> G = [1, 1]; episode b r = [0, 0, 0] -> G = [0, 0, 0].
    # pooled [1, 1, 0, 0, 0]: mean 0.4, centred [0.6, 0.6, -0.4, -0.4, -0.4],
    # var = (2 * 0.36 + 3 * 0.16) / 5 = 0.24; 0.6 / sqrt(0.24) = sqrt(1.5), -0.4 / sqrt(0.24) = -sqrt(2/3).
    a, b = turn_advantages([[0.0, 1.0], [0.0, 0.0, 0.0]], [SOLVER_Q1] * 2, eps=0.0)
    np.testing.assert_allclose(a, [math.sqrt(1.5)] * 2, rtol=1e-12)
    np.testing.assert_allclose(b, [-math.sqrt(2 / 3)] * 3, rtol=1e-12)
    a, b = turn_advantages([[0.0, 1.0], [0.0, 0.0, 0.0]], [SOLVER_Q1] * 2, std_scale=False)
    np.testing.assert_allclose(a, [0.6, 0.6], atol=1e-12)
    np.testing.assert_allclose(b, [-0.4, -0.4, -0.4], atol=1e-12)


def test_discounted_returns_with_gamma_below_one():
    # r = [1, 0, 2], gamma 0.5: G_2 = 2, G_1 = 0 + 0.5 * 2 = 1, G_0 = 1 + 0.5 * 1 = 1.5.
    assert returns_to_go([1.0, 0.0, 2.0], gamma=0.5).tolist() == [1.5, 1.0, 2.0]
    # normalised over the episode's own turns: mean 1.5, centred [0, -0.5, 0.5], std sqrt(1/6);
    # 0.5 / sqrt(1/6) = sqrt(1.5).
    (adv,) = turn_advantages([[1.0, 0.0, 2.0]], [SOLVER_Q1], gamma=0.5, eps=0.0)
    np.testing.assert_allclose(adv, [0.0, -math.sqrt(1.5), math.sqrt(1.5)], atol=1e-12)


def test_all_zero_turn_rewards_give_zeros():
    out = turn_advantages([[0.0, 0.0], [0.0], []], [SOLVER_Q1] * 3)
    assert [x.tolist() for x in out] == [[0.0, 0.0], [0.0], []]


def test_token_advantages_weight_the_turn_term_by_lambda_on_action_tokens_only():
    # Episode 0: 3 prompt tokens (turn -1), turn 0 = 2 action tokens + 1 observation token, turn 1 = 1 action.
    # Episode 1: 1 prompt token, turn 0 = 1 action token.
    token_turn = [[-1, -1, -1, 0, 0, 0, 1], [-1, 0]]
    action_mask = [[False, False, False, True, True, False, True], [False, True]]
    outcome = np.array([0.5, -1.0])
    turns = [np.array([1.0, -1.0]), np.array([2.0])]
    # lam 0.25: ep 0 turn 0: 0.5 + 0.25 * 1 = 0.75; turn 1: 0.5 - 0.25 = 0.25; ep 1: -1 + 0.25 * 2 = -0.5.
    e0, e1 = token_advantages(token_turn, action_mask, outcome, turns, lam=0.25)
    assert e0.tolist() == [0, 0, 0, 0.75, 0.75, 0, 0.25]
    assert e1.tolist() == [0, -0.5]
    # lam 0: the outcome advantage alone.
    e0, e1 = token_advantages(token_turn, action_mask, outcome, turns, lam=0.0)
    assert e0.tolist() == [0, 0, 0, 0.5, 0.5, 0, 0.5]
    assert e1.tolist() == [0, -1.0]


def test_token_advantages_reject_an_action_token_without_a_turn():
    with pytest.raises(ValueError, match="outside its 1 turns"):
        token_advantages([[-1, 1]], [[False, True]], np.array([0.0]), [np.array([0.0])], lam=1.0)
    with pytest.raises(ValueError, match="token turns"):
        token_advantages([[-1, 0]], [[True]], np.array([0.0]), [np.array([0.0])], lam=1.0)


def test_from_episode_records():
    def episode(reward: float, turn_rewards: list[float], token_turn: list[int], mask: list[bool]) -> Episode:
        turns = [Turn(action="a", observation="o", reward=r) for r in turn_rewards]
        return Episode(
            env_id="x", role="solver", domain="search", task_id="q1", task={}, prompt="p", turns=turns,
            reward=reward, token_ids=list(range(len(token_turn))), token_turn=token_turn, action_mask=mask,
            logprobs=[0.0] * len(token_turn),
        )  # fmt: skip

    eps = [
        episode(1.0, [0.0, 1.0], [-1, 0, 0, 1], [False, True, False, True]),
        episode(0.0, [0.0], [-1, 0], [False, True]),
    ]
    keys = [group_key(e.domain, e.role, e.task_id) for e in eps]
    a_o = outcome_advantages([e.reward for e in eps], keys, eps=0.0)  # [1, -1]
    # G: [1, 1] and [0]; pooled mean 2/3, std sqrt(2)/3 -> [1/sqrt(2), 1/sqrt(2)], [-sqrt(2)].
    a_t = turn_advantages([e.turn_rewards for e in eps], keys, eps=0.0)
    t0, t1 = token_advantages([e.token_turn for e in eps], [e.action_mask for e in eps], a_o, a_t, lam=1.0)
    h = 1 / math.sqrt(2)
    np.testing.assert_allclose(t0, [0, 1 + h, 0, 1 + h], rtol=1e-12)
    np.testing.assert_allclose(t1, [0, -1 - math.sqrt(2)], rtol=1e-12)


def test_one_key_per_episode():
    with pytest.raises(ValueError, match="one key per episode"):
        outcome_advantages([1.0, 0.0], [SOLVER_Q1])
