"""Every benchmark under bench/ run once at a tiny scale: it still runs end to end and still
produces its figures (the keys are there, the figures are numbers). What the figures say is
BENCHMARKS.md's, measured at full scale with ``python -m bench``; nothing here judges them.

Each smoke run reads what the session has built already (the digits CNN, SmolLM2, the
llama.cpp and vLLM servers: tests/conftest.py) rather than building its own, and is marked
by what it needs, so ``make test-fast`` keeps those that need no service, server or zoo.
"""

from __future__ import annotations

import asyncio
import math
import subprocess
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import Any

import pytest

from bench import BENCHMARKS
from dlscope.zoo import BuiltModel
from harness.otlp import OtlpReceiver
from shared.messages import Scenario
from tests.conftest import opencl_problem

# What bench.common.percentiles reports of a set of latencies.
PERCENTILES = ("count", "mean_ms", "p50_ms", "p90_ms", "p99_ms", "max_ms")


def run(benchmark: Coroutine[Any, Any, dict[str, Any]]) -> dict[str, Any]:
    result = asyncio.run(benchmark)
    assert isinstance(result, dict)
    if isinstance(result.get("skipped"), str):  # what it needs is not here: it says what
        pytest.skip(result["skipped"])
    return result


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def numbers(figures: Mapping[str, Any], *keys: str) -> None:
    """Each of ``keys`` is in ``figures`` and is a number."""
    for key in keys:
        assert key in figures, f"no {key!r} among {sorted(figures)}"
        assert is_number(figures[key]), f"{key} = {figures[key]!r}"


def latencies(figures: Mapping[str, Any], count: int | None = None) -> None:
    """``figures`` are ``percentiles`` of at least one latency (``count`` of them if given)."""
    numbers(figures, *PERCENTILES)
    assert figures["count"] >= 1
    if count is not None:
        assert figures["count"] == count
    assert all(math.isfinite(figures[key]) for key in PERCENTILES)


def zoo_folder(built: list[BuiltModel]) -> Path:
    (folder,) = {model.path.parent for model in built}
    return folder


def test_every_benchmark_has_a_smoke_run() -> None:
    here = {name.removeprefix("test_") for name in globals() if name.startswith("test_")}
    assert set(BENCHMARKS) <= here, sorted(set(BENCHMARKS) - here)


@pytest.mark.rabbitmq
@pytest.mark.postgres
def test_dispatch() -> None:
    from bench import dispatch

    result = run(dispatch.run(3, warmup=1))
    latencies(result["post_to_worker_started"], count=3)
    latencies(result["post_to_202"], count=3)
    assert set(result["segments"]) == {"gateway", "scheduler", "worker"}
    for segment in result["segments"].values():
        latencies(segment, count=3)
    numbers(result["targets"], "p50_ms", "p99_ms")


@pytest.mark.rabbitmq
@pytest.mark.postgres
def test_recorder_throughput() -> None:
    from bench import recorder_throughput

    # Enough that the batched case commits more than once (its rate needs a span of time).
    result = run(recorder_throughput.suite(1, evaluations=200, patience_s=0))
    for name, _recorders, _batch in recorder_throughput.CASES:
        (one,) = result[name]
        numbers(
            one,
            "recorder_cpu_per_event_us",
            "events",
            "messages_published",
            "sustained_events_per_s",
            "wall_s_including_recorder_start",
            "stored",
            "lost",
            "duplicated",
            "streams_with_version_gaps",
            "machine_busy_before",
        )
        assert one["events"] == 1000  # five an evaluation
        numbers(result["median_events_per_s"], name)
        assert [is_number(v) for v in result["sustained_events_per_s"][name]] == [True]


@pytest.mark.rabbitmq
def test_recorder_drain() -> None:
    from bench import recorder_drain

    result = run(recorder_drain.run(5))  # its own PostgreSQL cluster, to stop: needs root
    numbers(
        result,
        "events",
        "backlog_in_queue_when_db_returned",
        "seconds_from_db_return_to_all_stored",
        "seconds_from_db_return_to_drained_queue",
        "seconds_from_db_return_to_first_stored",
        "events_per_s_while_draining",
        "events_per_s_from_first_stored",
        "dead_letters",
        "stored",
        "lost",
        "duplicated",
        "streams_with_version_gaps",
    )
    assert result["events"] == 25


