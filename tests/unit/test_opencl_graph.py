"""The OpenCL engine's graph work, before any device: what it accepts, what it folds ahead of
time, and how it lays tensors out in memory. No OpenCL device is needed here."""

from __future__ import annotations

import itertools
import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from services.workers.framework.opencl.engine import SUPPORTED_OPS, prepare
from services.workers.framework.opencl.folding import fold_batch_norm, fold_constants
from services.workers.framework.opencl.fusion import fuse
from services.workers.framework.opencl.graph import (
    Graph,
    Node,
    check_supported,
    graph_from_model,
    load_graph,
    topological_order,
)
from services.workers.framework.opencl.lowering import Alias, ConstantPool, Layer, lower
from services.workers.framework.opencl.planner import Lifetime, assign_offsets, plan_memory
from services.workers.framework.opencl.tiling import Tiling
from shared.artifacts import locate
from shared.errors import PredictorError

ZOO = {
    name: f"pkg://onnx/backend/test/data/light/light_{name}.onnx"
    for name in (
        "resnet50",
        "squeezenet",
        "densenet121",
        "bvlc_alexnet",
        "inception_v1",
        "inception_v2",
        "shufflenet",
        "vgg19",
        "zfnet512",
    )
}


def graph_of(
    nodes: list[onnx.NodeProto],
    inputs: dict[str, list[int | str]],
    outputs: list[str],
    constants: dict[str, np.ndarray] | None = None,
    opset: int = 13,
) -> Graph:
    model = helper.make_model(
        helper.make_graph(
            nodes,
            "test",
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
            [numpy_helper.from_array(v, n) for n, v in (constants or {}).items()],
        ),
        opset_imports=[helper.make_opsetid("", opset)],
    )
    return graph_from_model(model)


# -- what the engine accepts ----------------------------------------------------------------


def test_an_unsupported_graph_is_refused_naming_every_unsupported_operator() -> None:
    graph = graph_of(
        [
            helper.make_node("Relu", ["x"], ["a"], name="fine"),
            helper.make_node("Erf", ["a"], ["b"], name="erf_1"),
            helper.make_node("TopK", ["b", "k"], ["c", "i"], name="topk"),
            helper.make_node("Erf", ["c"], ["d"], name="erf_2"),
            helper.make_node("Gelu", ["d"], ["e"], name="custom", domain="com.example"),
        ],
        {"x": [1, 4]},
        ["e"],
        {"k": np.array([2], np.int64)},
    )
    with pytest.raises(PredictorError) as raised:
        check_supported(graph, SUPPORTED_OPS)
    message = str(raised.value)
    assert "3 operator type(s)" in message
    for expected in ("Erf (nodes: erf_1, erf_2)", "TopK (nodes: topk)", "com.example.Gelu"):
        assert expected in message
    assert "Relu" not in message


@pytest.mark.parametrize("name", sorted(ZOO))
def test_every_zoo_graph_is_supported_and_its_placeholder_weights_fold(name: str) -> None:
    graph = prepare(load_graph(locate(ZOO[name])))
    # The placeholder weights are ConstantOfShape nodes: none is left to run.
    assert not [n for n in graph.nodes if n.op_type in ("ConstantOfShape", "Constant")]
    assert all(name not in graph.constants for name in (i.name for i in graph.inputs))


def test_nodes_are_put_in_dependency_order_and_a_cycle_is_refused() -> None:
    a = Node("a", "Relu", ("x",), ("ya",))
    b = Node("b", "Relu", ("ya",), ("yb",))
    c = Node("c", "Add", ("ya", "yb"), ("yc",))
    assert [n.name for n in topological_order([c, b, a], ["x"])] == ["a", "b", "c"]
    cycle = [
        Node("e", "Relu", ("back",), ("ye",)),
        Node("f", "Add", ("ye", "x"), ("yf",)),
        Node("g", "Relu", ("yf",), ("back",)),
    ]
    with pytest.raises(PredictorError, match="cycle"):
        topological_order(cycle, ["x"])


# -- constant folding ----------------------------------------------------------------------


def shape_chain() -> Graph:
    """x [N, C, H, W] -> Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])): what
    exporters write for a flatten that keeps the batch dimension."""
    return graph_of(
        [
            helper.make_node("Shape", ["x"], ["shape"]),
            helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
            helper.make_node("Unsqueeze", ["batch", "axes"], ["batch_1d"]),
            helper.make_node("Concat", ["batch_1d", "rest"], ["target"], axis=0),
            helper.make_node("Reshape", ["x", "target"], ["y"]),
            helper.make_node("Relu", ["y"], ["z"]),
        ],
        {"x": ["n", 2, 4, 4]},
        ["z"],
        {
            "zero": np.array(0, np.int64),
            "axes": np.array([0], np.int64),
            "rest": np.array([-1], np.int64),
        },
    )


