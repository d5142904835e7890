"""The scenarios driven through MLCommons LoadGen: its own logs, its own verdict, parsed."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from shared.errors import ConfigurationError
from shared.measurement import MultiStream, Offline, Server, SingleStream, WarmupSettings
from shared.measurement.loadgen import (
    DETAIL_FILE,
    SUMMARY_FILE,
    TokenBounds,
    parse_summary,
    run_loadgen,
    run_loadgen_generation,
)

QUICK_WARMUP = WarmupSettings(window_queries=8, max_windows=3)


class Model:
    """A framework call of about ``seconds`` per query (sleeping, so it releases the GIL as
    framework runtimes do)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.calls: list[list[int]] = []

    def __call__(self, indices: Sequence[int]) -> None:
        self.calls.append(list(indices))
        time.sleep(self.seconds)


def test_single_stream_on_a_one_millisecond_model_is_valid_with_both_logs(tmp_path: Path) -> None:
    # Short, yet valid: LoadGen needs min_query_count and min_duration met and, for p90,
    # at least 64 queries of early-stopping evidence; 300 queries of ~1 ms take ~0.4 s.
    scenario = SingleStream(min_query_count=300, min_duration_s=0.3, warmup=QUICK_WARMUP)
    result = run_loadgen(scenario, Model(0.001), output_dir=tmp_path, sample_count=16)
    assert (tmp_path / SUMMARY_FILE).is_file()
    assert (tmp_path / DETAIL_FILE).is_file()
    [phase] = result.phases
    assert result.valid
    assert phase.summary["result"] == "VALID"
    assert phase.summary["scenario"] == "SingleStream"
    assert phase.summary["percentile"] == 0.9
    assert 1_000_000 <= phase.summary["percentile_latency_ns"] < 50_000_000
    assert phase.summary["min_queries_satisfied"] is True
    assert phase.warmup.window_medians_ns  # warmed up before LoadGen started


def test_offline_on_a_one_millisecond_batch_is_valid_and_reports_samples_per_second(
    tmp_path: Path,
) -> None:
    model = Model(0.001)
    scenario = Offline(batch_size=8, min_sample_count=512, min_duration_s=0.3, warmup=QUICK_WARMUP)
    result = run_loadgen(scenario, model, output_dir=tmp_path, sample_count=64)
    [phase] = result.phases
    assert phase.valid
    assert phase.summary["scenario"] == "Offline"
    # 8 samples per ~1 ms call: no more than 8 000 samples/s, and not far below.
    assert 1000 < phase.summary["samples_per_second"] < 8000
    # Batches of 8; LoadGen's sample count need not divide by 8, so the last may be short.
    *full, last = model.calls
    assert all(len(call) == 8 for call in full)
    assert 1 <= len(last) <= 8


def test_multi_stream_queries_reach_the_model_whole(tmp_path: Path) -> None:
    model = Model(0.0005)
    scenario = MultiStream(
        samples_per_query=4, min_query_count=700, min_duration_s=0.2, warmup=QUICK_WARMUP
    )
    result = run_loadgen(scenario, model, output_dir=tmp_path, sample_count=8)
    assert result.phases[0].summary["percentile"] == 0.99
    assert result.valid
    assert all(len(call) == 4 and len(set(call)) == 4 for call in model.calls)


def test_server_reports_its_p99_against_the_bound(tmp_path: Path) -> None:
    scenario = Server(
        target_qps=1000,
        latency_bound_ms=20,
        min_query_count=700,
        min_duration_s=0.5,
        warmup=QUICK_WARMUP,
    )
    result = run_loadgen(scenario, Model(0.0002), output_dir=tmp_path, sample_count=4)
    summary = result.phases[0].summary
    assert summary["scenario"] == "Server"
    assert summary["percentile"] == 0.99
    assert summary["percentile_latency_ns"] > 200_000
    assert summary["result"] in ("VALID", "INVALID")
    assert summary["completed_samples_per_second"] == pytest.approx(1000, rel=0.25)


def test_a_failing_model_fails_the_run_instead_of_hanging_it(tmp_path: Path) -> None:
    def broken(_: Sequence[int]) -> None:
        raise RuntimeError("the framework fell over")

    with pytest.raises(RuntimeError, match="fell over"):
        run_loadgen(
            SingleStream(
                min_query_count=10, min_duration_s=0, warmup=WarmupSettings(max_windows=0)
            ),
            broken,
            output_dir=tmp_path,
        )


class Generation:
    """A generation of ``tokens`` tokens: ``first_s`` to the first (the prefill), then
    ``each_s`` per token; sleeping, as a framework call releases the GIL."""

    def __init__(self, first_s: float, each_s: float, tokens: int) -> None:
        self.first_s, self.each_s, self.tokens = first_s, each_s, tokens
        self.issued: list[int] = []

    def __call__(self, index: int, issued_ns: int, first_token: Callable[[], None]) -> int:
        self.issued.append(issued_ns)
        time.sleep(self.first_s)
        first_token()
        for _ in range(self.tokens - 1):
            time.sleep(self.each_s)
        return self.tokens


