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

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["BOOTSTRAP_SAMPLES", "mean_ci", "paired_difference"]

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