@pytest.mark.parametrize("batch", [1, 3])
def test_a_shape_chain_feeding_reshape_folds_for_each_batch_size(batch: int) -> None:
    graph = shape_chain()
    # Without shapes nothing can be known about x: the chain stays.
    unfolded, _ = fold_constants(graph)
    assert "Shape" in [n.op_type for n in unfolded.nodes]

    folded, shapes = fold_constants(graph, {"x": (batch, 2, 4, 4)})
    assert [n.op_type for n in folded.nodes] == ["Reshape", "Relu"]
    assert folded.constants["target"].tolist() == [batch, -1]
    assert shapes["y"] == shapes["z"] == (batch, 32)


def test_constant_nodes_and_operations_on_constants_fold_when_loaded() -> None:
    graph = graph_of(
        [
            helper.make_node(
                "Constant", [], ["two"], value=numpy_helper.from_array(np.float32(2.0))
            ),
            helper.make_node(
                "ConstantOfShape",
                ["dims"],
                ["ones"],
                value=numpy_helper.from_array(np.ones(1, np.float32)),
            ),
            helper.make_node("Mul", ["ones", "two"], ["twos"]),
            helper.make_node("Add", ["x", "twos"], ["y"]),
        ],
        {"x": [2, 3]},
        ["y"],
        {"dims": np.array([2, 3], np.int64)},
    )
    folded, _ = fold_constants(graph)
    assert [n.op_type for n in folded.nodes] == ["Add"]
    np.testing.assert_array_equal(folded.constants["twos"], np.full((2, 3), 2.0, np.float32))
    # What no remaining node reads is dropped.
    assert set(folded.constants) == {"twos"}


def conv_bn(shared_output: bool) -> Graph:
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=[3, 3]),
        helper.make_node("BatchNormalization", ["c", "s", "beta", "mean", "var"], ["y"], name="bn"),
    ]
    outputs = ["y"]
    if shared_output:
        nodes.append(helper.make_node("Relu", ["c"], ["r"]))
        outputs.append("r")
    return graph_of(
        nodes,
        {"x": [1, 2, 5, 5]},
        outputs,
        {
            "w": rng.standard_normal((4, 2, 3, 3)).astype(np.float32),
            "b": rng.standard_normal(4).astype(np.float32),
            "s": rng.uniform(0.5, 1.5, 4).astype(np.float32),
            "beta": rng.standard_normal(4).astype(np.float32),
            "mean": rng.standard_normal(4).astype(np.float32),
            "var": rng.uniform(0.5, 1.5, 4).astype(np.float32),
        },
    )


def test_batch_normalization_folds_into_the_convolution_before_it() -> None:
    graph = conv_bn(shared_output=False)
    folded = fold_batch_norm(graph)
    (conv,) = folded.nodes
    assert (conv.op_type, conv.outputs, conv.fused) == ("Conv", ("y",), ("bn",))
    c = graph.constants
    factor = c["s"] / np.sqrt(c["var"] + 1e-5)
    weight, bias = (folded.constants[name] for name in conv.inputs[1:])
    np.testing.assert_allclose(weight, c["w"] * factor[:, None, None, None], rtol=1e-6)
    np.testing.assert_allclose(bias, (c["b"] - c["mean"]) * factor + c["beta"], rtol=1e-5)


def test_batch_normalization_stays_when_something_else_reads_the_convolution() -> None:
    folded = fold_batch_norm(conv_bn(shared_output=True))
    assert [n.op_type for n in folded.nodes] == ["Conv", "BatchNormalization", "Relu"]


# -- buffer planning -------------------------------------------------------------------------


def layer(name: str, reads: tuple[str, ...], writes: tuple[str, ...]) -> Layer:
    return Layer(name, "Relu", (), reads, writes, (), (), ())


def overlapping(
    lifetimes: list[Lifetime], offsets: dict[str, int], sizes: dict[str, int]
) -> list[tuple[str, str]]:
    """Pairs of tensors alive at the same step whose bytes overlap."""
    clashes = []
    for a, b in itertools.combinations(lifetimes, 2):
        alive_together = a.first <= b.last and b.first <= a.last
        share_bytes = (
            offsets[a.name] < offsets[b.name] + sizes[b.name]
            and offsets[b.name] < offsets[a.name] + sizes[a.name]
        )
        if alive_together and share_bytes and sizes[a.name] and sizes[b.name]:
            clashes.append((a.name, b.name))
    return clashes


def test_a_chain_of_layers_needs_two_buffers_not_one_per_tensor() -> None:
    steps = [layer(f"l{i}", (f"t{i}",), (f"t{i + 1}",)) for i in range(6)]
    sizes = {f"t{i}": 1000 for i in range(7)}
    plan = plan_memory(steps, ["t0"], ["t6"], sizes, alignment=64)
    assert plan.arena_bytes == 2 * 1024  # 1000 bytes each, rounded up to the alignment
    assert not overlapping(list(plan.lifetimes), plan.offsets, plan.sizes)
    # A layer's output never shares bytes with its own input.
    for i in range(6):
        assert plan.offsets[f"t{i}"] != plan.offsets[f"t{i + 1}"]


