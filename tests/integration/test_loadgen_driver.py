"""The scenarios driven through MLCommons LoadGen: its own logs, its own verdict, parsed."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from shared.measurement import MultiStream, Offline, Server, SingleStream, WarmupSettings
from shared.measurement.loadgen import DETAIL_FILE, SUMMARY_FILE, parse_summary, run_loadgen

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