def test_harness_overhead(digits_zoo: list[BuiltModel]) -> None:
    from bench import harness_overhead

    # The digits CNN alone: SqueezeNet on torch takes a minute of two busy cores.
    figures = harness_overhead.run(
        0.001, warmup=1, models=("digits-cnn",), zoo=zoo_folder(digits_zoo)
    )
    result = run(figures)
    assert result["skipped"] == {}, "onnxruntime and pytorch are both installed by make"
    assert set(result["cases"]) == {
        "onnxruntime/digits-cnn",
        "pytorch/digits-cnn",
        "pytorch/digits-cnn (torch.export)",
    }
    for name, case in result["cases"].items():
        for where in (case, case["isolated"]):
            numbers(where, "rounds", "queries_per_round")
            latencies(where["dlscope"], count=where["rounds"] * where["queries_per_round"])
            loops = ("bare", "bare_numpy_io") if name.startswith("pytorch") else ("bare",)
            for loop in loops:
                latencies(where[loop])
                numbers(
                    where[loop], "p50_ratio", "median_round_ratio", "median_round_difference_us"
                )
                assert all(is_number(v) for v in where[loop]["median_round_ratio_ci95"])
    numbers(result, "target_ratio")
    numbers(result["load_average_1m"], "before", "after")


def test_opencl() -> None:
    from bench import opencl

    if (why := opencl_problem("cpu")) is not None:
        pytest.skip(f"OpenCL runs nothing here: {why}")
    result = run(opencl.run({1: 1, 8: 1}, warmup=0))
    for batch in ("batch_1", "batch_8"):
        figures = result[batch]
        latencies(figures["opencl"], count=1)
        latencies(figures["onnxruntime"], count=1)
        numbers(
            figures,
            "ratio_p50",
            "opencl_images_per_s",
            "onnxruntime_images_per_s",
            "first_run_with_planning_s",
            "relative_error",
        )
        assert figures["opencl_ms_by_operator"]
        assert all(is_number(ms) for ms in figures["opencl_ms_by_operator"].values())


def test_loadgen_parity(tmp_path: Path) -> None:
    from bench import loadgen_parity

    result = run(loadgen_parity.run(1, 1, logs=tmp_path))
    for name in ("squeezenet", "sleep_2ms"):
        (one,) = result[name]["rounds"]
        numbers(one, "dlscope_p90_ms", "loadgen_p90_ms", "dlscope_p50_ms", "loadgen_p50_ms")
        for p in ("p90", "p50"):
            numbers(result[name], f"{p}_relative_gap_median", f"{p}_gap_us_median")
            assert all(is_number(v) for v in result[name][f"{p}_relative_gap_range"])
    assert (tmp_path / "squeezenet" / "round-0" / "mlperf_log_summary.txt").exists()


def test_server_capacity() -> None:
    from bench import server_capacity

    search = server_capacity.Search(
        start_qps=500, max_qps=1000, bisect_steps=1, attempts=1, trial_s=0.2
    )
    result = run(server_capacity.run(search, overhead_queries=1000, overhead_s=0.1))
    numbers(
        result["harness_overhead"],
        "queries",
        "outside_call_ns_per_query",
        "timer_floor_ns",
        "total_ns_per_query",
    )
    for issuer in ("inline", "thread"):
        capacity = result["server_capacity"][issuer]
        # A rate this machine cannot sustain is None, one it can is a number.
        for bound in ("highest_valid_qps", "first_invalid_qps"):
            assert capacity[bound] is None or is_number(capacity[bound])
        assert capacity["trials"]
        for trial in capacity["trials"]:
            assert trial["status"] in ("VALID", "INVALID")
            numbers(
                trial,
                "target_qps",
                "queries",
                "achieved_qps",
                "p99_ms",
                "issue_delay_p50_us",
                "issue_delay_p99_us",
                "late_share",
                "dispatch_ns_per_query",
            )
    numbers(result["targets"], "harness_overhead_ns_per_query", "server_qps")


@pytest.mark.rabbitmq
@pytest.mark.postgres
@pytest.mark.e2e
def test_fanout() -> None:
    from bench import fanout

    scenario = {"iterations": 8, "min_duration_s": 0, "warmup": 0}
    result = run(fanout.run(1, repeats=1, scenario=scenario))  # network namespaces: root
    assert result["hosts"] == 1
    numbers(result, "ratio_median")
    for key in ("wall_s", "slowest_member_s", "overhead_ms", "ratio"):
        assert [is_number(v) for v in result[key]] == [True], key
    (members,) = result["members_s"]
    assert [is_number(m) for m in members] == [True]