def test_an_alias_keeps_its_source_alive_and_shares_its_bytes() -> None:
    steps: list[Layer | Alias] = [
        layer("a", ("x",), ("big",)),
        Alias("view", "big"),
        layer("b", ("x",), ("other",)),
        layer("c", ("other",), ("third",)),
        layer("d", ("view", "third"), ("y",)),
    ]
    sizes = {"x": 64, "big": 640, "view": 640, "other": 640, "third": 640, "y": 64}
    plan = plan_memory(steps, ["x"], ["y"], sizes, alignment=64)
    assert plan.offsets["view"] == plan.offsets["big"]
    lifetime = {life.name: life for life in plan.lifetimes}
    assert lifetime["big"].last == 5  # read (as "view") by the fifth step
    assert not overlapping(list(plan.lifetimes), plan.offsets, plan.sizes)


def test_reading_a_tensor_nothing_produced_is_refused() -> None:
    with pytest.raises(PredictorError, match="'ghost'"):
        plan_memory([layer("a", ("ghost",), ("y",))], [], ["y"], {"y": 4}, alignment=64)


def test_random_lifetimes_never_share_live_bytes() -> None:
    rng = np.random.default_rng(7)
    for _ in range(50):
        lives = []
        for i in range(40):
            first = int(rng.integers(0, 30))
            lives.append(
                Lifetime(
                    f"t{i}", int(rng.integers(1, 5000)), first, first + int(rng.integers(0, 8))
                )
            )
        offsets, arena = assign_offsets(lives, alignment=128)
        sizes = {life.name: life.nbytes for life in lives}
        assert not overlapping(lives, offsets, sizes)
        assert all(offset % 128 == 0 for offset in offsets.values())
        assert arena >= max(offsets[life.name] + life.nbytes for life in lives)


def test_resnet50_plan_reuses_memory_and_never_aliases_live_tensors() -> None:
    graph = prepare(load_graph(locate(ZOO["resnet50"])))
    folded, shapes = fold_constants(graph, {"gpu_0/data_0": (1, 3, 224, 224)})
    fused = fuse(folded, shapes)
    steps = lower(
        fused, shapes, ConstantPool(), compute_units=2, local_memory_bytes=1 << 21, tiling=Tiling()
    )
    sizes = {name: 4 * math.prod(shape) for name, shape in shapes.items()}
    plan = plan_memory(steps, ["gpu_0/data_0"], list(fused.outputs), sizes, alignment=128)

    total = sum(life.nbytes for life in plan.lifetimes)
    largest_live = max(
        sum(life.nbytes for life in plan.lifetimes if life.first <= step <= life.last)
        for step in range(len(steps) + 2)
    )
    assert plan.arena_bytes < total / 5  # ResNet-50's activations share most bytes
    assert plan.arena_bytes <= 1.5 * largest_live  # and the greedy plan is near the bound
    assert not overlapping(list(plan.lifetimes), plan.offsets, plan.sizes)


# -- the device's tiling ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("preferred", "pixels"),
    [(1, 4), (4, 4), (8, 8), (16, 16), (32, 16)],
    ids=["a GPU preferring scalars", "SSE/NEON", "AVX2", "AVX-512", "wider"],
)
def test_the_tile_is_as_wide_as_the_devices_float_vectors(preferred: int, pixels: int) -> None:
    tiling = Tiling.for_vector_width(preferred)
    assert tiling == Tiling(channels=16, pixels=pixels)
    assert tiling.build_options() == ["-DDLSCOPE_TM=16", f"-DDLSCOPE_TP={pixels}"]


@pytest.mark.parametrize("pixels", [4, 8, 16])
def test_convolution_launches_and_weights_follow_the_tiling_the_program_was_built_with(
    pixels: int,
) -> None:
    weight = np.arange(20 * 3 * 3 * 3, dtype=np.float32).reshape(20, 3, 3, 3)
    graph = graph_of(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])],
        {"x": [2, 3, 20, 20]},
        ["y"],
        {"w": weight},
    )
    folded, shapes = fold_constants(graph, {"x": (2, 3, 20, 20)})
    pool = ConstantPool()
    tiling = Tiling(pixels=pixels)
    # No local memory: the im2col + GEMM path, whose grid is one item per 16 x pixels tile.
    (conv,) = lower(folded, shapes, pool, compute_units=2, local_memory_bytes=0, tiling=tiling)
    assert isinstance(conv, Layer)
    assert [launch.kernel for launch in conv.launches] == ["im2col", "conv_gemm"]
    assert conv.launches[1].global_size == (2, math.ceil(400 / pixels), 2)
    (packed,) = [a for name, a in pool.arrays.items() if name.startswith("w:")]
    assert packed.shape == (1, 2, 27, 16)  # [groups][ceil(20/16)][C*KH*KW][16]
    assert (packed[0, 1, :, :4] == weight[16:].reshape(4, 27).T).all()
    assert not packed[0, 1, :, 4:].any()  # channels past M are zeros
