"""Statistics of raw latencies: percentiles that say whether enough queries back them,
bootstrap intervals, and comparisons of repeated runs."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from shared.measurement import (
    compare,
    min_queries_for_percentile,
    summarize_latencies,
    summarize_repetitions,
)
from shared.measurement.statistics import bootstrap_quantile, effective_size

# The measurement core's statistics ----------------------------------------------------------


@pytest.mark.parametrize(("percentile", "queries"), [(0.9, 64), (0.99, 662), (0.999, 6636)])
def test_minimum_queries_for_a_percentile_follow_mlperf_early_stopping(
    percentile: float, queries: int
) -> None:
    assert min_queries_for_percentile(percentile) == queries


def test_a_p99_from_a_hundred_queries_is_labelled_a_bound_not_an_estimate() -> None:
    stats = summarize_latencies(list(range(1, 101)), duration_ns=5050, headline_percentile=0.99)
    assert stats.headline.kind == "bound"
    assert stats.headline.min_queries == 662
    assert stats.headline.value_ns == pytest.approx(99.01)  # the value is still there
    assert stats.percentile(0.9).kind == "estimate"
    assert stats.percentile(0.999).kind == "bound"


def test_summary_statistics_of_raw_latencies() -> None:
    latencies = np.random.default_rng(1).lognormal(13, 0.4, 5000).astype(np.int64)
    stats = summarize_latencies(latencies, duration_ns=int(latencies.sum()))
    assert stats.count == 5000
    assert stats.mean_ns == pytest.approx(latencies.mean())
    assert stats.std_ns == pytest.approx(latencies.std(ddof=1))
    assert stats.cv == pytest.approx(stats.std_ns / stats.mean_ns)
    assert (stats.min_ns, stats.max_ns) == (latencies.min(), latencies.max())
    for p in (0.5, 0.9, 0.95, 0.99, 0.999):
        assert stats.percentile(p).value_ns == pytest.approx(np.quantile(latencies, p))
    median = stats.median
    assert median.interval is not None
    assert median.interval.low <= median.value_ns <= median.interval.high
    # Queries back to back over exactly the sum of their latencies: 1 / mean latency.
    assert stats.throughput.per_s == pytest.approx(1e9 / latencies.mean())
    interval = stats.throughput.interval
    assert interval.low < stats.throughput.per_s < interval.high


def test_exact_order_statistic_bootstrap_matches_resampling_by_brute_force() -> None:
    values = np.sort(np.random.default_rng(2).exponential(1.0, 41))
    exact = bootstrap_quantile(values, 0.9, confidence=0.95, resamples=20_000, seed=3)
    resamples = np.random.default_rng(4).choice(values, size=(20_000, values.size))
    brute = np.quantile(resamples, 0.9, axis=1)
    assert exact.mean() == pytest.approx(brute.mean(), rel=0.01)
    assert exact.std() == pytest.approx(brute.std(), rel=0.05)
    assert np.quantile(exact, [0.025, 0.975]) == pytest.approx(
        np.quantile(brute, [0.025, 0.975]), rel=0.03
    )


def test_bootstrap_interval_of_the_median_covers_the_true_median_at_about_the_nominal_rate() -> (
    None
):
    rng = np.random.default_rng(5)
    true_median = math.log(2)  # of the unit exponential
    trials = 400
    covered = 0
    for trial in range(trials):
        sample = rng.exponential(1.0, 201)
        interval = summarize_latencies(sample, duration_ns=1, seed=trial).median.interval
        assert interval is not None
        covered += interval.low <= true_median <= interval.high
    # 95% nominal; with 400 trials the binomial standard error is about 1.1%.
    assert 0.91 <= covered / trials <= 0.99


def test_bootstrap_intervals_are_seeded_and_fast_on_a_hundred_thousand_latencies() -> None:
    latencies = np.random.default_rng(6).lognormal(14, 0.5, 100_000)
    start = time.perf_counter()
    first = summarize_latencies(latencies, duration_ns=int(latencies.sum()), seed=9)
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0  # about 30 ms on a quiet core
    again = summarize_latencies(latencies, duration_ns=int(latencies.sum()), seed=9)
    assert first.headline.interval == again.headline.interval
    assert first.headline.interval is not None
    # 100 000 queries pin the p90 down to well under a percent.
    assert first.headline.interval.half_width < 0.01 * first.headline.value_ns


def test_server_throughput_interval_is_the_poisson_counts() -> None:
    stats = summarize_latencies([1_000_000] * 10_000, duration_ns=10**10, open_loop=True)
    assert stats.throughput.per_s == pytest.approx(1000)
    # 10 000 arrivals: +-1.96 * sqrt(10 000) = +-196 queries over 10 s.
    assert stats.throughput.interval.low == pytest.approx(1000 - 19.6, rel=1e-3)
    assert stats.throughput.interval.high == pytest.approx(1000 + 19.6, rel=1e-3)


# Repetitions and comparisons ----------------------------------------------------------------


def test_repeats_summarise_their_spread() -> None:
    rng = np.random.default_rng(7)
    runs = [rng.normal(1e6 * scale, 1e4, 2000) for scale in (1.0, 1.1, 0.9)]
    summary = summarize_repetitions(runs)
    assert summary.count == 3
    assert summary.median_mean_ns == pytest.approx(1e6, rel=0.01)
    assert summary.median_cv == pytest.approx(0.1, rel=0.05)
    with pytest.raises(ValueError, match="at least two"):
        summarize_repetitions(runs[:1])


def test_the_repeat_farthest_from_the_others_is_named() -> None:
    rng = np.random.default_rng(9)
    runs = [rng.normal(1e6 * scale, 1e3, 2000) for scale in (1.0, 1.01, 0.99, 1.3, 1.0)]
    summary = summarize_repetitions(runs)
    assert summary.outlier_run == 4  # from 1, as the CLI numbers them
    assert summary.outlier_deviation == pytest.approx(0.3, abs=0.01)
    quiet = summarize_repetitions([rng.normal(1e6, 1e3, 2000) for _ in range(4)])
    assert abs(quiet.outlier_deviation) < 0.01


def test_the_same_distribution_twice_is_not_a_significant_difference() -> None:
    rng = np.random.default_rng(8)
    result = compare(rng.lognormal(14, 0.3, 3000), rng.lognormal(14, 0.3, 3000))
    assert not result.significant
    assert result.faster is None
    assert result.interval.low < 0 < result.interval.high
    assert result.magnitude == "negligible"


def test_a_three_percent_slower_candidate_is_significant_with_its_effect_size() -> None:
    rng = np.random.default_rng(9)
    baseline = rng.lognormal(14, 0.05, 3000)
    candidate = baseline * 1.03 + rng.normal(0, 1000, 3000)
    result = compare(baseline, candidate)
    assert result.significant
    assert result.faster == "baseline"
    assert result.relative_difference == pytest.approx(0.03, abs=0.01)
    assert result.interval.low > 0
    assert result.p_value < 1e-6
    assert 0 < result.effect_size <= 1
    assert result.magnitude in ("small", "medium", "large")


def test_mann_whitney_agrees_with_scipy_where_it_is_installed() -> None:
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(10)
    # Rounded, so there are ties to correct for.
    x, y = np.round(rng.lognormal(0, 0.3, 400) * 50), np.round(rng.lognormal(0.05, 0.3, 500) * 50)
    ours = compare(x, y)
    theirs = stats.mannwhitneyu(y, x, method="asymptotic")
    assert ours.p_value == pytest.approx(theirs.pvalue, rel=1e-9)
    assert ours.effect_size == pytest.approx(2 * theirs.statistic / (x.size * y.size) - 1)


def _ar1(rng: np.random.Generator, n: int, rho: float) -> np.ndarray:
    """n values of a stationary AR(1) process around 1 ms: each ``rho`` times the last plus
    noise, as a queue or a noisy neighbour makes successive latencies."""
    values = np.empty(n)
    values[0] = rng.normal() / math.sqrt(1 - rho**2)
    for i in range(1, n):
        values[i] = rho * values[i - 1] + rng.normal()
    return 1e6 + 1e4 * values


def test_correlated_latencies_get_intervals_of_their_effective_sample_size() -> None:
    rng = np.random.default_rng(11)
    trials, covered, naive_covered = 200, 0, 0
    for trial in range(trials):
        sample = _ar1(rng, 400, 0.8)
        stats = summarize_latencies(sample, duration_ns=int(sample.sum()), seed=trial)
        assert stats.autocorrelation is not None
        assert stats.effective_count is not None  # said in the result
        assert stats.effective_count < 400
        interval = stats.median.interval
        assert interval is not None
        covered += interval.low <= 1e6 <= interval.high
        # The same bootstrap as if the 400 values were independent.
        naive = bootstrap_quantile(np.sort(sample), 0.5, confidence=0.95, resamples=1000, seed=0)
        low, high = np.quantile(naive, [0.025, 0.975])
        naive_covered += low <= 1e6 <= high
    # n (1 - 0.8) / (1 + 0.8): about 44 effective values of 400; as if independent, the
    # interval is a third as wide as it should be and misses the true median half the time.
    assert naive_covered / trials < 0.7
    assert covered / trials >= 0.88


def test_independent_latencies_keep_every_value_in_their_intervals() -> None:
    sample = np.random.default_rng(12).lognormal(13, 0.4, 2000)
    stats = summarize_latencies(sample, duration_ns=int(sample.sum()))
    assert stats.autocorrelation is not None
    assert abs(stats.autocorrelation) < 1.96 / math.sqrt(2000)
    assert stats.effective_count is None, "white noise: the intervals use every value"


def test_the_effective_size_follows_the_lag_one_autocorrelation() -> None:
    rng = np.random.default_rng(13)
    sample = _ar1(rng, 20_000, 0.5)
    rho, effective = effective_size(sample)
    assert rho == pytest.approx(0.5, abs=0.03)
    assert effective == pytest.approx(20_000 * (1 - rho) / (1 + rho), abs=1)
    assert effective_size(np.arange(2.0)) == (None, 2)  # too few to tell
    assert effective_size(np.full(10, 3.0)) == (None, 10)  # nothing varies


def test_a_comparison_of_correlated_runs_is_not_too_sure() -> None:
    rng = np.random.default_rng(14)
    # Two runs of one AR(1) process: the same system, measured twice.
    significant = sum(
        compare(_ar1(rng, 400, 0.9), _ar1(rng, 400, 0.9), seed=trial).significant
        for trial in range(60)
    )
    assert significant <= 9, "about 5 % of same-system pairs, not half of them"
