"""The one percentile of every benchmark and report, and latency summaries built on it.

numpy's "linear" method (its default; Hyndman & Fan type 7, linear interpolation between closest
ranks); reports name it as :data:`PERCENTILE_LABEL`, so P95 figures of different reports compare.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import numpy as np

PERCENTILE_METHOD = "linear"
PERCENTILE_LABEL = f"numpy {PERCENTILE_METHOD}"


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of `values`: `np.percentile(values, q, method=PERCENTILE_METHOD)`."""
    if len(values) == 0:
        raise ValueError("percentile of an empty sequence")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be within [0, 100], got {q!r}")
    return float(np.percentile(np.asarray(values, dtype=np.float64), q, method=PERCENTILE_METHOD))


def summarize(samples: Sequence[float]) -> dict[str, float]:
    """P50/P95/P99 of one run's samples."""
    return {"p50": percentile(samples, 50), "p95": percentile(samples, 95), "p99": percentile(samples, 99)}


def median_summary(runs: Sequence[Sequence[float]]) -> dict[str, float]:
    """Each percentile computed per repeated run, then the median over the runs."""
    if not runs:
        raise ValueError("no runs to summarise")
    per_run = [summarize(run) for run in runs]
    return {key: statistics.median(s[key] for s in per_run) for key in ("p50", "p95", "p99")}
