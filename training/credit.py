"""Credit assignment: outcome, turn and token advantages with group baselines (docs/training.md, "Formulas").

Each episode e has a group g (built by :func:`group_key`, so it always names the episode's domain
and role: baselines never mix them), an outcome reward R_e and turn rewards r_{e,t}.

* Outcome advantage: ``A^O_e = (R_e - mean_g R) / (std_g R + eps)``; without std scaling
  ``A^O_e = R_e - mean_g R`` (Dr. GRPO drops the std). A group of one has no baseline and gets 0.
* Turn advantage: return-to-go ``G_{e,t} = sum_{k>=t} gamma^(k-t) r_{e,k}``, normalised over the
  pooled turns of every episode in the group (not per turn index: the policy decides when an
  episode ends): ``A^T_{e,t} = (G_{e,t} - mean) / (std + eps)``.
* Token advantage: every action token of turn t gets ``A^O_e + lam * A^T_{e,t}``; prompt and
  observation tokens get 0 and the loss masks them out.

Standard deviations are population ones (``ddof=0``), as in GRPO implementations. A set of values
that are all equal normalises to exact zeros, so such a group carries no signal;
:func:`zero_variance_groups` lists those groups for dynamic sampling (DAPO) to drop.

Example:
    >>> keys = [group_key("search", "solver", "q1")] * 2 + [group_key("search", "proposer", None)]
    >>> outcome_advantages([1.0, 0.0, 1.0], keys, std_scale=False).tolist()
    [0.5, -0.5, 0.0]
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

__all__ = [
    "group_key",
    "outcome_advantages",
    "returns_to_go",
    "token_advantages",
    "turn_advantages",
    "zero_variance_groups",
]


def group_key(domain: str, role: str, group: str | None) -> tuple[str, str, str | None]:
    """The baseline group of an episode; it always includes domain and role.

    Args:
        domain: The game, e.g. ``"search"`` or ``"swe"``.
        role: The role played, e.g. ``"solver"`` or ``"proposer"``.
        group: The finer group within (domain, role): the task id for solvers, the shared seed for
            proposers; ``None`` means the whole batch of that domain and role.
    """
    return (domain, role, group)


def _members(groups: Sequence[Hashable], n: int) -> dict[Hashable, list[int]]:
    if len(groups) != n:
        raise ValueError(f"got {n} episodes but {len(groups)} group keys; pass one key per episode")
    members: dict[Hashable, list[int]] = {}
    for i, key in enumerate(groups):
        members.setdefault(key, []).append(i)
    return members


def _normalise(x: np.ndarray, *, std_scale: bool, eps: float) -> np.ndarray:
    """``(x - mean) / (std + eps)`` (or ``x - mean``); exact zeros when all values are equal."""
    if x.size < 2 or np.ptp(x) == 0:
        return np.zeros_like(x)
    centred = x - x.mean()
    return centred / (x.std() + eps) if std_scale else centred


def outcome_advantages(
    rewards: Sequence[float], groups: Sequence[Hashable], *, std_scale: bool = True, eps: float = 1e-6
) -> np.ndarray:
    """Outcome advantages ``A^O_e = (R_e - mean_g R) / (std_g R + eps)`` with a baseline per group.

    Args:
        rewards: Outcome reward R_e of each episode.
        groups: Group key of each episode (see :func:`group_key`).
        std_scale: Divide by the group's population std; if False, only subtract the mean.
        eps: Added to the std.

    Returns:
        Array of shape ``[E]``; 0 for a group of one or a group whose rewards are all equal.
    """
    r = np.asarray(rewards, dtype=np.float64)
    adv = np.zeros_like(r)
    for idx in _members(groups, len(r)).values():
        adv[idx] = _normalise(r[idx], std_scale=std_scale, eps=eps)
    return adv


def returns_to_go(turn_rewards: Sequence[float], gamma: float = 1.0) -> np.ndarray:
    """``G_t = sum_{k>=t} gamma^(k-t) r_k`` for one episode."""
    out = np.zeros(len(turn_rewards), dtype=np.float64)
    running = 0.0
    for t in reversed(range(len(turn_rewards))):
        running = turn_rewards[t] + gamma * running
        out[t] = running
    return out


def turn_advantages(
    turn_rewards: Sequence[Sequence[float]],
    groups: Sequence[Hashable],
    *,
    gamma: float = 1.0,
    eps: float = 1e-6,
    std_scale: bool = True,
) -> list[np.ndarray]:
    """Turn advantages ``A^T_{e,t} = (G_{e,t} - mean) / (std + eps)`` over the pooled turns of a group.

    ``G_{e,t} = sum_{k>=t} gamma^(k-t) r_{e,k}``; the mean and population std are taken over every
    turn of every episode in the group, whatever the episodes' lengths.

    Args:
        turn_rewards: Per-episode lists of turn rewards r_{e,t} (lengths may differ).
        groups: Group key of each episode (see :func:`group_key`).
        gamma: Discount of the return-to-go.
        eps: Added to the std.
        std_scale: Divide by the pooled std; if False, only subtract the pooled mean.

    Returns:
        One array per episode, of its number of turns; all zeros when the group's returns are equal.
    """
    returns = [returns_to_go(r, gamma) for r in turn_rewards]
    out = [np.zeros_like(g) for g in returns]
    for idx in _members(groups, len(returns)).values():
        pooled = np.concatenate([returns[i] for i in idx])
        normed = _normalise(pooled, std_scale=std_scale, eps=eps)
        start = 0
        for i in idx:
            out[i] = normed[start : start + len(returns[i])]
            start += len(returns[i])
    return out


def token_advantages(
    token_turn: Sequence[Sequence[int]],
    action_mask: Sequence[Sequence[bool]],
    outcome_adv: np.ndarray,
    turn_adv: list[np.ndarray],
    lam: float,
) -> list[np.ndarray]:
    """Per-token advantages: ``A^O_e + lam * A^T_{e,t}`` on action tokens of turn t, 0 elsewhere.

    Args:
        token_turn: Per-episode turn index of each token (-1 for the prompt), as in ``Episode``.
        action_mask: Per-episode flag of each token: True for sampled (action) tokens.
        outcome_adv: ``[E]`` outcome advantages from :func:`outcome_advantages`.
        turn_adv: Per-episode turn advantages from :func:`turn_advantages`.
        lam: Weight of the turn advantage.

    Returns:
        One float array per episode, as long as its token lists.

    Raises:
        ValueError: The lists disagree in length, or an action token's turn has no turn advantage.
    """
    if not len(token_turn) == len(action_mask) == len(outcome_adv) == len(turn_adv):
        raise ValueError("token_turn, action_mask, outcome_adv and turn_adv need one entry per episode")
    out = []
    for e, (turns, mask) in enumerate(zip(token_turn, action_mask, strict=True)):
        t = np.asarray(turns, dtype=np.int64)
        m = np.asarray(mask, dtype=bool)
        if t.shape != m.shape:
            raise ValueError(f"episode {e}: {t.size} token turns but {m.size} action-mask entries")
        acting = t[m]
        if acting.size and (acting.min() < 0 or acting.max() >= len(turn_adv[e])):
            raise ValueError(f"episode {e}: an action token's turn is outside its {len(turn_adv[e])} turns")
        adv = np.zeros(t.shape, dtype=np.float64)
        adv[m] = outcome_adv[e] + lam * np.asarray(turn_adv[e], dtype=np.float64)[acting]
        out.append(adv)
    return out


def zero_variance_groups(rewards: Sequence[float], groups: Sequence[Hashable]) -> set[Hashable]:
    """Groups whose rewards are all equal (a group of one included): their advantages are all 0."""
    r = np.asarray(rewards, dtype=np.float64)
    return {key for key, idx in _members(groups, len(r)).items() if np.ptp(r[idx]) == 0}