@pytest.mark.slow
def test_install_size() -> None:
    from bench import install_size
    from tests.e2e.test_fresh_install import UNREACHABLE

    try:
        result = run(install_size.run(()))  # the control plane alone
    except subprocess.CalledProcessError as exc:
        said = (exc.stderr or b"").decode(errors="replace")
        lines = said.splitlines()
        reason = next((line for line in lines if any(w in line for w in UNREACHABLE)), None)
        if reason is not None:
            pytest.skip(f"the package registry cannot be reached: {reason.strip()}")
        raise
    (only,) = result["configurations"].values()
    numbers(only, "install_s", "site_packages_mb", "distributions")
    assert only["control_plane_imports"] is True
    assert set(only["frameworks"]) == set(install_size.FRAMEWORK_MODULES)
    numbers(result["control_plane_vs_all"], "size", "time")


def test_trace_overhead(digits_zoo: list[BuiltModel]) -> None:
    from bench import trace_overhead

    quick = Scenario(iterations=4, min_duration_s=0, warmup=0)
    scale = trace_overhead.Scale(
        trace_queries=2,
        rounds=1,
        per_round=1,
        headline_pairs=1,
        headline=quick,
        headline_large=quick,
        span_layers=100,
    )
    result = run(trace_overhead.run(scale, zoo=zoo_folder(digits_zoo)))
    subjects = [key for key in result if " " in key]
    assert len(subjects) == 6
    for key in subjects:
        subject = result[key]
        if key.startswith("opencl ") and opencl_problem() is not None:
            assert subject == {"skipped": opencl_problem()}  # its compiler builds nothing here
            continue
        numbers(subject, "headline_full_over_none")
        for level in ("none", "full"):
            assert [is_number(v) for v in subject["headline_p50_ms"][level]] == [True]
        assert subject["reported_overhead"], f"{key}: no level reported"
        for reported in subject["reported_overhead"].values():
            if "overhead" in reported:
                numbers(reported, "overhead", "traced_p50_ms")
            else:
                assert reported["reason"] or reported["captured"]
        for raw in subject["raw_profiler"].values():
            numbers(raw, "plain_p50_ms", "profiled_p50_ms", "slowdown", "layer_records")
    numbers(result["spans"], "spans", "recorded_per_s", "exported_per_s", "bytes_exported")


@pytest.mark.rabbitmq
@pytest.mark.postgres
def test_ui_pages() -> None:
    from bench import ui_pages

    result = run(ui_pages.run(1000, 50, repeats=1))
    assert result["stored"] == {"latencies": 1000, "evaluations": 50}
    assert set(result["server"]) == {
        "evaluation_page",
        "figures_json",
        "list_first_page",
        "list_last_page",
        "list_filtered",
        "report_html",
        "report_csv",
        "report_md",
    }
    for page in result["server"].values():
        latencies(page, count=1)
        numbers(page, "bytes")
    browser = result["browser"]
    if "skipped" in browser:  # Chromium: make test installs it, so under it this fails
        pytest.skip(browser["skipped"])
    for name in ("evaluation_fcp_ms", "evaluation_charts_ms", "list_fcp_ms", "list_loaded_ms"):
        numbers(browser[name], *PERCENTILES)  # a paint the page never reported is NaN


@pytest.mark.slow
def test_fairness() -> None:
    from bench import fairness

    result = run(fairness.run(1, scenario=["-n", "8", "--min-duration", "0", "--warmup", "0"]))
    (one,) = result["rounds"]
    assert set(one) == set(fairness.MODES)
    for figures in one.values():
        numbers(figures, "p50_ms", "p90_ms", "p99_ms", "throughput_per_s")
    for ratios in ("median_ratio_to_alone", "ratio_to_every_alone_run"):
        assert set(result[ratios]) == set(fairness.MODES[1:])
        for by_figure in result[ratios].values():
            numbers(by_figure, "p50_ms", "p90_ms", "p99_ms", "throughput_per_s")


