"""A profiled pass's layers: summarised per layer, broken down per op type, lined up across
frameworks; and what each framework's profiler output turns into."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pytest

from services.analyzer.figures import figures
from services.workers.framework.layer_stats import layer_stats
from services.workers.framework.predictors.onnxrt_profiling import graph_name, layers_of_trace
from services.workers.framework.predictors.tensorrt_profiling import trt_layers
from services.workers.framework.predictors.torch_profiling import numbered, onednn_layers
from services.workers.handover import TracedQuery
from shared.breakdown import align, breakdown, kind_of, profile_of, report
from shared.messages import (
    EvaluationMeasured,
    EvaluationProfiled,
    LayerStat,
    LayerTiming,
    LevelOutcome,
    ProfiledPass,
)
from tests.unit.test_result_summary import measured, phase


def timing(node: str, op_type: str, start: int, end: int) -> LayerTiming:
    return LayerTiming(node=node, op_type=op_type, start_ns=start, end_ns=end)


def test_each_layer_is_summarised_over_the_queries_in_the_order_it_first_ran() -> None:
    queries = [
        TracedQuery(
            index,
            start_ns=base,
            end_ns=base + 1000,
            layers=(
                timing("conv1", "Conv", base, base + 600 + 100 * index),
                timing("fc", "Gemm", base + 700, base + 900),
            ),
        )
        for index, base in enumerate((0, 10_000, 20_000))
    ]
    stats, dropped = layer_stats(queries)
    assert dropped == 0
    assert [layer.node for layer in stats] == ["conv1", "fc"]
    conv, fc = stats
    assert conv.calls == 3
    assert conv.total_ns == 600 + 700 + 800
    assert conv.p50_ns == 700
    assert conv.mean_ns == pytest.approx(700)
    assert conv.share == pytest.approx(2100 / 3000)
    assert fc.share == pytest.approx(600 / 3000)


def stat(node: str, op_type: str, total: int) -> LayerStat:
    return LayerStat(
        node=node,
        op_type=op_type,
        calls=2,
        total_ns=total,
        mean_ns=total / 2,
        p50_ns=total / 2,
        share=total / 10_000,
    )


def passed(*layers: LayerStat) -> ProfiledPass:
    return ProfiledPass(
        level="framework",
        source="a profiler",
        queries=2,
        batch_size=1,
        query_p50_ns=5000,
        layers=list(layers),
    )


def test_a_breakdown_lists_the_slowest_layers_and_the_time_per_op_type() -> None:
    result = breakdown(
        passed(stat("a", "Conv", 3000), stat("b", "Relu", 100), stat("c", "Conv", 5000)), top=2
    )
    assert [layer.node for layer in result.top] == ["c", "a"]
    assert result.layers_total == 3
    conv, relu = result.op_types
    assert (conv.op_type, conv.layers, conv.calls, conv.total_ns) == ("Conv", 2, 4, 8000)
    assert conv.share == pytest.approx(0.8)
    assert relu.op_type == "Relu"


def test_one_cold_call_does_not_lead_the_ranking() -> None:
    # Five profiled queries: the first call of r28 took 11 ms (its weights repacked), its
    # other four 0.3 ms; a layer steadily at 1 ms a call is the one that costs each query.
    def query(index: int, r28_ns: int) -> TracedQuery:
        base = index * 100_000
        return TracedQuery(
            index,
            start_ns=base,
            end_ns=base + 20_000,
            layers=(
                timing("r28", "Conv", base, base + r28_ns),
                timing("r64", "Conv", base + 12_000, base + 13_000),
            ),
        )

    queries = [query(i, 11_000 if i == 0 else 300) for i in range(5)]
    layers, _ = layer_stats(queries)
    profiled = ProfiledPass(
        level="framework",
        source="a profiler",
        queries=5,
        batch_size=1,
        query_p50_ns=2_000,
        layers=layers,
    )
    assert sum(layer.total_ns for layer in layers if layer.node == "r28") > 5 * 1_000
    result = breakdown(profiled, top=2)
    assert [layer.node for layer in result.top] == ["r64", "r28"]
    r64, r28 = result.top
    assert (r64.per_query_ns, r28.per_query_ns) == (1_000, 300)
    assert r64.per_query_share == pytest.approx(0.5)
    # The web page's chart draws the same layers, in the same order, by the same measure.
    profiled_event = EvaluationProfiled(
        evaluation_id=uuid.uuid4(),
        agent_id="a",
        framework="onnxruntime",
        trace_level="framework",
        levels=[],
        passes=[profiled],
    )
    drawn = figures(measured(phase([1.0] * 10)), profiled_event).layers
    assert [layer.node for layer in drawn] == ["r64", "r28"]
    assert [layer.duration_ms for layer in drawn] == pytest.approx([0.001, 0.0003])


@pytest.mark.parametrize(
    ("op_type", "kind"),
    [
        ("Conv", "conv"),
        ("aten::_convolution", "conv"),
        ("_MklNativeFusedConv2D", "conv"),
        ("Gemm", "matmul"),
        ("aten::linear", "matmul"),
        ("aten::addmm", "matmul"),
        ("_MklNativeFusedMatMul", "matmul"),
        ("MaxPool", "maxpool"),
        ("aten::max_pool2d", "maxpool"),
        ("GlobalAveragePool", "avgpool"),
        ("aten::flatten", "reshape"),
        ("AddV2", "add"),
        ("ReadVariableOp", "readvariableop"),
    ],
)
def test_op_types_of_every_framework_are_named_by_their_kind(op_type: str, kind: str) -> None:
    assert kind_of(op_type) == kind


def profile(framework: str, *layers: LayerStat) -> tuple[EvaluationProfiled, ProfiledPass]:
    profiled = EvaluationProfiled(
        evaluation_id=uuid.uuid4(),
        agent_id="agent",
        framework=framework,
        trace_level="framework",
        levels=[],
        passes=[passed(*layers)],
    )
    return profiled, profiled.passes[0]


def test_layers_of_two_frameworks_line_up_by_their_kind_of_operation() -> None:
    onnx = profile("onnxruntime", stat("conv1", "Conv", 10), stat("pool", "MaxPool", 5))
    torch = profile(
        "pytorch",
        stat("aten::_convolution#0", "aten::_convolution", 20),
        stat("aten::relu#0", "aten::relu", 3),
        stat("aten::max_pool2d#0", "aten::max_pool2d", 6),
    )
    comparison = align("framework", [onnx, torch])
    rows = [
        (row.kind, row.matched_by, [None if x is None else x.node for x in row.layers])
        for row in comparison.rows
    ]
    assert rows == [
        ("conv", "kind", ["conv1", "aten::_convolution#0"]),
        ("relu", None, [None, "aten::relu#0"]),  # fused away in ONNX Runtime's graph
        ("maxpool", "kind", ["pool", "aten::max_pool2d#0"]),
    ]
    assert [e.framework for e in comparison.evaluations] == ["onnxruntime", "pytorch"]


def test_layers_of_the_same_graph_line_up_by_node_name() -> None:
    onnx = profile(
        "onnxruntime", stat("c1", "Conv", 1), stat("c2", "Conv", 1), stat("fc", "Gemm", 1)
    )
    opencl = profile("opencl", stat("c2", "Conv", 2), stat("fc", "Gemm", 2))
    rows = align("framework", [onnx, opencl]).rows
    assert [(row.matched_by, row.layers[1] and row.layers[1].node) for row in rows] == [
        (None, None),
        ("name", "c2"),
        ("name", "fc"),
    ]


def test_several_evaluations_line_up_against_the_first() -> None:
    first = profile("onnxruntime", stat("c", "Conv", 1), stat("fc", "Gemm", 1))
    second = profile("pytorch", stat("t", "aten::t", 1), stat("x", "aten::conv2d", 1))
    third = profile("tensorflow", stat("y", "Conv2D", 1), stat("z", "MatMul", 1))
    rows = align("framework", [first, second, third]).rows
    table = [[None if x is None else x.node for x in row.layers] for row in rows]
    assert table == [[None, "t", None], ["c", "x", "y"], ["fc", None, "z"]]


@dataclass(frozen=True)
class Stored:
    type: str
    payload: dict[str, Any]


def test_an_evaluation_without_layers_says_why() -> None:
    assert "no such evaluation" in str(profile_of([]))
    requested = Stored("evaluation.requested", {})
    assert "not been measured" in str(profile_of([requested]))
    measured = EvaluationMeasured.model_validate(
        {
            "evaluation_id": str(uuid.uuid4()),
            "agent_id": "agent",
            "load_ns": 1,
            "loadgen": {"scenario": {"name": "offline"}, "sample_count": 1, "phases": []},
            "trace_level": "model",
        }
    )
    why = profile_of([requested, Stored(measured.TYPE, measured.model_dump(mode="json"))])
    assert why == (
        "it was traced at level 'model', which profiles no layers: ask for trace_level "
        "'framework' (or deeper)"
    )
    not_served = measured.model_copy(
        update={
            "trace_level": "framework",
            "tracing": [LevelOutcome(level="framework", captured=False, reason="no profiler")],
        }
    )
    why = profile_of([Stored(measured.TYPE, not_served.model_dump(mode="json"))])
    assert why == "no layers were captured: framework: no profiler"


def test_a_report_of_a_level_the_evaluation_lacks_names_the_levels_it_has() -> None:
    profiled, _ = profile("onnxruntime", stat("c", "Conv", 1))
    assert report(profiled, top=5, level="hardware") == (
        f"evaluation {profiled.evaluation_id} has no hardware pass; it has: framework"
    )


def test_onnxruntime_node_events_are_placed_on_the_wall_clock_under_graph_names() -> None:
    events = [
        {"cat": "Session", "name": "model_run", "ts": 90, "dur": 40},
        {
            "cat": "Node",
            "name": "conv1_nchwc_kernel_time",
            "ts": 100,
            "dur": 25,
            "tid": 7,
            "args": {
                "op_name": "Conv",
                "provider": "CPUExecutionProvider",
                "input_type_shape": [{"float": [1, 3, 8, 8]}, {"float": [4, 3, 3, 3]}],
                "output_type_shape": [{"float": [1, 4, 8, 8]}],
            },
        },
        {"cat": "Node", "name": "conv1_nchwc_fence_before", "ts": 99, "dur": 0, "args": {}},
    ]
    (layer,) = layers_of_trace(events, start_ns=1_000_000, graph_nodes=frozenset({"conv1"}))
    assert layer.node == "conv1"  # the optimizer's suffix taken off: the graph's node
    assert (layer.op_type, layer.thread, layer.implementation) == (
        "Conv",
        7,
        "CPUExecutionProvider",
    )
    assert (layer.start_ns, layer.end_ns) == (1_100_000, 1_125_000)
    assert layer.input_shapes == ((1, 3, 8, 8), (4, 3, 3, 3))
    assert layer.output_shapes == ((1, 4, 8, 8),)
    assert graph_name("r1_nchwc", frozenset({"conv1"})) == "r1_nchwc"  # no such node: as is


def test_onednn_primitives_of_one_call_are_laid_out_from_its_start() -> None:
    lines = [
        "onednn_verbose,v1,info,oneDNN v3.12.0",
        "onednn_verbose,v1,primitive,exec,cpu,reorder,jit:blk,undef,src:f32 dst:f32,"
        "attr-scratchpad:user,,1x32x32x32,0.25",
        "onednn_verbose,v1,primitive,exec,cpu,convolution,jit:avx512_core,forward_training,"
        "src:f32,attr-scratchpad:user,alg:convolution_direct,mb1_ic32oc64_ih32oh30kh3,0.5",
        "onednn_verbose,v1,primitive,exec,cpu,reorder,jit:blk,undef,src:f32 dst:f32,"
        "attr-scratchpad:user,,1x64x30x30,0.125",
    ]
    layers = onednn_layers(lines, call_start_ns=1_000)
    assert [(x.node, x.op_type) for x in layers] == [
        ("reorder#0", "reorder"),
        ("convolution#0", "convolution"),
        ("reorder#1", "reorder"),
    ]
    assert [(x.start_ns, x.end_ns) for x in layers] == [
        (1_000, 251_000),
        (251_000, 751_000),
        (751_000, 876_000),
    ]
    assert layers[1].implementation == "jit:avx512_core mb1_ic32oc64_ih32oh30kh3"


def test_torch_operators_are_numbered_within_their_query() -> None:
    layers = [
        timing("aten::conv2d", "aten::conv2d", 10, 20),
        timing("aten::conv2d", "aten::conv2d", 30, 40),
        timing("aten::conv2d", "aten::conv2d", 110, 120),
    ]
    assert [x.node for x in numbered(layers, calls=[0, 100])] == [
        "aten::conv2d#0",
        "aten::conv2d#1",
        "aten::conv2d#0",
    ]


def test_tensorrt_layer_names_give_the_graph_node_and_what_was_fused_into_it() -> None:
    layers = trt_layers(
        [("/conv1/Conv + /relu/Relu", 0.5), ("Reformatting CopyNode for Output", 0.25)],
        call_start_ns=0,
        op_types={"/conv1/Conv": "Conv"},
    )
    assert [(x.node, x.op_type, x.fused) for x in layers] == [
        ("/conv1/Conv", "Conv", ("/relu/Relu",)),
        ("Reformatting CopyNode for Output", "Reformat", ()),
    ]
    assert [(x.start_ns, x.end_ns) for x in layers] == [(0, 500_000), (500_000, 750_000)]
