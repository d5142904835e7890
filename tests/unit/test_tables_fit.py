"""What the command line prints fits the terminal and says what the data says: at 80 columns
as at 160, every table of an experiment, a sweep, a goodput search and repeated runs shows
each member's name and headline whole, never cut to ``onn…``; literal brackets are never
eaten as markup; and a percentile with too few queries is marked ``≥`` on every row that
shows it, with its legend said once."""

from __future__ import annotations

import uuid
from typing import Any
from unittest.mock import patch

import pytest
from rich.console import Console

from dlscope.cli import sweep as sweep_module
from dlscope.cli.experiments import comparison_table, print_comparison
from dlscope.cli.options import EvaluationOptions
from dlscope.cli.repeats import _runs_table, _spread_lines
from dlscope.cli.tables import generation_table, summary_table
from services.analyzer.summary import summarize
from shared.measurement import summarize_repetitions
from shared.measurement.generation import summarize_generation
from shared.measurement.goodput import Probe, Search
from shared.measurement.statistics import BOUND_LEGEND
from shared.messages import (
    ComparedLatency,
    ExperimentComparison,
    GeneratedRequest,
    GenerationRecord,
    MemberResult,
    PairParity,
    ParityTolerance,
    Reason,
    ReasonCode,
    Severity,
    Verdict,
)
from tests.unit.test_result_summary import measured, phase

WIDTHS = (80, 160)
# What the issue saw at 80 columns: every cell cut, the parity cell ten lines tall.
HOST = "bench-runner-07.example"
TENSORRT = "pip install 'dlscope[tensorrt]' and an NVIDIA GPU with CUDA"


def shown(renderable: Any, width: int) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def squashed(text: str) -> str:
    """The text with its lines' borders and spaces gone: a cell's words in order."""
    return " ".join(text.replace("│", " ").replace("┃", " ").split())


# --- an experiment --------------------------------------------------------------------------


def member(framework: str, version: str, p90_ms: float, *, queries: int = 2000) -> MemberResult:
    return MemberResult(
        evaluation_id=uuid.uuid4(),
        model="squeezenet",
        model_version="1.0.1",
        framework=framework,
        framework_version=version,
        agent_id=f"{framework}-agent",
        host=HOST,
        status="completed",
        latency=ComparedLatency(
            count=queries,
            batch_size=1,
            mean_ms=p90_ms * 0.8,
            p50_ms=p90_ms * 0.7,
            p90_ms=p90_ms,
            p99_ms=p90_ms * 1.4,
            throughput_per_s=1000 / p90_ms,
        ),
        verdict=Verdict(
            status="INVALID",
            reasons=(
                Reason(
                    code=ReasonCode.OTHER_PROCESSES_USED_CPU,
                    severity=Severity.ERROR,
                    message="other processes used 1.21 of 2 cores during the timed window",
                ),
            ),
        ),
    )


def comparison(*members: MemberResult) -> ExperimentComparison:
    reference, *others = members
    return ExperimentComparison(
        complete=True,
        reference=reference.evaluation_id,
        tolerance=ParityTolerance(),
        evaluations=list(members),
        parity=[
            PairParity(
                reference=reference.evaluation_id,
                candidate=other.evaluation_id,
                comparable=True,
                within_tolerance=True,
                max_abs_error=0.0,
                top1_agreement=1.0,
                min_cosine=0.9999999,
            )
            for other in others
        ],
        parity_ok=True,
        failures=[],
    )


EXPERIMENT = comparison(
    member("onnxruntime", "1.31.1", 31.234),
    member("opencl", "2025.1.17", 45.678),
    member("tensorflow", "2.19.0", 52.125),
)


@pytest.mark.parametrize("width", WIDTHS)
def test_every_member_of_an_experiment_is_shown_whole_at_any_width(width: int) -> None:
    printed = shown(comparison_table("squeezenet on 3 frameworks (cpu)", EXPERIMENT), width)
    assert "…" not in printed, printed
    assert max(len(line) for line in printed.splitlines()) <= width
    words = squashed(printed)
    for framework, version, p90 in (
        ("onnxruntime", "1.31.1", "31.234"),
        ("opencl", "2025.1.17", "45.678"),
        ("tensorflow", "2.19.0", "52.125"),
    ):
        for shown_whole in (framework, version, p90):
            assert shown_whole in words, printed
    assert HOST in words
    assert "other_processes_used_cpu" in words


def test_a_narrow_terminal_gets_a_block_per_member_a_wide_one_a_table() -> None:
    narrow = shown(comparison_table("t", EXPERIMENT), 80)
    assert f"onnxruntime 1.31.1 on {HOST}" in narrow.splitlines()
    assert "parity vs reference  reference" in " ".join(narrow.split("\n"))
    wide = shown(comparison_table("t", EXPERIMENT), 200)
    assert "┃ framework" in wide, "one table, its header above the members"


