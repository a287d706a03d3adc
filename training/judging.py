"""The judge role's arithmetic: which solver episodes are judged, what a judgement earns, what it pays turns.

Everything here is a plain function over lists, so the game (:mod:`sparring.training.game`) reads as
phases and the tests check the formulas by hand.

* :func:`sample_for_judging` — a sample of finished solver episodes, both outcomes alike;
* :func:`judge_rewards` — agreement of each verdict with the real outcome, balanced over the two
  classes of the batch: a verdict on a solved episode weighs ``n / (2 n_solved)``, on a failed one
  ``n / (2 n_failed)``, +weight when right and −weight when wrong or invalid. So the batch's mean is
  ``2·balanced accuracy − 1``: a judge that always says "not solved" earns exactly 0 whatever the solve
  rate, a perfect one 1. A batch of one class cannot tell a judge from a constant: it pays nothing
  (masked). An optional bonus is added to every valid judgement (the format term);
* :func:`assessment_turn_rewards` — the solver's turn rewards from a valid judgement: good +w,
  neutral 0, bad −w. They shape credit only: the judge never decides the solver's outcome reward;
* :func:`scripted_judgement` — the warm start's judgement, right by construction;
* :func:`judge_stats` — what to watch for a solver gaming its judge.

The judge phase of an iteration uses them: :func:`plan_judges` (after the solvers) and
:func:`after_judges` (rewards, turn rewards, metrics); :func:`gold_turn_rewards` adds the search
game's env-verifiable turn signal after the solvers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from sparring.agents.runner import EpisodeSpec
from sparring.envs.core import Episode
from sparring.training.outcomes import MASKED_ONE_CLASS, MASKED_TRUNCATED, OUTCOME, cut_by_runner, cut_short, end_reason
from sparring.training.roles import IterationState, add_turn_rewards, by_group

__all__ = [
    "ASSESSMENT_VALUE",
    "after_judges",
    "assessment_turn_rewards",
    "gold_turn_rewards",
    "judge_rewards",
    "judge_stats",
    "plan_judges",
    "sample_for_judging",
    "scripted_judgement",
]

#: What each assessment pays a turn, in units of ``judge_turn_weight``.
ASSESSMENT_VALUE = {"good": 1.0, "neutral": 0.0, "bad": -1.0}


def sample_for_judging(labels: Sequence[bool], n: int, rng: np.random.Generator) -> list[int]:
    """Indices of up to ``n`` episodes to judge, half solved and half failed where the batch allows.

    A batch at a low solve rate still gets its solved episodes judged: a sample in proportion would
    hardly show the judge one.

    Example:
        >>> sorted(sample_for_judging([True, False, False, False], 2, np.random.default_rng(0)))[0]
        0
    """
    solved = [i for i, y in enumerate(labels) if y]
    failed = [i for i, y in enumerate(labels) if not y]
    take_solved = min(len(solved), max(n // 2, n - len(failed)))
    take_failed = min(len(failed), n - take_solved)
    picked = list(rng.permutation(solved)[:take_solved]) + list(rng.permutation(failed)[:take_failed])
    return sorted(int(i) for i in picked)


def _right(label: bool, outcome: dict[str, Any]) -> bool:
    return bool(outcome.get("valid")) and (outcome.get("verdict") == "solved") == label


def judge_rewards(labels: Sequence[bool], outcomes: Sequence[dict[str, Any]], format_bonus: float = 0.0) -> list[float]:
    """Each judgement's class-balanced agreement with the real outcome (NaN for all when one class is missing).

    Args:
        labels: Whether each judged solver episode really solved its task.
        outcomes: Each judge episode's outcome (``valid``, ``verdict``); an invalid one counts as wrong.
        format_bonus: Added to every valid judgement.

    Example:
        >>> judge_rewards([True, False, False, False], [{"valid": True, "verdict": "not solved"}] * 4)
        [-2.0, 0.6666666666666666, 0.6666666666666666, 0.6666666666666666]
    """
    n, solved = len(labels), sum(bool(y) for y in labels)
    if solved in (0, n):
        return [float("nan")] * n
    weight = {True: n / (2 * solved), False: n / (2 * (n - solved))}
    return [
        (weight[bool(y)] if _right(bool(y), o) else -weight[bool(y)]) + (format_bonus if o.get("valid") else 0.0)
        for y, o in zip(labels, outcomes, strict=True)
    ]


def assessment_turn_rewards(outcome: dict[str, Any], turns: int, weight: float) -> list[float]:
    """The solver's turn rewards from a judgement: ``weight`` times +1/0/−1 for good/neutral/bad; zeros if invalid."""
    words = outcome.get("assessments") or []
    if not outcome.get("valid") or len(words) != turns:
        return [0.0] * turns
    return [weight * ASSESSMENT_VALUE.get(w, 0.0) for w in words]


def scripted_judgement(
    episode: Episode, solved: bool, good_turns: Callable[[Episode], list[bool | None]] | None
) -> tuple[str, list[str]]:
    """The warm start's judgement of a solver episode, from its real outcome (right by construction).

    The verdict is the outcome. A turn is good when ``good_turns`` labels it so (search: it newly
    retrieved the gold entry), the submitting last turn is good when the attempt solved and bad when
    not, and every other turn is neutral.
    """
    labels = good_turns(episode) if good_turns is not None else [None] * len(episode.turns)
    words = ["good" if label else "neutral" for label in labels]
    if words and episode.terminated:
        words[-1] = "good" if solved else "bad"
    return ("solved" if solved else "not solved"), words


