"""95% bootstrap intervals over instances, and the paired bootstrap of a difference.

Percentile bootstrap: resample the instances with replacement ``B`` times, take the statistic
(here the mean) of each resample, and report the 2.5th and 97.5th percentiles. The paired form
resamples instances, not the two runs separately, so the shared difficulty of an instance cancels
out (the per-instance differences are resampled). Seeded: the same scores give the same interval.

Example:
    >>> mean_ci([1, 1, 0, 1])["mean"]
    0.75
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = [
    "BOOTSTRAP_SAMPLES",
    "auroc",
    "balanced_accuracy",
    "mean_ci",
    "paired_difference",
    "paired_statistic",
    "statistic_ci",
]

#: Resamples per interval.
BOOTSTRAP_SAMPLES = 10_000


def _interval(values: np.ndarray, samples: int, seed: int) -> tuple[float, float]:
    if len(values) < 2:
        return float(values.mean()), float(values.mean())
    rng = np.random.default_rng(seed)
    means = np.empty(samples)
    for start in range(0, samples, 1000):  # bounded memory for large sets
        stop = min(samples, start + 1000)
        means[start:stop] = values[rng.integers(0, len(values), size=(stop - start, len(values)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def mean_ci(values: Sequence[float], samples: int = BOOTSTRAP_SAMPLES, seed: int = 0) -> dict[str, Any]:
    """The mean of ``values`` with its 95% percentile-bootstrap interval.

    Returns:
        ``{"mean", "ci": [low, high], "n"}``; with no values, mean and interval are None.
    """
    array = np.asarray(values, dtype=float)
    if array.size == 0:
        return {"mean": None, "ci": [None, None], "n": 0}
    low, high = _interval(array, samples, seed)
    return {"mean": float(array.mean()), "ci": [low, high], "n": int(array.size)}


def paired_difference(
    a: Sequence[float], b: Sequence[float], samples: int = BOOTSTRAP_SAMPLES, seed: int = 0
) -> dict[str, Any]:
    """Mean of ``b - a`` over paired instances with its 95% paired-bootstrap interval.

    Returns:
        ``{"a", "b", "difference", "ci": [low, high], "n"}`` (means of each side and of the differences).
    """
    left, right = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if left.shape != right.shape:
        raise ValueError("paired scores need the same instances on both sides")
    if left.size == 0:
        return {"a": None, "b": None, "difference": None, "ci": [None, None], "n": 0}
    low, high = _interval(right - left, samples, seed)
    return {
        "a": float(left.mean()),
        "b": float(right.mean()),
        "difference": float((right - left).mean()),
        "ci": [low, high],
        "n": int(left.size),
    }


def balanced_accuracy(labels: Sequence[bool], right: Sequence[bool]) -> float:
    """The mean over the two classes of the share judged right; NaN when a class is missing.

    Example:
        >>> balanced_accuracy([True, False, False, False], [True, True, False, False])
        0.75
    """
    y, ok = np.asarray(labels, dtype=bool), np.asarray(right, dtype=bool)
    if y.all() or not y.any():
        return float("nan")
    return float((ok[y].mean() + ok[~y].mean()) / 2)


def auroc(labels: Sequence[bool], scores: Sequence[float]) -> float:
    """Area under the ROC curve: the chance that a positive scores above a negative, a tie counting half.

    Example:
        >>> auroc([True, True, False, False], [0.9, 0.5, 0.5, 0.1])
        0.875
    """
    y, s = np.asarray(labels, dtype=bool), np.asarray(scores, dtype=float)
    pos, neg = s[y], s[~y]
    if not len(pos) or not len(neg):
        return float("nan")
    order = np.sort(neg)  # positives above, and tied with, each negative: two binary searches, not a square
    above = np.searchsorted(order, pos, side="left")
    ties = np.searchsorted(order, pos, side="right") - above
    return float((above + ties / 2).sum() / (len(pos) * len(neg)))


def _percentiles(values: np.ndarray) -> tuple[float | None, float | None]:
    values = values[~np.isnan(values)]  # a resample that drew one class alone has no value
    if not values.size:
        return None, None
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


def statistic_ci(
    statistic: Callable[[np.ndarray], float], n: int, samples: int = BOOTSTRAP_SAMPLES, seed: int = 0
) -> dict[str, Any]:
    """A statistic of ``n`` instances with its 95% percentile-bootstrap interval (instances resampled).

    Args:
        statistic: The statistic of the instances at the given indices (NaN where undefined, e.g. a
            resample with one class: it is left out of the percentiles).
        n: Instances.
        samples: Resamples.
        seed: Seed of the resampling.

    Returns:
        ``{"mean", "ci": [low, high], "n"}`` like :func:`mean_ci` (``mean`` is the statistic on all
        instances; None where undefined).
    """
    if n == 0:
        return {"mean": None, "ci": [None, None], "n": 0}
    value = statistic(np.arange(n))
    rng = np.random.default_rng(seed)
    draws = np.array([statistic(rng.integers(0, n, size=n)) for _ in range(samples)]) if n > 1 else np.array([value])
    low, high = _percentiles(draws)
    return {"mean": None if np.isnan(value) else float(value), "ci": [low, high], "n": int(n)}


def paired_statistic(
    statistic_a: Callable[[np.ndarray], float],
    statistic_b: Callable[[np.ndarray], float],
    n: int,
    samples: int = BOOTSTRAP_SAMPLES,
    seed: int = 0,
) -> dict[str, Any]:
    """B − A of a statistic of ``n`` paired instances, with its paired-bootstrap 95% interval.

    Each resample draws instances once and takes both statistics on them, so an instance hard for both
    cancels out (as :func:`paired_difference` does for means).

    Returns:
        ``{"a", "b", "difference", "ci": [low, high], "n"}``.
    """
    if n == 0:
        return {"a": None, "b": None, "difference": None, "ci": [None, None], "n": 0}
    every = np.arange(n)
    a, b = statistic_a(every), statistic_b(every)
    rng = np.random.default_rng(seed)
    diffs = []
    for _ in range(samples if n > 1 else 0):
        idx = rng.integers(0, n, size=n)
        diffs.append(statistic_b(idx) - statistic_a(idx))
    low, high = _percentiles(np.array(diffs if diffs else [b - a]))
    known = lambda v: None if np.isnan(v) else float(v)  # noqa: E731
    return {"a": known(a), "b": known(b), "difference": known(b - a), "ci": [low, high], "n": int(n)}