@pytest.mark.parametrize("width", WIDTHS)
def test_a_member_with_too_few_queries_has_its_tail_marked_a_bound(width: int) -> None:
    few = comparison(member("onnxruntime", "1.31.1", 31.234, queries=100), member("x", "1", 2))
    words = squashed(shown(comparison_table("t", few), width))
    # 100 queries estimate p50 and p90 (11 and 64 needed) but only bound p99 (662).
    assert "≥ 43.728" in words
    assert "≥ 31.234" not in words
    assert squashed(BOUND_LEGEND) in words


def test_literal_brackets_in_what_an_experiment_prints_survive() -> None:
    console = Console(width=80, record=True)
    with patch("dlscope.cli.experiments.console", console):
        print_comparison("t", EXPERIMENT, {"tensorrt": TENSORRT})
    assert TENSORRT in console.export_text()


# --- a sweep and a goodput search -----------------------------------------------------------


def generation(requests: int, ttft_ms: float, tpot_ms: float) -> dict[str, Any]:
    ms = 1_000_000
    record = GenerationRecord(
        max_new_tokens=3,
        ignore_eos=True,
        duration_ns=requests * 100 * ms,
        requests=[
            GeneratedRequest(
                scheduled_ns=i * 100 * ms,
                issued_ns=i * 100 * ms,
                token_ns=[int(i * 100 * ms + ttft_ms * ms + k * tpot_ms * ms) for k in range(3)],
                input_tokens=5,
                stopped_by="max_new_tokens",
            )
            for i in range(requests)
        ],
    )
    summary = summarize_generation(record, ttft_bound_ms=500)
    return {"result": {"generation": summary.model_dump(mode="json"), "verdict": None}}


def loads(requests: int) -> sweep_module._Loads:
    measured_loads = sweep_module._Loads(
        "smollm2",
        EvaluationOptions(ttft_bound=500),
        "streams",
        client=None,  # type: ignore[arg-type]
    )
    measured_loads.results = {
        1: generation(requests, 123.4, 20.5),
        2: generation(requests, 234.5, 31.5),
        4: generation(requests, 456.7, 42.5),
    }
    return measured_loads


SEARCH = Search(
    found=2,
    below=4,
    probes=[
        Probe(1, "meets", "p99 TTFT 123.4 ms [120.1, 130.2] within 500 ms"),
        Probe(2, "meets", "p99 TTFT 234.5 ms [230.0, 240.0] within 500 ms"),
        Probe(4, "misses", "p99 TTFT 456.7 ms [450.0, 460.0] above 500 ms"),
    ],
)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("found", [None, SEARCH], ids=["sweep", "search"])
def test_every_load_of_a_sweep_and_a_search_is_shown_whole_at_any_width(
    width: int, found: Search | None
) -> None:
    console = Console(width=width, record=True, color_system=None)
    with patch.object(sweep_module, "console", console):
        sweep_module._show(
            "smollm2", EvaluationOptions(ttft_bound=500), loads(700), found, 0.99, "streams"
        )
    printed = console.export_text()
    assert "…" not in printed, printed
    words = squashed(printed)
    for streams, ttft in (("1", "123.4"), ("2", "234.5"), ("4", "456.7")):
        assert ttft in words, printed
        if width < 100:
            assert f"{streams} concurrent stream(s)" in printed.splitlines()
    if found is not None:
        assert "misses: p99 TTFT 456.7 ms [450.0, 460.0] above 500 ms" in words
        assert "lies in" in words or "is 2" in words


def test_a_load_with_too_few_requests_has_its_percentiles_marked_a_bound() -> None:
    console = Console(width=80, record=True, color_system=None)
    with patch.object(sweep_module, "console", console):
        sweep_module._show("smollm2", EvaluationOptions(), loads(20), None, 0.99, "streams")
    words = squashed(console.export_text())
    assert "≥ 123.4" in words
    assert squashed(BOUND_LEGEND) in words


def test_a_re_measured_load_names_the_codes_that_disturbed_it_and_nothing_else() -> None:
    first = (
        "other_processes_used_cpu: other processes used 1.30 of 2 cores during the timed window "
        "(65% of their time; at most 10% allowed); requests_failed: 2 requests failed"
    )
    assert sweep_module._disturbed_cell(None, first) == (
        "re-measured (first: other_processes_used_cpu, requests_failed)"
    )


# --- repeated runs --------------------------------------------------------------------------


def test_repeated_runs_fit_and_flag_a_headline_that_spreads_when_the_median_does_not() -> None:
    steady = [float(v) for v in range(100, 200)]
    runs = [[*steady[:90], *[500.0 * (1 + r)] * 10] for r in range(3)]
    summary = summarize_repetitions(runs, percentile=0.9)
    assert summary.median_cv < 0.03 < summary.headline_cv
    arguments = ["squeezenet", "--input-tokens", "normal:64,8[,16]", "-n", "64"]
    for width in WIDTHS:
        printed = shown(_runs_table(arguments, summary, [["1.000", "VALID"]] * 3), width)
        assert "…" not in printed
        assert "normal:64,8[,16]" in squashed(printed), "a literal bracket survives"
    said = " ".join(_spread_lines(summary, 0.03))
    assert "high run-to-run variation" in said
    assert f"p90 ({summary.headline_cv:.1%})" in said
    assert "at p50" not in said, "the median's spread is within --max-spread"


