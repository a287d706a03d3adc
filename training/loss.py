"""Policy loss: PPO-clip with an asymmetric clip, truncated importance weights, k3 KL (docs/training.md, "Formulas").

For every action token i (padded ``[B, T]`` tensors, ``mask`` marks action tokens):

* ratio ``r_i = exp(logp_i - old_i)`` between the policy being updated and the trainer's
  logprobs before the update;
* clipped surrogate ``pg_i = -min(r_i A_i, clip(r_i, 1 - eps_low, 1 + eps_high) A_i)``;
* truncated importance weight ``w_i = min(exp(old_i - behaviour_i), C)`` (detached) corrects for
  the generator (which sampled the tokens, ``behaviour``) and the trainer disagreeing on the
  probabilities of the same weights, and for older weights having sampled them (asynchronous
  rollouts): decoupled PPO, the clip around the trainer's own ``old`` and the behaviour policy
  only in the weight;
* k3 KL estimate to a reference ``kl_i = exp(ref_i - logp_i) - (ref_i - logp_i) - 1``;
* per-token loss ``l_i = u_i (w_i pg_i + beta kl_i)``, with ``u_i`` the per-token (per-role) weight;
* token-level mean over all action tokens of the batch (DAPO): ``L = sum_i m_i l_i / sum_i m_i``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["LossConfig", "policy_loss"]


@dataclass
class LossConfig:
    """Hyper-parameters of :func:`policy_loss`; defaults are the ones the cited papers used."""

    clip_low: float = 0.2
    """Lower clip eps_low: the ratio is clipped below at 1 - eps_low (PPO, Schulman et al. 2017)."""
    clip_high: float = 0.28
    """Upper clip eps_high: clipped above at 1 + eps_high (DAPO's clip-higher, Yu et al. 2025)."""
    kl_coef: float = 0.0
    """Weight beta of the k3 KL to the reference; 0 turns it off (DAPO and Dr. GRPO drop it)."""
    tis_cap: float = 2.0
    """Cap C of the truncated importance weight (Yao et al. 2025, "off-policy RL training")."""


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    behaviour_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    weights: Tensor | None = None,
    ref_logprobs: Tensor | None = None,
    config: LossConfig,
    token_count: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Token-level PPO-clip loss ``L = sum_i m_i u_i (w_i pg_i + beta kl_i) / sum_i m_i``.

    Args:
        logprobs: ``[B, T]`` logprobs of the taken tokens under the policy being updated (grad).
        old_logprobs: ``[B, T]`` trainer logprobs before this update.
        behaviour_logprobs: ``[B, T]`` logprobs the generator sampled the tokens with.
        advantages: ``[B, T]`` per-token advantages (see ``credit.token_advantages``).
        mask: ``[B, T]`` True (or 1) on action tokens; everything else is ignored, padding included.
        weights: Optional ``[B, T]`` per-token loss weights (per-role weights).
        ref_logprobs: Optional ``[B, T]`` reference-model logprobs; the KL term needs them.
        config: Clip range, KL weight and importance-weight cap.
        token_count: Divide by this instead of ``mask.sum()``: the action-token count of the whole
            batch when it is split into micro-batches or across ranks, so the mean stays token-level.

    Returns:
        The scalar loss and its statistics: ``clip_frac_low``, ``clip_frac_high``, ``ratio_mean``,
        ``ratio_dev`` (mean ``|r - 1|``), ``kl``, ``tis_mean``, ``tis_capped_frac``, ``tis_max`` (the largest
        weight before the cap), ``tokens``.
    """
    m = mask.bool()
    mf = m.to(logprobs.dtype)
    zero = torch.zeros_like(logprobs)
    # Differences are zeroed off the mask before exp, so padding can never overflow into NaN.
    log_ratio = torch.where(m, logprobs - old_logprobs, zero)
    ratio = torch.exp(log_ratio)
    clipped = ratio.clamp(1 - config.clip_low, 1 + config.clip_high)
    pg = -torch.min(ratio * advantages, clipped * advantages)

    tis_raw = torch.exp(torch.where(m, old_logprobs - behaviour_logprobs, zero)).detach()
    tis = tis_raw.clamp(max=config.tis_cap)
    per_token = tis * pg

    kl = zero
    if ref_logprobs is not None:
        delta = torch.where(m, ref_logprobs - logprobs, zero)
        kl = torch.exp(delta) - delta - 1
        if config.kl_coef:
            per_token = per_token + config.kl_coef * kl
    elif config.kl_coef:
        raise ValueError("kl_coef is set but no ref_logprobs were given; pass them or set kl_coef=0")
    if weights is not None:
        per_token = per_token * weights

    n = mf.sum()
    loss = (per_token * mf).sum() / (token_count if token_count is not None else n.clamp(min=1))

    with torch.no_grad():
        count = max(n.item(), 1.0)

        def mean(x: Tensor) -> float:
            return (x.to(mf.dtype) * mf).sum().item() / count

        stats = {
            "clip_frac_low": mean((advantages < 0) & (ratio < 1 - config.clip_low)),
            "clip_frac_high": mean((advantages > 0) & (ratio > 1 + config.clip_high)),
            "ratio_mean": mean(ratio),
            "ratio_dev": mean((ratio - 1).abs()),
            "kl": mean(kl),
            "tis_mean": mean(tis),
            "tis_capped_frac": mean(tis_raw > config.tis_cap),
            "tis_max": float(tis_raw[m].max()) if bool(m.any()) else 1.0,  # before the cap: how far off it got
            "tokens": n.item(),
        }
    return loss, stats