def _share_good(assessments: list[list[str]]) -> float:
    words = [w for ws in assessments for w in ws]
    return sum(w == "good" for w in words) / len(words) if words else float("nan")


def judge_stats(
    labels: Sequence[bool], outcomes: Sequence[dict[str, Any]], turn_labels: Sequence[list[bool | None]]
) -> dict[str, float]:
    """The judge's balanced accuracy on the batch, and its share of "good" on failed, solved and labelled turns.

    A solver that learns turns which please its judge shows as "good" rising on failed episodes, or on
    search turns that did not retrieve the gold entry, while the balanced accuracy stays put.

    Args:
        labels: Whether each judged solver episode solved.
        outcomes: Each judgement's outcome.
        turn_labels: Per judged episode, each turn's known label (True/False) or None.
    """
    stats: dict[str, float] = {"judge/valid_rate": float(np.mean([bool(o.get("valid")) for o in outcomes]))}
    rates = []
    for cls in (True, False):
        mine = [o for y, o in zip(labels, outcomes, strict=True) if bool(y) == cls]
        if mine:
            rates.append(float(np.mean([_right(cls, o) for o in mine])))
    stats["judge/balanced_accuracy"] = float(np.mean(rates)) if len(rates) == 2 else float("nan")
    valid = [(y, o, t) for y, o, t in zip(labels, outcomes, turn_labels, strict=True) if o.get("valid")]
    stats["judge/good_share_solved"] = _share_good([o["assessments"] for y, o, _ in valid if y])
    stats["judge/good_share_failed"] = _share_good([o["assessments"] for y, o, _ in valid if not y])
    for known, name in ((True, "gold_turns"), (False, "other_search_turns")):
        words = [[w] for _, o, t in valid for w, lab in zip(o["assessments"], t, strict=False) if lab is known]
        stats[f"judge/good_share_{name}"] = _share_good(words)
    return {k: v for k, v in stats.items() if not np.isnan(v)}


# ---------------------------------------------------------------------------- the judge phase


def gold_turn_rewards(state: IterationState) -> None:
    """The game's env-verifiable turn signal (search: a turn that newly retrieved the gold entry), when configured."""
    weight, labels = state.config.search_gold_turn_reward, state.game.gold_turns
    if weight and labels is not None and state.game.domain == "search":
        for ep in state.episodes.get("solver", []):
            if ep.error is None and ep.turns:
                add_turn_rewards(state, ep, [weight if label else 0.0 for label in labels(ep)])


def plan_judges(state: IterationState) -> list[tuple[EpisodeSpec, str]]:
    """One judge episode for each of a sample of the solver episodes that ended by the policy's doing."""
    import gymnasium as gym

    game = state.game
    candidates = [
        ep for eps in by_group(state, "solver").values() if not cut_short(eps)
        for ep in eps if end_reason(ep) in ("done", "turn_limit") and ep.turns
    ]  # fmt: skip
    labels = [game.solved(ep.outcome) for ep in candidates]
    state.judged = [candidates[i] for i in sample_for_judging(labels, state.config.judge_episodes, state.rng)]
    group = f"it{state.iteration}:judge"  # the batch the judges' rewards are balanced over
    make = lambda: gym.make(game.judge_env)  # noqa: E731
    return [
        (EpisodeSpec(make, seed=0, options={"task": game.judge_task(ep)}, env_id=game.judge_env, group_id=group), group)
        for ep in state.judged
    ]


def after_judges(state: IterationState) -> None:
    """The judges' rewards over their batch, their assessments as the judged solvers' turn rewards, their metrics.

    A judge episode the runner cut short is an invalid judgement (``overlong=score``) or left out (``mask``);
    an errored one is left out (its group is dropped).
    """
    game, config = state.game, state.config
    kept: list[tuple[Episode, Episode]] = []
    for judge, solver in zip(state.episodes.get("judge", []), state.judged, strict=True):
        if judge.error is not None or (cut_by_runner(judge) and config.overlong == "mask"):
            state.judge_scores[id(judge)] = float("nan"), MASKED_TRUNCATED
        else:
            kept.append((judge, solver))
    labels = [game.solved(solver.outcome) for _, solver in kept]
    outcomes = [{} if cut_by_runner(judge) else judge.outcome for judge, _ in kept]
    rewards = judge_rewards(labels, outcomes, config.judge_format_bonus)
    for (judge, solver), reward, outcome in zip(kept, rewards, outcomes, strict=True):
        state.judge_scores[id(judge)] = reward, MASKED_ONE_CLASS if np.isnan(reward) else OUTCOME
        add_turn_rewards(state, solver, assessment_turn_rewards(outcome, len(solver.turns), config.judge_turn_weight))
    if kept:
        known = [_turn_labels(state, solver) for _, solver in kept]
        state.stats |= judge_stats(labels, outcomes, known) | {"judge/solved_share": float(np.mean(labels))}


def _turn_labels(state: IterationState, episode: Episode) -> list[bool | None]:
    """The known label of each turn of a solver episode (search: it newly retrieved the gold entry), else None."""
    labels = state.game.gold_turns
    return labels(episode) if labels is not None else [None for _ in episode.turns]
