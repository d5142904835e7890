"""Repeated runs: how much they agree, and whether two evaluations really differ."""

from __future__ import annotations

from collections.abc import Sequence
from statistics import NormalDist
from typing import Literal

import numpy as np

from shared.measurement.statistics import Interval, bootstrap_quantile, effective_size
from shared.values import Frozen

__all__ = ["LatencyComparison", "RepetitionSummary", "compare", "summarize_repetitions"]

Magnitude = Literal["negligible", "small", "medium", "large"]
# Cliff's delta magnitudes (Romano et al., 2006), the usual reading of a rank effect size.
_MAGNITUDES: tuple[tuple[float, Magnitude], ...] = (
    (0.474, "large"),
    (0.33, "medium"),
    (0.147, "small"),
)


class RepetitionSummary(Frozen):
    """The spread of N repeats of one evaluation: their medians and headline percentiles,
    and the run farthest from the others (``outlier_run``, from 1): the one to look at when
    the spread is too wide."""

    count: int
    percentile: float
    medians_ns: tuple[float, ...]
    headlines_ns: tuple[float, ...]
    median_mean_ns: float
    median_std_ns: float
    median_cv: float
    headline_cv: float
    outlier_run: int
    outlier_deviation: float


def summarize_repetitions(
    runs: Sequence[Sequence[int] | np.ndarray], *, percentile: float = 0.9
) -> RepetitionSummary:
    """Run-to-run variation: the coefficient of variation of the repeats' medians (and of
    their ``percentile``), which says how far one run can be trusted to reproduce."""
    if len(runs) < 2:
        raise ValueError(f"run-to-run variation needs at least two runs, got {len(runs)}")
    medians = np.array([np.median(run) for run in runs], dtype=np.float64)
    headlines = np.array([np.quantile(run, percentile) for run in runs], dtype=np.float64)
    outlier, deviation = _farthest(medians)
    return RepetitionSummary(
        count=len(runs),
        percentile=percentile,
        medians_ns=tuple(medians.tolist()),
        headlines_ns=tuple(headlines.tolist()),
        median_mean_ns=float(medians.mean()),
        median_std_ns=float(medians.std(ddof=1)),
        median_cv=_cv(medians),
        headline_cv=_cv(headlines),
        outlier_run=outlier + 1,
        outlier_deviation=deviation,
    )


def _farthest(values: np.ndarray) -> tuple[int, float]:
    """The index of the value farthest from the median of the others, and how far, relative
    to that median: the others', so that one wild run does not hide behind itself."""
    deviations = []
    for index in range(values.size):
        others = float(np.median(np.delete(values, index)))
        deviations.append((values[index] - others) / others if others > 0 else 0.0)
    farthest = int(np.argmax(np.abs(deviations)))
    return farthest, float(deviations[farthest])


def _cv(values: np.ndarray) -> float:
    mean = float(values.mean())
    return float(values.std(ddof=1)) / mean if mean > 0 else 0.0


class LatencyComparison(Frozen):
    """Candidate against baseline. ``difference_ns`` is candidate minus baseline median, so
    positive means the candidate is slower. ``significant`` when the bootstrap interval of the
    difference excludes zero; the Mann-Whitney p-value and Cliff's delta (the probability a
    candidate latency exceeds a baseline one, minus the reverse) are reported beside it."""

    baseline_median_ns: float
    candidate_median_ns: float
    difference_ns: float
    relative_difference: float
    interval: Interval
    significant: bool
    p_value: float
    effect_size: float
    magnitude: Magnitude
    faster: Literal["baseline", "candidate"] | None


def compare(
    baseline_ns: Sequence[int] | np.ndarray,
    candidate_ns: Sequence[int] | np.ndarray,
    *,
    confidence: float = 0.95,
    resamples: int = 1000,
    seed: int = 0,
) -> LatencyComparison:
    baseline_taken = np.asarray(baseline_ns, dtype=np.float64)
    candidate_taken = np.asarray(candidate_ns, dtype=np.float64)
    if baseline_taken.size < 2 or candidate_taken.size < 2:
        raise ValueError("a comparison needs at least two latencies on each side")
    # Correlated latencies claim fewer independent values (statistics.effective_size).
    _, baseline_size = effective_size(baseline_taken)
    _, candidate_size = effective_size(candidate_taken)
    baseline, candidate = np.sort(baseline_taken), np.sort(candidate_taken)
    base_median = float(np.median(baseline))
    cand_median = float(np.median(candidate))
    # Independent samples: bootstrap each median on its own and difference the replicates.
    differences = bootstrap_quantile(
        candidate, 0.5, confidence=confidence, resamples=resamples, seed=seed, size=candidate_size
    ) - bootstrap_quantile(
        baseline, 0.5, confidence=confidence, resamples=resamples, seed=seed + 1, size=baseline_size
    )
    tail = (1 - confidence) / 2
    low, high = (float(v) for v in np.quantile(differences, [tail, 1 - tail]))
    significant = low > 0 or high < 0
    u_candidate, p_value = _mann_whitney(candidate, baseline)
    delta = 2 * u_candidate / (candidate.size * baseline.size) - 1
    difference = cand_median - base_median
    return LatencyComparison(
        baseline_median_ns=base_median,
        candidate_median_ns=cand_median,
        difference_ns=difference,
        relative_difference=difference / base_median if base_median else 0.0,
        interval=Interval(low=low, high=high, confidence=confidence),
        significant=significant,
        p_value=p_value,
        effect_size=delta,
        magnitude=_magnitude(delta),
        faster=None if not significant else ("baseline" if difference > 0 else "candidate"),
    )


def _mann_whitney(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """U of ``x`` (pairs with x > y, ties counting half) and the two-sided p-value, from the
    normal approximation with tie and continuity corrections (as scipy's default for large
    samples), so numpy alone suffices."""
    n_x, n_y = x.size, y.size
    n = n_x + n_y
    pooled = np.concatenate([x, y])
    _, inverse, counts = np.unique(pooled, return_inverse=True, return_counts=True)
    # Average rank of each distinct value: the ranks its tied copies share.
    ends = np.cumsum(counts)
    average_ranks = ends - (counts - 1) / 2
    rank_sum_x = float(average_ranks[inverse[:n_x]].sum())
    u_x = rank_sum_x - n_x * (n_x + 1) / 2
    mean = n_x * n_y / 2
    ties = float(((counts.astype(np.float64) ** 3) - counts).sum())
    variance = n_x * n_y / 12 * ((n + 1) - ties / (n * (n - 1)))
    if variance <= 0:
        return u_x, 1.0
    z = (abs(u_x - mean) - 0.5) / variance**0.5
    return u_x, min(1.0, 2 * (1 - NormalDist().cdf(max(z, 0.0))))


def _magnitude(delta: float) -> Magnitude:
    for bound, name in _MAGNITUDES:
        if abs(delta) >= bound:
            return name
    return "negligible"
