"""Statistics of raw per-query latencies, with their uncertainty.

Percentiles use numpy's default (linear interpolation between order statistics). Their
confidence intervals come from the nonparametric bootstrap, simulated exactly and cheaply:
the k-th smallest of n values resampled with replacement is ``sorted[ceil(n * U) - 1]`` with
``U`` the k-th smallest of n uniforms, which is Beta(k, n - k + 1) distributed. So each
resample costs two Beta draws instead of n draws and a sort, and 1 000 resamples of 100 000
latencies take about a millisecond after one sort.

The bootstrap treats the values as independent, which successive latencies need not be: a
server's queue, a cache warming, a noisy neighbour make a slow query likelier after a slow
one, and intervals from every value as if independent are then too narrow. So the values'
lag-1 autocorrelation r is measured in the order they were taken and, where it is clearly
positive (beyond the 95 % band of white noise, 1.96 / sqrt(n)), the intervals are those of
the effective sample size n_eff = n (1 - r) / (1 + r) (an AR(1) process's, the usual
correction): the bootstrap draws resamples of n_eff values (the m-out-of-n bootstrap, exact
through the same order statistics) and the throughput's interval divides by sqrt(n_eff). A
result says so: ``autocorrelation`` and ``effective_count`` in its statistics.

What they make (``LatencyStatistics`` and its parts) travels in results and is defined with
them (shared.messages.statistics).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

from shared.messages.statistics import Interval, LatencyStatistics, Percentile, Throughput

__all__ = [
    "BOUND_LEGEND",
    "BOUND_MARK",
    "REPORTED_PERCENTILES",
    "Interval",
    "LatencyStatistics",
    "Percentile",
    "Throughput",
    "bootstrap_quantile",
    "effective_size",
    "lag1_autocorrelation",
    "min_queries_for_percentile",
    "summarize_latencies",
]

REPORTED_PERCENTILES = (0.5, 0.9, 0.95, 0.99, 0.999)
# How every table, page and report marks a percentile of kind "bound" (fewer queries than
# ``min_queries_for_percentile``), and the legend that says once which way it errs: what the
# queries showed is a floor, the percentile itself may be higher.
BOUND_MARK = "≥"
BOUND_LEGEND = (
    f"{BOUND_MARK} x: a bound: too few queries for that percentile (MLPerf's early-stopping "
    "minimum), so the true value may be higher"
)
# LoadGen's early-stopping confidence (loadgen/results.cc, PerformanceSummary::EarlyStopping).
EARLY_STOPPING_CONFIDENCE = 0.99


def min_queries_for_percentile(p: float, confidence: float = EARLY_STOPPING_CONFIDENCE) -> int:
    """MLPerf's early-stopping minimum: 64 queries for p90, 662 for p99, 6 636 for p99.9.

    LoadGen (loadgen/early_stopping.cc, results.cc) allows one over-latency query (t = 1) and
    asks for the smallest h under-latency queries with I_p(h, t + 1) <= 1 - confidence, then
    requires h + 1 queries. For t = 1 the regularised incomplete beta has the closed form
    I_p(h, 2) = p^h * (1 + h * (1 - p)); it decreases in h, so a binary search finds h.
    """
    if not 0 < p < 1:
        raise ValueError(f"percentile must be in (0, 1), got {p}")

    def passes(h: int) -> bool:
        return math.exp(h * math.log(p)) * (1 + h * (1 - p)) <= 1 - confidence

    low, high = 1, 2
    while not passes(high):
        low, high = high, high * 2
    while low < high:
        middle = (low + high) // 2
        if passes(middle):
            high = middle
        else:
            low = middle + 1
    return low + 1


def lag1_autocorrelation(values: np.ndarray) -> float | None:
    """The lag-1 autocorrelation of ``values`` in the order they were taken; None for fewer
    than three values or values that do not vary."""
    if values.size < 3:
        return None
    centred = values - values.mean()
    power = float(np.dot(centred, centred))
    if power <= 0:
        return None
    return float(np.dot(centred[:-1], centred[1:])) / power


def effective_size(values: np.ndarray) -> tuple[float | None, int]:
    """The lag-1 autocorrelation of ``values`` (in the order taken) and the sample size their
    intervals may claim: n (1 - r) / (1 + r) where r is beyond white noise's 95 % band
    (1.96 / sqrt(n)), at least 2; else n."""
    n = int(values.size)
    rho = lag1_autocorrelation(values)
    if rho is None or rho <= _WHITE_NOISE_Z / math.sqrt(n):
        return rho, n
    return rho, max(2, min(n, round(n * (1 - rho) / (1 + rho))))


# The normal quantile of white noise's two-sided 95 % band for an autocorrelation.
_WHITE_NOISE_Z = 1.96


def bootstrap_quantile(
    sorted_ns: np.ndarray,
    p: float,
    *,
    confidence: float,
    resamples: int,
    seed: int,
    size: int | None = None,
) -> np.ndarray:
    """``resamples`` bootstrap replicates of the linear-interpolated ``p`` quantile of
    ``sorted_ns`` (ascending), drawn exactly through order statistics (see module doc), each
    of a resample of ``size`` values (default: as many as there are; fewer for correlated
    values, whose effective sample size is smaller)."""
    n = sorted_ns.size
    if n < 2:
        return np.full(resamples, float(sorted_ns[0]) if n else math.nan)
    m = n if size is None else max(2, size)
    position = (m - 1) * p
    below = math.floor(position)
    fraction = position - below
    rank = below + 1  # 1-based rank of the lower order statistic; rank + 1 <= m as p < 1
    rng = np.random.default_rng(seed)
    u_low = rng.beta(rank, m - rank + 1, size=resamples)
    # The next order statistic: the smallest of the m - rank uniforms above u_low.
    u_high = u_low + (1 - u_low) * rng.beta(1, m - rank, size=resamples)
    low_values = sorted_ns[_rank_index(u_low, n)]
    high_values = sorted_ns[_rank_index(u_high, n)]
    replicates: np.ndarray = low_values + fraction * (high_values - low_values)
    return replicates


def _rank_index(u: np.ndarray, n: int) -> np.ndarray:
    index: np.ndarray = np.clip(np.ceil(n * u).astype(np.int64) - 1, 0, n - 1)
    return index


def _interval(replicates: np.ndarray, confidence: float) -> Interval:
    tail = (1 - confidence) / 2
    low, high = np.quantile(replicates, [tail, 1 - tail])
    return Interval(low=float(low), high=float(high), confidence=confidence)


def summarize_latencies(
    latencies_ns: Sequence[int] | np.ndarray,
    *,
    duration_ns: int,
    samples_per_query: int = 1,
    headline_percentile: float = 0.9,
    open_loop: bool = False,
    confidence: float = 0.95,
    resamples: int = 1000,
    seed: int = 0,
) -> LatencyStatistics:
    """Everything dlscope reports about one timed phase's raw latencies.

    ``open_loop`` is for the server scenario, where arrivals (a Poisson process) set the
    throughput: its interval is then the Poisson count's. Otherwise queries run back to back
    and throughput's interval follows from the mean per-query time's (normal approximation,
    which the bootstrap of a mean converges to).
    """
    taken = np.asarray(latencies_ns, dtype=np.float64)
    values = np.sort(taken)
    n = int(values.size)
    if n == 0:
        raise ValueError("no latencies to summarise")
    if duration_ns <= 0:
        raise ValueError(f"a timed phase lasts a positive time, got {duration_ns} ns")
    rho, effective = effective_size(taken)
    mean = float(values.mean())
    std = float(values.std(ddof=1)) if n > 1 else 0.0

    def percentile(p: float, *, with_interval: bool) -> Percentile:
        needed = min_queries_for_percentile(p)
        interval = None
        if with_interval:
            replicates = bootstrap_quantile(
                values, p, confidence=confidence, resamples=resamples, seed=seed, size=effective
            )
            interval = _interval(replicates, confidence)
        return Percentile(
            percentile=p,
            value_ns=float(np.quantile(values, p)),
            kind="estimate" if n >= needed else "bound",
            min_queries=needed,
            interval=interval,
        )

    return LatencyStatistics(
        count=n,
        samples_per_query=samples_per_query,
        duration_ns=duration_ns,
        mean_ns=mean,
        std_ns=std,
        cv=std / mean if mean > 0 else 0.0,
        min_ns=float(values[0]),
        max_ns=float(values[-1]),
        median=percentile(0.5, with_interval=True),
        headline=percentile(headline_percentile, with_interval=True),
        percentiles=tuple(percentile(p, with_interval=False) for p in REPORTED_PERCENTILES),
        throughput=_throughput(
            n, samples_per_query, duration_ns, std, open_loop, confidence, effective
        ),
        autocorrelation=rho,
        effective_count=effective if effective < n else None,
    )


def _throughput(
    n: int,
    samples_per_query: int,
    duration_ns: int,
    std_ns: float,
    open_loop: bool,
    c: float,
    effective: int,
) -> Throughput:
    z = NormalDist().inv_cdf((1 + c) / 2)
    seconds = duration_ns / 1e9
    rate = n * samples_per_query / seconds
    high: float | None
    if open_loop:
        spread = z * math.sqrt(n) * samples_per_query / seconds
        low, high = rate - spread, rate + spread
    else:
        mean_cycle_ns = duration_ns / n
        half = z * std_ns / math.sqrt(effective)
        low = samples_per_query * 1e9 / (mean_cycle_ns + half)
        high = samples_per_query * 1e9 / (mean_cycle_ns - half) if half < mean_cycle_ns else None
    return Throughput(per_s=rate, interval=Interval(low=max(low, 0.0), high=high, confidence=c))
