"""Paired significance tests over per-query scores, Holm's correction and confidence intervals.

Fisher 1935, Smucker et al. 2007, Holm 1979: see docs/internals/tune-eval.md#significance-tests.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from hybridlab.errors import InvalidValueError

DEFAULT_PERMUTATIONS = 10_000
DEFAULT_SEED = 0
_BATCH = 1_000  # sign patterns drawn at a time (bounds memory for many queries)


def paired_values(a: Mapping[str, float], b: Mapping[str, float]) -> tuple[list[float], list[float]]:
    """The two systems' values aligned by query id (sorted); ValueError when the queries differ."""
    if set(a) != set(b):
        only_a, only_b = sorted(set(a) - set(b))[:3], sorted(set(b) - set(a))[:3]
        raise InvalidValueError(
            f"paired scores need the same queries; only in a: {only_a}, only in b: {only_b}"
        )
    if not a:
        raise InvalidValueError("paired scores need at least one query")
    qids = sorted(a)
    return [float(a[q]) for q in qids], [float(b[q]) for q in qids]


def randomization_test(
    a: Mapping[str, float],
    b: Mapping[str, float],
    *,
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = DEFAULT_SEED,
) -> float:
    """Two-sided p-value of mean(a - b) under random sign flips of the per-query differences."""

    if permutations < 1:
        raise InvalidValueError(f"permutations must be >= 1, got {permutations}", field="permutations")
    xs, ys = paired_values(a, b)
    diffs = np.asarray(xs) - np.asarray(ys)
    n = len(diffs)
    observed = abs(diffs.mean())
    tolerance = 1e-12 * max(1.0, float(np.abs(diffs).max()))
    if n < 31 and 2**n <= permutations:  # every sign pattern: the exact p-value
        patterns = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1) * 2 - 1
        means = np.abs(patterns @ diffs) / n
        return float(np.count_nonzero(means >= observed - tolerance) / 2**n)
    rng = np.random.default_rng(seed)
    hits, left = 0, permutations
    while left:
        size = min(_BATCH, left)
        signs = rng.integers(0, 2, size=(size, n), dtype=np.int8) * 2 - 1
        hits += int(np.count_nonzero(np.abs(signs @ diffs) / n >= observed - tolerance))
        left -= size
    return (hits + 1) / (permutations + 1)


def t_test(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    """Two-sided p-value of the paired t-test; 1.0 when every difference is the same (no variance)."""
    from scipy import stats

    xs, ys = paired_values(a, b)
    if len(xs) < 2:
        return 1.0
    p = float(stats.ttest_rel(xs, ys).pvalue)
    return 1.0 if math.isnan(p) else p


TESTS: dict[str, Callable[..., float]] = {"randomization": randomization_test, "t-test": t_test}


@dataclass(frozen=True)
class PairedTest:
    """The outcome of one paired comparison of system a against baseline b."""

    test: str
    n: int
    mean_a: float
    mean_b: float
    p_value: float

    @property
    def difference(self) -> float:
        return self.mean_a - self.mean_b

    def to_dict(self) -> dict[str, float | int | str]:
        return {
            "test": self.test,
            "n": self.n,
            "mean_a": self.mean_a,
            "mean_b": self.mean_b,
            "difference": self.difference,
            "p_value": self.p_value,
        }


def paired_test(
    a: Mapping[str, float], b: Mapping[str, float], test: str = "randomization", **options: int
) -> PairedTest:
    """Compare a with b by the named test (:data:`TESTS`)."""
    if test not in TESTS:
        raise InvalidValueError(f"unknown test {test!r}; choose from {sorted(TESTS)}", field="test")
    xs, ys = paired_values(a, b)
    return PairedTest(test, len(xs), sum(xs) / len(xs), sum(ys) / len(ys), TESTS[test](a, b, **options))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values, in the input order: the i-th smallest of m is multiplied
    by (m - i + 1), then made monotone (never below a smaller one's) and capped at 1."""
    for p in p_values:
        if not 0.0 <= p <= 1.0:
            raise InvalidValueError(f"a p-value must be within [0, 1], got {p}")
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


@dataclass(frozen=True)
class Interval:
    """A mean with its confidence interval."""

    mean: float
    low: float
    high: float
    confidence: float
    method: str

    def to_dict(self) -> dict[str, float | str]:
        return {
            "mean": self.mean,
            "low": self.low,
            "high": self.high,
            "confidence": self.confidence,
            "method": self.method,
        }


def mean_ci(
    values: Sequence[float],
    confidence: float = 0.95,
    method: str = "t",
    *,
    resamples: int = DEFAULT_PERMUTATIONS,
    seed: int = DEFAULT_SEED,
) -> Interval:
    """The mean of `values` with a `confidence` interval: Student's t (mean ± t·s/√n) or the
    percentile bootstrap (`resamples` resamples, fixed seed)."""

    if not 0.0 < confidence < 1.0:
        raise InvalidValueError(f"confidence must be within (0, 1), got {confidence}", field="confidence")
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        raise InvalidValueError("a confidence interval needs at least one value")
    mean = float(data.mean())
    if data.size == 1:
        return Interval(mean, mean, mean, confidence, method)
    if method == "t":
        from scipy import stats

        half = float(
            stats.t.ppf((1 + confidence) / 2, data.size - 1) * data.std(ddof=1) / math.sqrt(data.size)
        )
        return Interval(mean, mean - half, mean + half, confidence, method)
    if method == "bootstrap":
        rng = np.random.default_rng(seed)
        means = data[rng.integers(0, data.size, size=(resamples, data.size))].mean(axis=1)
        low, high = np.quantile(means, [(1 - confidence) / 2, (1 + confidence) / 2])
        return Interval(mean, float(low), float(high), confidence, method)
    raise InvalidValueError(
        f"unknown interval method {method!r}; choose from ['bootstrap', 't']", field="method"
    )
