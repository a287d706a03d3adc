"""The policy loss against hand-computed values on tiny tensors."""

from __future__ import annotations

import math

import pytest
import torch

from sparring.training.loss import LossConfig, policy_loss

CFG = LossConfig()


def t(*rows: list[float]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


def on_policy(logp: torch.Tensor) -> torch.Tensor:
    """Leaf copy of ``logp`` that requires grad (the policy being updated)."""
    return logp.clone().requires_grad_(True)


def test_defaults_are_the_papers():
    assert (CFG.clip_low, CFG.clip_high, CFG.kl_coef, CFG.tis_cap) == (0.2, 0.28, 0.0, 2.0)


def test_ratio_one_gives_minus_the_token_mean_advantage():
    old = t([-1.0, -2.0, -0.5], [-0.3, -0.7, -0.9])
    adv = t([1.0, -2.0, 3.0], [0.5, 7.0, 7.0])
    mask = torch.tensor([[True, True, True], [True, False, False]])
    logp = on_policy(old)
    loss, stats = policy_loss(logp, old, old, adv, mask, config=CFG)
    # token-level mean over the 4 action tokens: -(1 - 2 + 3 + 0.5) / 4 = -0.625
    assert loss.item() == pytest.approx(-0.625)
    loss.backward()
    # d/dlogp of -r A / 4 at r = 1 is -A / 4 on action tokens, 0 elsewhere.
    assert logp.grad.tolist() == [[-0.25, 0.5, -0.75], [-0.125, 0.0, 0.0]]
    assert stats == {
        "clip_frac_low": 0.0, "clip_frac_high": 0.0, "ratio_mean": 1.0, "ratio_dev": 0.0,
        "kl": 0.0, "tis_mean": 1.0, "tis_capped_frac": 0.0, "tis_max": 1.0, "tokens": 4.0,
    }  # fmt: skip


def test_token_level_mean_is_not_a_mean_of_sequence_means():
    old = torch.zeros(2, 3, dtype=torch.float64)
    adv = t([1.0, 1.0, 1.0], [-1.0, 0.0, 0.0])
    mask = torch.tensor([[True, True, True], [True, False, False]])
    loss, _ = policy_loss(on_policy(old), old, old, adv, mask, config=CFG)
    # tokens: -(1 + 1 + 1 - 1) / 4 = -0.5 (a mean of sequence means would give -(1 - 1) / 2 = 0)
    assert loss.item() == pytest.approx(-0.5)


def test_clipping_is_asymmetric_and_a_clipped_token_has_no_gradient():
    old = torch.zeros(1, 4, dtype=torch.float64)
    # ratios 1.5, 1.5, 0.5, 1.1
    new = t([math.log(1.5), math.log(1.5), math.log(0.5), math.log(1.1)])
    adv = t([2.0, -1.0, -1.0, 1.0])
    logp = on_policy(new)
    loss, stats = policy_loss(logp, old, old, adv, torch.ones(1, 4, dtype=torch.bool), config=CFG)
    # token 0: A > 0, r 1.5 > 1.28 -> -min(3.0, 2.56) = -2.56, clipped: no gradient
    # token 1: A < 0, r 1.5       -> -min(-1.5, -1.28) = 1.5, not clipped: grad -A r / 4 = 0.375
    # token 2: A < 0, r 0.5 < 0.8 -> -min(-0.5, -0.8) = 0.8, clipped: no gradient
    # token 3: A > 0, r 1.1       -> -1.1, grad -A r / 4 = -0.275
    assert loss.item() == pytest.approx((-2.56 + 1.5 + 0.8 - 1.1) / 4)
    loss.backward()
    assert logp.grad[0].tolist() == pytest.approx([0.0, 0.375, 0.0, -0.275])
    assert stats["clip_frac_high"] == pytest.approx(0.25)
    assert stats["clip_frac_low"] == pytest.approx(0.25)
    assert stats["ratio_mean"] == pytest.approx((1.5 + 1.5 + 0.5 + 1.1) / 4)
    assert stats["ratio_dev"] == pytest.approx((0.5 + 0.5 + 0.5 + 0.1) / 4)


def test_a_masked_token_changes_nothing():
    old = t([-1.0, -2.0])
    adv = t([1.5, 1.0])
    mask = torch.tensor([[True, False]])
    # the masked token carries values that would overflow exp if they were used
    garbage = t([-1.2, 800.0])
    logp = on_policy(garbage)
    loss, stats = policy_loss(
        logp, old, t([-1.0, -900.0]), t([1.5, 1e9]), mask, ref_logprobs=t([-1.0, 1e3]), config=CFG
    )
    alone = on_policy(t([-1.2]))
    loss_alone, _ = policy_loss(alone, t([-1.0]), t([-1.0]), adv[:, :1], torch.ones(1, 1, dtype=torch.bool), config=CFG)
    assert loss.item() == pytest.approx(loss_alone.item())
    loss.backward()
    loss_alone.backward()
    assert logp.grad[0, 1].item() == 0.0
    assert logp.grad[0, 0].item() == pytest.approx(alone.grad[0, 0].item())
    assert stats["tokens"] == 1.0 and math.isfinite(stats["kl"]) and math.isfinite(stats["tis_mean"])


def test_k3_kl_is_zero_at_the_reference_and_hand_computed_elsewhere():
    logp = t([-1.0, -2.0])
    adv = torch.zeros(1, 2, dtype=torch.float64)
    mask = torch.ones(1, 2, dtype=torch.bool)
    cfg = LossConfig(kl_coef=0.1)
    loss, stats = policy_loss(on_policy(logp), logp, logp, adv, mask, ref_logprobs=logp, config=cfg)
    assert loss.item() == 0.0 and stats["kl"] == 0.0
    # ref - logp = ln 2 on both tokens: k3 = 2 - ln 2 - 1 = 0.3068528...; loss = 0.1 * k3
    k3 = 1 - math.log(2)
    loss, stats = policy_loss(on_policy(logp), logp, logp, adv, mask, ref_logprobs=logp + math.log(2), config=cfg)
    assert stats["kl"] == pytest.approx(k3)
    assert loss.item() == pytest.approx(0.1 * k3)
    # reported even when it is not in the loss
    loss, stats = policy_loss(on_policy(logp), logp, logp, adv, mask, ref_logprobs=logp + math.log(2), config=CFG)
    assert loss.item() == 0.0 and stats["kl"] == pytest.approx(k3)
    with pytest.raises(ValueError, match="no ref_logprobs"):
        policy_loss(on_policy(logp), logp, logp, adv, mask, config=cfg)


def test_truncated_importance_weight_is_capped_and_detached():
    old = t([-1.0, -1.0])
    # old - behaviour = ln 3 -> w = min(3, 2) = 2; old - behaviour = ln 0.5 -> w = 0.5
    behaviour = old - t([math.log(3.0), math.log(0.5)])
    adv = t([1.0, 1.0])
    logp = on_policy(old)
    loss, stats = policy_loss(logp, old, behaviour, adv, torch.ones(1, 2, dtype=torch.bool), config=CFG)
    # r = 1: -(2 * 1 + 0.5 * 1) / 2 = -1.25
    assert loss.item() == pytest.approx(-1.25)
    loss.backward()
    assert logp.grad[0].tolist() == pytest.approx([-1.0, -0.25])  # -w A / 2
    assert stats["tis_mean"] == pytest.approx(1.25)
    assert stats["tis_capped_frac"] == pytest.approx(0.5)
    assert stats["tis_max"] == pytest.approx(3.0)  # before the cap: how far the behaviour policy was off


def test_per_token_weights_scale_and_token_count_overrides_the_denominator():
    old = torch.zeros(1, 2, dtype=torch.float64)
    adv = t([1.0, 3.0])
    mask = torch.ones(1, 2, dtype=torch.bool)
    base, _ = policy_loss(on_policy(old), old, old, adv, mask, config=CFG)
    assert base.item() == pytest.approx(-2.0)  # -(1 + 3) / 2
    doubled, _ = policy_loss(on_policy(old), old, old, adv, mask, weights=torch.full((1, 2), 2.0), config=CFG)
    assert doubled.item() == pytest.approx(-4.0)
    # a role weighted 0 drops out of the numerator but its tokens still count: -(2 * 1 + 0 * 3) / 2 = -1
    role, _ = policy_loss(on_policy(old), old, old, adv, mask, weights=t([2.0, 0.0]), config=CFG)
    assert role.item() == pytest.approx(-1.0)
    # a micro-batch of a batch of 8 action tokens
    part, _ = policy_loss(on_policy(old), old, old, adv, mask, config=CFG, token_count=8)
    assert part.item() == pytest.approx(-0.5)


def test_an_empty_mask_gives_zero_loss_with_a_graph():
    old = torch.zeros(1, 2, dtype=torch.float64)
    loss, stats = policy_loss(on_policy(old), old, old, t([1.0, 1.0]), torch.zeros(1, 2, dtype=torch.bool), config=CFG)
    assert loss.item() == 0.0 and loss.requires_grad and stats["tokens"] == 0.0