# Slow: LoadGen's server scenario holds its minimum duration, twice over (ten seconds).
@pytest.mark.slow
def test_a_generation_server_run_is_judged_by_ttft_and_tpot(tmp_path: Path) -> None:
    # ~10 ms to the first token, then 2 ms a token: at 20 requests/s the median TTFT is the
    # prefill's. Bounds far above both meet; a TPOT bound under 2 ms a token cannot be met.
    scenario = Server(target_qps=20, min_query_count=80, min_duration_s=0.5, warmup=QUICK_WARMUP)
    model = Generation(0.010, 0.002, 8)
    met = run_loadgen_generation(
        scenario,
        model,
        output_dir=tmp_path / "met",
        bounds=TokenBounds(ttft_ms=500, tpot_ms=50, percentile=0.9),
        sample_count=4,
    )
    summary = met.phases[0].summary
    assert summary["result"] == "VALID", summary.get("recommendations")
    assert summary["percentile"] == 0.9
    assert 10e6 <= summary["ttft_percentile_ns"] < 500e6
    assert 2e6 <= summary["tpot_percentile_ns"] < 50e6
    # LoadGen counted the tokens it was told of: 8 per request.
    ratio = summary["completed_tokens_per_second"] / summary["completed_samples_per_second"]
    assert ratio == pytest.approx(8, rel=0.05)
    assert met.phases[0].framework_calls is not None
    assert met.phases[0].framework_calls >= scenario.min_query_count

    missed = run_loadgen_generation(
        scenario,
        model,
        output_dir=tmp_path / "missed",
        bounds=TokenBounds(ttft_ms=500, tpot_ms=1, percentile=0.9),
        sample_count=4,
    )
    summary = missed.phases[0].summary
    assert summary["result"] == "INVALID"
    assert any("TPOT" in line for line in summary["recommendations"])


def test_a_generation_single_stream_run_reports_loadgen_token_percentiles(tmp_path: Path) -> None:
    model = Generation(0.004, 0.001, 4)
    result = run_loadgen_generation(
        SingleStream(min_query_count=80, min_duration_s=0.2, warmup=QUICK_WARMUP),
        model,
        output_dir=tmp_path,
        bounds=TokenBounds(ttft_ms=None, tpot_ms=None, percentile=0.9),
        sample_count=4,
    )
    summary = result.phases[0].summary
    assert summary["scenario"] == "SingleStream"
    assert summary["percentile"] == 0.9
    assert 4e6 <= summary["ttft_percentile_ns"] < summary["percentile_latency_ns"]
    # A stream issues each request as the last completes: the issue times never overlap a
    # generation of ~7 ms.
    gaps = [b - a for a, b in zip(model.issued, model.issued[1:], strict=False)]
    assert min(gaps) >= 6_000_000


def test_a_generation_server_run_without_token_bounds_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="ttft_bound_ms or tpot_bound_ms"):
        run_loadgen_generation(
            Server(target_qps=10, warmup=QUICK_WARMUP),
            Generation(0.001, 0.001, 2),
            output_dir=tmp_path,
            bounds=TokenBounds(ttft_ms=None, tpot_ms=None, percentile=0.99),
        )


def test_a_failing_generation_fails_the_run_instead_of_hanging_it(tmp_path: Path) -> None:
    calls = []

    def broken(index: int, issued_ns: int, first_token: Callable[[], None]) -> int:
        # The cold query before LoadGen starts succeeds; LoadGen's own queries fail.
        calls.append(index)
        if len(calls) > 1:
            first_token()
            raise RuntimeError("the decoder fell over")
        return 1

    with pytest.raises(RuntimeError, match="decoder fell over"):
        run_loadgen_generation(
            Server(
                target_qps=50,
                min_query_count=10,
                min_duration_s=0,
                warmup=WarmupSettings(max_windows=0),
            ),
            broken,
            output_dir=tmp_path,
            bounds=TokenBounds(ttft_ms=100, tpot_ms=None, percentile=0.9),
        )
    assert len(calls) >= 2, "LoadGen's own query failed, not the cold one"


def test_a_token_summary_gives_ttft_tpot_and_loadgens_reasons() -> None:
    summary = parse_summary(
        "Scenario : Server\n"
        "Completed samples per second    : 20.98\n"
        "Completed tokens per second: 171.77\n"
        "Result is : INVALID\n"
        "  Performance constraints satisfied : NO\n"
        "Recommendations:\n"
        " * TTFT constrain not met: Reduce target QPS to improve latency.\n"
        "TTFT Early Stopping Result:\n"
        "\n"
        "90.00 percentile latency (ns)   : 62376426\n"
        "90.00 percentile first token latency (ns)   : 46938285\n"
        "90.00 percentile time to output token (ns)   : 2185479\n",
        percentile=0.9,
    )
    assert summary["result"] == "INVALID"
    assert summary["ttft_percentile_ns"] == 46938285
    assert summary["tpot_percentile_ns"] == 2185479
    assert summary["completed_tokens_per_second"] == 171.77
    assert summary["recommendations"] == [
        "TTFT constrain not met: Reduce target QPS to improve latency."
    ]


def test_the_summary_parses_into_a_dict_with_the_verdict() -> None:
    summary = parse_summary(
        "================================================\n"
        "MLPerf Results Summary\n"
        "SUT name : PySUT\n"
        "Scenario : SingleStream\n"
        "90.0th percentile latency (ns) : 1083138\n"
        "Result is : INVALID\n"
        "  Min duration satisfied : Yes\n"
        "  Early stopping satisfied: NO\n"
        " * Early stopping 90.0th percentile estimate: 1297388\n"
        "QPS w/ loadgen overhead         : 796.72\n"
        "99.00 percentile latency (ns)   : 4709222\n"
    )
    assert summary["result"] == "INVALID"
    assert (summary["percentile"], summary["percentile_latency_ns"]) == (0.9, 1083138.0)
    assert summary["min_duration_satisfied"] is True
    assert summary["early_stopping_satisfied"] is False
    assert summary["early_stopping_90_0th_percentile_estimate"] == 1297388
    assert summary["qps_w_loadgen_overhead"] == 796.72
    assert summary["99_00_percentile_latency_ns"] == 4709222