def test_interference(digits_zoo: list[BuiltModel]) -> None:
    from bench import interference

    scale = interference.Scale(
        quiet_runs=1,
        hog_runs=1,
        overhead_rounds=1,
        patience_s=0,
        run=("squeezenet", "-n", "16", "--min-duration", "1.5"),
    )
    result = run(interference.run(scale, zoo=zoo_folder(digits_zoo)))
    overhead = result["overhead"]
    numbers(overhead["snapshot_us"], "median", "p99")
    for model in ("squeezenet", "digits-cnn"):
        latencies(overhead[model]["on"])
        latencies(overhead[model]["off"])
        numbers(overhead[model], "median_round_p50_ratio")
    detection = result["detection"]
    for part, count in (("quiet", "false_alarms"), ("hogged", "detected")):
        assert detection[part]["runs"] == 1
        numbers(detection[part], count)
        (one,) = detection[part]["each"]
        numbers(one, "other_cores", "own_cores", "steal_share", "window_s", "p50_ms")
        assert one["status"] in ("VALID", "INVALID")
    numbers(result["thresholds"], "max_other_cpu_share", "max_steal_share", "max_noise_shift")


def test_generation(smollm2_home: Path) -> None:
    from bench import generation

    batches = generation.Batches(sizes=(1, 2), prompts=2, rounds=1)
    result = run(
        generation.run(0.01, tokens=3, warmup=1, batches=batches, zoo=smollm2_home / "zoo")
    )
    assert result["skipped"] == {}
    assert set(result["frameworks"]) == {"onnxruntime", "pytorch"}
    for framework in result["frameworks"].values():
        for side in ("dlscope", "bare"):
            latencies(framework[side]["ttft"], count=framework["rounds"])
            latencies(framework[side]["tpot"], count=framework["rounds"])
        numbers(framework["dlscope"], "output_tokens_per_s")
        numbers(framework, "tpot_median_round_ratio", "ttft_median_ratio")
        assert set(framework["batches"]) == {"batch_1", "batch_2"}
        for batch in framework["batches"].values():
            numbers(batch, "output_tokens_per_s", "step_ms_median")
            assert isinstance(batch["same_tokens_as_alone"], bool)


def test_endpoint(llama_url: str) -> None:
    from bench import endpoint

    result = run(endpoint.run(0.01, rates=(8.0,), url=llama_url))
    client = result["client_cost"]
    for side in ("dlscope", "bare"):
        latencies(client[side]["ttft"], count=client["rounds"])
        latencies(client[side]["e2e"], count=client["rounds"])
    numbers(client, "e2e_ratio_median")
    (loop,) = result["open_loop"].values()
    latencies(loop["lag"], count=loop["requests"])
    numbers(loop, "requests", "failed", "most_in_flight", "ttft_p50_ms", "lag_limit_ms")


# Server and slow: vllm bench serve (from .venv-vllm) takes half a minute to start.
@pytest.mark.server
@pytest.mark.slow
def test_load_generator() -> None:
    from bench import load_generator
    from harness.vllm_server import NOT_INSTALLED

    result = run(load_generator.run(0.05, rates=(100.0,), streams=(64,), rounds=1))
    at_rate = result["rates"]["100/s"]
    for side in ("event loop", "threads"):
        (measured,) = at_rate[side]
        latencies(measured["lag"], count=measured["requests"] - measured["failed"])
        numbers(measured, "requests_per_s", "cpu_ms_per_request", "peak_rss_mb")
        numbers(measured["at_stub"], "rate_per_s", "held")
        (streamed,) = result["streams"]["64 streams"][side]
        numbers(streamed, "share_of_ideal", "ttft_over_stub", "tpot_over_stub")
        assert streamed["every_token_timed"] is True
    # vllm bench serve beside them, from .venv-vllm (make test builds it).
    (peer,) = at_rate.get(load_generator.VLLM_BENCH) or pytest.skip(NOT_INSTALLED)
    numbers(peer, "requests_per_s")
    numbers(peer["at_stub"], "rate_per_s", "held")


def test_vllm_agreement(vllm_served: tuple[str, OtlpReceiver], smollm2_home: Path) -> None:
    from bench import vllm_agreement

    url, _ = vllm_served
    result = run(vllm_agreement.run(1, requests=2, url=url, home=smollm2_home))
    (one,) = result["rounds"]
    metrics = ("ttft_p50_ms", "tpot_p50_ms", "itl_p50_ms", "output_tokens_per_s")
    numbers(one["vllm_bench"], *metrics)
    numbers(one["dlscope"], *metrics)
    numbers(result["dlscope_over_vllm_bench"], *metrics)
    assert result["requests_per_round"] == 2