# --- one evaluation -------------------------------------------------------------------------


def evaluation(summary: Any) -> dict[str, Any]:
    return {
        "model": "squeezenet",
        "model_version": "1.0.1",
        "framework": "onnxruntime",
        "hardware": "cpu",
        "result": summary.model_dump(mode="json"),
    }


@pytest.mark.parametrize("width", WIDTHS)
def test_every_percentile_row_short_of_its_queries_is_marked_a_bound(width: int) -> None:
    # 100 queries: enough for p50 and p90, too few for p99 (662).
    summary = summarize(measured(phase([float(i) for i in range(1, 101)])))
    printed = shown(summary_table(evaluation(summary)), width)
    lines = [squashed(line) for line in printed.split("\n")]
    p99 = next(line for line in lines if line.startswith("p99 (ms)"))
    p90 = next(line for line in lines if line.startswith("p90 (ms)"))
    assert p99.split()[2] == "≥", p99
    assert "≥" not in p90
    assert squashed(BOUND_LEGEND) in " ".join(lines)


def test_a_loadgen_offline_run_says_its_one_query_had_many_samples() -> None:
    summary = summarize(measured(phase([float(i) for i in range(1, 101)])))
    result = summary.model_copy(
        update={
            "count": 1,
            "statistics": [],
            "scenario": summary.scenario.model_copy(
                update={"name": "offline", "driver": "loadgen"}
            ),
            "loadgen": [
                {
                    "output_dir": "/tmp/x",
                    "samples_per_query": 1,
                    "result": "VALID",
                    "summary": {"samples_per_query": 82},
                }
            ],
        }
    )
    words = squashed(shown(summary_table(evaluation(result)), 80))
    assert "count 1" not in words
    assert "queries 1 (offline: LoadGen issues one query)" in words
    assert "samples 82" in words


@pytest.mark.parametrize("width", WIDTHS)
def test_token_latencies_fit_and_keep_their_legend_whole(width: int) -> None:
    tokens = generation(20, 123.4, 20.5)["result"]["generation"]
    printed = shown(generation_table(tokens), width)
    assert "…" not in printed
    words = squashed(printed)
    assert "≥ 123.40" in words  # 20 requests: p99 needs 662
    assert "[low, high]: 95% interval" in words, "brackets in the caption are not markup"
    assert "output tokens/s:" in words


def test_a_layer_named_with_brackets_is_printed_as_it_is_named() -> None:
    from dlscope.cli.layers import print_passes

    layer = {
        "node": "features[0]/conv[bold]",
        "op_type": "Conv",
        "calls": 5,
        "p50_ns": 1200.0,
        "per_query_ns": 1200.0,
        "per_query_share": 0.5,
        "total_ns": 6000.0,
        "input_shapes": [[1, 3, 224, 224]],
        "output_shapes": [],
    }
    passed = {
        "level": "framework",
        "source": "onnxruntime session profiling [CPU]",
        "queries": 5,
        "batch_size": 1,
        "query_p50_ns": 2400.0,
        "top": [layer],
        "layers_total": 1,
        "op_types": [
            {
                "op_type": "Conv[x]",
                "layers": 1,
                "calls": 5,
                "per_query_ns": 1200.0,
                "per_query_share": 0.5,
                "total_ns": 6000.0,
            }
        ],
    }
    console = Console(width=200, record=True)
    with patch("dlscope.cli.layers.console", console):
        print_passes({"passes": [passed]})
    shown = console.export_text()
    assert "features[0]/conv[bold]" in shown
    assert "onnxruntime session profiling [CPU]" in shown
    assert "Conv[x]" in shown


def test_a_sweep_marks_the_loads_on_its_pareto_frontier() -> None:
    # The three loads give the system the same output tokens/s; one stream's users get them
    # fastest (the lowest TPOT): it alone is on the frontier, the others beaten on both.
    console = Console(width=80, record=True, color_system=None)
    with patch.object(sweep_module, "console", console):
        sweep_module._show(
            "smollm2", EvaluationOptions(ttft_bound=500), loads(700), None, 0.99, "streams"
        )
    blocks = {
        block.splitlines()[0].strip(): squashed(block)
        for block in console.export_text().split("\n\n")
        if "concurrent stream(s)" in block.splitlines()[0]
    }
    assert sorted(blocks) == [f"{n} concurrent stream(s)" for n in (1, 2, 4)]
    assert "Pareto frontier" in blocks["1 concurrent stream(s)"]
    assert "tokens/s per user 48.8" in blocks["1 concurrent stream(s)"]
    for beaten in ("2 concurrent stream(s)", "4 concurrent stream(s)"):
        assert "Pareto -" in blocks[beaten], blocks[beaten]
