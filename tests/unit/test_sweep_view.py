"""What a sweep's page says of its loads: the Pareto frontier of system throughput against
each user's speed (the points no other beats on both), a search's answer read back from the
judgements (and what leaves it uncertain), and charts that are valid Vega-Lite, drawn to SVG
as a report draws them."""

from __future__ import annotations

import uuid

import pytest

from services.analyzer.summary import summarize
from services.gateway.sweeps import SweepLoad, SweepView, _answer
from services.gateway.ui.charts import (
    ParetoPoint,
    SweepCurvePoint,
    pareto,
    sweep_latency,
    sweep_throughput,
)
from services.gateway.ui.rendering import svg_chart
from services.gateway.ui.views import experiment_charts, sweep_charts
from shared.eventstore import EvaluationView
from shared.measurement.pareto import pareto_frontier
from shared.messages import Scenario
from tests.unit.test_report_notation import experiment_of, view
from tests.unit.test_result_summary import served_generation


def _keys(n: int) -> list[uuid.UUID]:
    return [uuid.uuid4() for _ in range(n)]


def test_the_frontier_holds_the_points_no_other_beats_on_both() -> None:
    a, b, c, d, e = _keys(5)
    points = [
        (a, 500.0, 300.0),  # fastest for a user
        (b, 450.0, 1000.0),  # beats c on both
        (c, 440.0, 900.0),
        (d, 300.0, 3000.0),  # most for the system
        (e, None, 5000.0),  # no TPOT: not a trade-off at all
    ]
    assert pareto_frontier(points) == {a, b, d}


def test_equal_points_do_not_beat_each_other() -> None:
    a, b = _keys(2)
    assert pareto_frontier([(a, 10.0, 10.0), (b, 10.0, 10.0)]) == {a, b}


def _load(level: float, judgement: str | None, *, disturbed: str | None = None) -> SweepLoad:
    return SweepLoad(
        level=level,
        evaluation_id=uuid.uuid4(),
        status="completed",
        verdict="INVALID" if disturbed else "VALID",
        disturbed=disturbed,
        judgement=judgement,
        judged=f"p99 TTFT at {level:g}",
        requests=64,
        failed=0,
        ttft_ms=10.0 * level,
        tpot_ms=2.0 + level / 10,
        e2e_ms=100.0,
        output_tokens_per_s=300.0 * level,
        requests_per_s=10.0 * level,
        goodput_per_s=None,
        per_user_tokens_per_s=1000 / (2.0 + level / 10),
        error=None,
    )


def test_a_searchs_answer_is_the_highest_load_that_met_and_the_lowest_above_that_missed() -> None:
    loads = [_load(1, "meets"), _load(2, "meets"), _load(4, "misses"), _load(8, "misses")]
    answer = _answer(loads, {"ttft_ms": 50})
    assert answer is not None
    assert (answer.found, answer.below, answer.uncertain) == (2, 4, [])


def test_a_disturbed_or_undecided_load_makes_the_answer_uncertain_and_says_why() -> None:
    loads = [
        _load(1, "meets"),
        _load(2, "indeterminate"),
        _load(4, "misses", disturbed="other_processes_used_cpu: 1.9 of 2 cores"),
    ]
    answer = _answer(loads, {"ttft_ms": 50})
    assert answer is not None
    assert answer.found == 1
    assert answer.uncertain == ["2: p99 TTFT at 2", "4: other_processes_used_cpu: 1.9 of 2 cores"]
    # No bound asked: nothing to answer.
    assert _answer(loads, {}) is None


def _sweep(loads: list[SweepLoad], over: str = "streams") -> SweepView:
    return SweepView(
        sweep_id=uuid.uuid4(),
        model="smollm2",
        framework="endpoint",
        hardware="cpu",
        over=over,
        search=False,
        percentile=0.99,
        bounds={},
        loads=loads,
    )


@pytest.mark.parametrize("over", ["streams", "rate", "batch"])
def test_a_sweeps_charts_are_valid_vega_lite(over: str) -> None:
    loads = [_load(level, None) for level in (1, 2, 4, 8, 16)]
    drawn = sweep_charts(_sweep(loads, over))
    for name in ("throughput", "latency", "pareto"):
        spec = drawn[name]
        assert spec is not None
        svg = str(svg_chart(spec))
        assert "<svg" in svg, name
    # Loads that double read on a log axis.
    assert drawn["throughput"]["encoding"]["x"]["scale"] == {"type": "log", "base": 2}  # type: ignore[index]


def test_the_pareto_chart_joins_only_the_frontier_and_labels_every_point() -> None:
    spec = pareto(
        [
            ParetoPoint("1", 500.0, 300.0, True),
            ParetoPoint("4", 400.0, 200.0, False),
            ParetoPoint("16", 300.0, 3000.0, True),
        ],
        "number of streams",
    )
    line, points, labels = spec["layer"]
    assert [v["label"] for v in line["data"]["values"]] == ["16", "1"]  # by per-user speed
    assert len(points["data"]["values"]) == len(labels["data"]["values"]) == 3
    assert "<svg" in str(svg_chart(spec))


def test_a_curve_leaves_out_what_a_load_did_not_measure() -> None:
    points = [
        SweepCurvePoint(1, 300.0, 12.0, None, "VALID"),
        SweepCurvePoint(2, None, None, None, None),
    ]
    assert [v["level"] for v in sweep_throughput(points, "batch size")["data"]["values"]] == [1]
    latency = sweep_latency(points, "batch size", 0.99)["data"]["values"]
    assert latency == [{"level": 1, "metric": "p99 TTFT", "ms": 12.0}]


def test_an_experiments_generating_members_are_drawn_on_a_pareto_chart() -> None:

    base = summarize(served_generation(Scenario(name="server", target_qps=4.0)))
    assert base.generation is not None

    def member(framework: str, tokens_per_s: float, tpot_scale: float) -> EvaluationView:
        generation = base.generation
        assert generation is not None
        assert generation.tpot is not None
        tpot = generation.tpot.model_copy(update={"mean_ns": generation.tpot.mean_ns * tpot_scale})
        changed = generation.model_copy(update={"output_tokens_per_s": tokens_per_s, "tpot": tpot})
        return view(
            [1.0],
            framework=framework,
            result=base.model_copy(update={"generation": changed}),
        )

    members = [
        member("onnxruntime", 60.0, 1.0),
        member("pytorch", 50.0, 2.0),
        member("endpoint", 90.0, 1.5),
    ]
    experiment = experiment_of(members, model="smollm2")
    spec = experiment_charts(experiment)["pareto"]
    shown = {v["label"]: v["frontier"] for v in spec["layer"][1]["data"]["values"]}
    # pytorch is slower for its users and for the system than onnxruntime: beaten on both.
    assert shown == {
        "onnxruntime": "on the frontier",
        "pytorch": "beaten on both",
        "endpoint": "on the frontier",
    }
    assert "<svg" in str(svg_chart(spec))
