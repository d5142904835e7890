"""The OpenCL engine computes what ONNX Runtime computes, on a real OpenCL device.

Each kernel is checked on small random graphs against ONNX Runtime, then whole models: the
zoo's digits CNN (trained here, on its test split) and the ImageNet graphs resnet50,
squeezenet and densenet121 (as shipped, and with random weights so that top-1 means
something). Agreement is a relative error max|a - b| / max|b| of at most 1e-4 in float32.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pyopencl as cl
import pytest
from onnx import TensorProto, helper, numpy_helper

from dlscope.zoo import BuiltModel
from services.workers.framework.opencl.devices import (
    BUILD_OPTIONS,
    OpenCLDevice,
    build_program,
    kernel_source,
    open_device,
)
from services.workers.framework.opencl.engine import Engine
from services.workers.framework.opencl.graph import graph_from_model
from services.workers.framework.opencl.settings import OpenCLSettings
from services.workers.framework.opencl.tiling import VECTOR_WIDTHS, Tiling
from services.workers.framework.predictors.opencl import OpenCLPredictor, device_capabilities
from shared.artifacts import locate
from shared.config import REPOSITORY_ROOT
from shared.errors import PredictorError
from shared.manifests import ModelManifest, load_manifest
from tests.conftest import opencl_problem


def _device_kind() -> str | None:
    try:
        devices = [d for p in cl.get_platforms() for d in p.get_devices()]
    except cl.Error:
        return None
    if not devices:
        return None
    return "cpu" if any(d.type & cl.device_type.CPU for d in devices) else "gpu"


HARDWARE = _device_kind()
# No device, or one whose compiler builds no kernel here: OpenCL is absent in all but name.
UNUSABLE = "pyopencl finds no OpenCL device here" if HARDWARE is None else opencl_problem(HARDWARE)
pytestmark = pytest.mark.skipif(
    UNUSABLE is not None, reason=f"OpenCL runs nothing here: {UNUSABLE}"
)

TOLERANCE = 1e-4
Shape = list[int | str]


def relative_error(ours: np.ndarray, theirs: np.ndarray) -> float:
    return float(np.abs(ours - theirs).max() / max(float(np.abs(theirs).max()), 1e-30))


@pytest.fixture(scope="module")
def device() -> OpenCLDevice:
    assert HARDWARE is not None
    return open_device(HARDWARE)


def model_of(
    nodes: list[onnx.NodeProto],
    inputs: dict[str, Shape],
    outputs: list[str],
    constants: dict[str, np.ndarray] | None = None,
    opset: int = 13,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "test",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        [numpy_helper.from_array(v, n) for n, v in (constants or {}).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def random(*shape: int, seed: int = 0, low: float | None = None) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if low is not None:
        return rng.uniform(low, low + 1.0, shape).astype(np.float32)
    return rng.standard_normal(shape).astype(np.float32)


def against_onnxruntime(
    device: OpenCLDevice, model: onnx.ModelProto, feeds: dict[str, np.ndarray]
) -> Engine:
    """Run ``model`` on both; assert every output agrees; the engine, for more checks."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    engine = Engine(graph_from_model(model), device)
    got = engine.run(feeds)
    assert len(got) == len(expected)
    for ours, theirs in zip(got, expected, strict=True):
        assert ours.shape == theirs.shape
        assert relative_error(ours, theirs) <= TOLERANCE
    return engine


# -- convolution -----------------------------------------------------------------------------

CONVOLUTIONS: dict[str, tuple[list[int], list[int], dict[str, Any]]] = {
    # name: (input shape, weight shape, attributes)
    "3x3 pad 1, tiles along rows": ([2, 3, 20, 20], [16, 3, 3, 3], {"pads": [1, 1, 1, 1]}),
    "stride 2, asymmetric pads": (
        [1, 4, 33, 33],
        [24, 4, 3, 3],
        {"strides": [2, 2], "pads": [0, 1, 1, 0]},
    ),
    "dilation 2": ([1, 3, 24, 24], [12, 3, 3, 3], {"dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    "2 groups": ([1, 8, 18, 18], [16, 4, 3, 3], {"group": 2, "pads": [1, 1, 1, 1]}),
    "depthwise": ([1, 8, 12, 12], [8, 1, 3, 3], {"group": 8, "pads": [1, 1, 1, 1]}),
    "SAME_UPPER, even kernel, stride 2": (
        [1, 3, 15, 15],
        [16, 3, 4, 4],
        {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
    ),
    "SAME_LOWER": ([1, 3, 17, 17], [16, 3, 4, 4], {"auto_pad": "SAME_LOWER"}),
    "VALID": ([1, 3, 17, 17], [16, 3, 5, 5], {"auto_pad": "VALID"}),
    "1x1, channels not a multiple of 16": ([2, 32, 9, 9], [40, 32, 1, 1], {}),
    "1x1 stride 2": ([1, 16, 20, 20], [32, 16, 1, 1], {"strides": [2, 2]}),
    "fewer than 16 output pixels": ([1, 16, 3, 3], [32, 16, 3, 3], {}),
    "few output channels": ([1, 3, 20, 20], [5, 3, 3, 3], {"pads": [1, 1, 1, 1]}),
    "1-D": ([2, 4, 30], [16, 4, 5], {"pads": [2, 2]}),
}


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no bias"])
@pytest.mark.parametrize("case", sorted(CONVOLUTIONS))
def test_conv(device: OpenCLDevice, case: str, bias: bool) -> None:
    x_shape, w_shape, attrs = CONVOLUTIONS[case]
    inputs = ["x", "w", "b"] if bias else ["x", "w"]
    constants = {"w": random(*w_shape, seed=1) * 0.3, "b": random(w_shape[0], seed=2)}
    model = model_of(
        [helper.make_node("Conv", inputs, ["y"], **attrs)],
        {"x": list(x_shape)},
        ["y"],
        constants if bias else {"w": constants["w"]},
    )
    against_onnxruntime(device, model, {"x": random(*x_shape)})


@pytest.mark.parametrize(
    "case",
    [
        "3x3 pad 1, tiles along rows",
        "stride 2, asymmetric pads",
        "1x1, channels not a multiple of 16",
    ],
)
def test_conv_on_a_device_with_little_local_memory_goes_through_im2col(
    device: OpenCLDevice, case: str
) -> None:
    small = dataclasses.replace(device, info=dataclasses.replace(device.info, local_memory_bytes=0))
    x_shape, w_shape, attrs = CONVOLUTIONS[case]
    model = model_of(
        [helper.make_node("Conv", ["x", "w"], ["y"], **attrs)],
        {"x": list(x_shape)},
        ["y"],
        {"w": random(*w_shape, seed=1)},
    )
    engine = against_onnxruntime(device=small, model=model, feeds={"x": random(*x_shape)})
    kernels = [t.kernels for t in engine.layer_timings()]
    assert kernels == ([1] if case.startswith("1x1") else [2])  # im2col, then the GEMM


def with_tiling(device: OpenCLDevice, tiling: Tiling) -> OpenCLDevice:
    """``device`` with the kernels built for another vector width than its own."""
    options = BUILD_OPTIONS + tiling.build_options()
    program = build_program(device.context, device.context.devices[0], kernel_source(), options)
    return dataclasses.replace(device, program=program, tiling=tiling)


def test_the_program_is_built_for_the_devices_vector_width(device: OpenCLDevice) -> None:
    assert device.tiling == Tiling.for_vector_width(device.info.float_vector_width)


@pytest.mark.parametrize("width", VECTOR_WIDTHS)
def test_every_vector_width_computes_what_onnxruntime_does(
    device: OpenCLDevice, width: int
) -> None:
    """Whatever width a device asks for (4: SSE, NEON, GPUs; 8: AVX2; 16: AVX-512), the
    kernels and lowering agree: tiles along rows and over the image, every activation in the
    tile's epilogue (sigmoid lane by lane), im2col, and the dense kernel's vector loop."""
    tiled = with_tiling(device, Tiling(pixels=width))
    cases = ["3x3 pad 1, tiles along rows", "stride 2, asymmetric pads", "1x1 stride 2", "1-D"]
    for case in cases:
        x_shape, w_shape, attrs = CONVOLUTIONS[case]
        for activation in ("Relu", "Sigmoid", "LeakyRelu"):
            model = model_of(
                [
                    helper.make_node("Conv", ["x", "w", "b"], ["c"], **attrs),
                    helper.make_node(activation, ["c"], ["y"]),
                ],
                {"x": list(x_shape)},
                ["y"],
                {"w": random(*w_shape, seed=1) * 0.3, "b": random(w_shape[0], seed=2)},
            )
            engine = against_onnxruntime(tiled, model, {"x": random(*x_shape)})
            assert [t.op_type for t in engine.layer_timings()] == ["Conv"]  # one epilogue
    small = dataclasses.replace(tiled, info=dataclasses.replace(tiled.info, local_memory_bytes=0))
    x_shape, w_shape, attrs = CONVOLUTIONS["3x3 pad 1, tiles along rows"]
    model = model_of(
        [helper.make_node("Conv", ["x", "w"], ["y"], **attrs)],
        {"x": list(x_shape)},
        ["y"],
        {"w": random(*w_shape, seed=1)},
    )
    against_onnxruntime(small, model, {"x": random(*x_shape)})
    dense = model_of(
        [helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)],
        {"x": [5, 37]},
        ["y"],
        {"w": random(9, 37, seed=3), "b": random(9, seed=4)},
    )
    against_onnxruntime(tiled, dense, {"x": random(5, 37)})


def test_conv_fuses_batch_norm_residual_add_and_relu(device: OpenCLDevice) -> None:
    rng = np.random.default_rng(3)
    constants = {
        "w1": random(16, 16, 3, 3, seed=4) * 0.2,
        "w2": random(16, 16, 1, 1, seed=5) * 0.2,
        "s": rng.uniform(0.5, 1.5, 16).astype(np.float32),
        "beta": random(16, seed=6),
        "mean": random(16, seed=7),
        "var": rng.uniform(0.5, 1.5, 16).astype(np.float32),
        "lo": np.array(0.0, np.float32),
        "hi": np.array(6.0, np.float32),
    }
    model = model_of(
        [
            helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
            helper.make_node(
                "BatchNormalization", ["c1", "s", "beta", "mean", "var"], ["n1"], name="bn1"
            ),
            helper.make_node("Clip", ["n1", "lo", "hi"], ["r1"], name="relu6"),
            helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2"),
            helper.make_node("Add", ["c2", "x"], ["sum"], name="residual"),
            helper.make_node("Relu", ["sum"], ["y"], name="relu"),
        ],
        {"x": [2, 16, 17, 17]},
        ["y"],
        constants,
    )
    engine = against_onnxruntime(device, model, {"x": random(2, 16, 17, 17)})
    layers = [(t.node, t.op_type, t.fused) for t in engine.layer_timings()]
    assert layers == [("conv1", "Conv", ("bn1", "relu6")), ("conv2", "Conv", ("residual", "relu"))]


# -- matrix products -----------------------------------------------------------------------


def test_gemm_with_constant_weights_and_bias(device: OpenCLDevice) -> None:
    model = model_of(
        [helper.make_node("Gemm", ["x", "w", "c"], ["y"], transB=1, alpha=0.5, beta=2.0)],
        {"x": [5, 37]},
        ["y"],
        {"w": random(23, 37, seed=1), "c": random(23, seed=2)},
    )
    against_onnxruntime(device, model, {"x": random(5, 37)})


def test_gemm_with_a_matrix_c_and_transposed_a(device: OpenCLDevice) -> None:
    model = model_of(
        [helper.make_node("Gemm", ["a", "w", "c"], ["y"], transA=1)],
        {"a": [19, 6]},
        ["y"],
        {"w": random(19, 7, seed=1), "c": random(6, 7, seed=2)},
    )
    against_onnxruntime(device, model, {"a": random(19, 6)})


@pytest.mark.parametrize("c_constant", [True, False], ids=["constant C", "run-time C"])
def test_gemm_with_constant_weights_and_a_matrix_c(device: OpenCLDevice, c_constant: bool) -> None:
    c = random(5, 23, seed=2)
    model = model_of(
        [helper.make_node("Gemm", ["x", "w", "c"], ["y"], beta=0.5 if c_constant else 1.0)],
        {"x": [5, 37]} if c_constant else {"x": [5, 37], "c": [5, 23]},
        ["y"],
        {"w": random(37, 23, seed=1), "c": c} if c_constant else {"w": random(37, 23, seed=1)},
    )
    feeds = {"x": random(5, 37)} if c_constant else {"x": random(5, 37), "c": c}
    against_onnxruntime(device, model, feeds)


def test_gemm_of_two_run_time_tensors(device: OpenCLDevice) -> None:
    model = model_of(
        [helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=1, alpha=1.5)],
        {"a": [4, 9], "b": [3, 9], "c": [1, 3]},
        ["y"],
    )
    feeds = {"a": random(4, 9), "b": random(3, 9, seed=1), "c": random(1, 3, seed=2)}
    against_onnxruntime(device, model, feeds)


def test_matmul_by_a_constant_absorbs_its_bias_and_activation(device: OpenCLDevice) -> None:
    model = model_of(
        [
            helper.make_node("MatMul", ["x", "w"], ["p"], name="matmul"),
            helper.make_node("Add", ["p", "b"], ["q"], name="bias"),
            helper.make_node("Sigmoid", ["q"], ["y"], name="sigmoid"),
        ],
        {"x": [2, 3, 40]},
        ["y"],
        {"w": random(40, 18, seed=1), "b": random(18, seed=2)},
    )
    engine = against_onnxruntime(device, model, {"x": random(2, 3, 40)})
    assert [(t.op_type, t.fused) for t in engine.layer_timings()] == [
        ("MatMul", ("bias", "sigmoid"))
    ]


@pytest.mark.parametrize(
    ("a", "b"),
    [([2, 1, 4, 5], [3, 5, 6]), ([7], [7, 3]), ([2, 4, 7], [7])],
    ids=["broadcast batches", "vector times matrix", "matrix times vector"],
)
def test_matmul_of_run_time_tensors(device: OpenCLDevice, a: list[int], b: list[int]) -> None:
    model = model_of([helper.make_node("MatMul", ["a", "b"], ["y"])], {"a": a, "b": b}, ["y"])
    against_onnxruntime(device, model, {"a": random(*a), "b": random(*b, seed=1)})


# -- element-wise ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "attrs", "extra", "opset"),
    [
        ("Relu", {}, {}, 13),
        ("LeakyRelu", {"alpha": 0.2}, {}, 13),
        ("Sigmoid", {}, {}, 13),
        ("Clip", {}, {"lo": np.array(-0.5, np.float32)}, 13),
        ("Clip", {"min": -0.3, "max": 0.7}, {}, 6),
    ],
    ids=["relu", "leaky relu", "sigmoid", "clip (min input)", "clip (opset 6)"],
)
def test_activation(
    device: OpenCLDevice, op: str, attrs: dict[str, float], extra: dict[str, np.ndarray], opset: int
) -> None:
    model = model_of(
        [helper.make_node(op, ["x", *extra], ["y"], **attrs)], {"x": [3, 70]}, ["y"], extra, opset
    )
    against_onnxruntime(device, model, {"x": random(3, 70)})


@pytest.mark.parametrize(
    ("op", "a", "b", "b_constant"),
    [
        ("Add", [2, 3, 4, 5], [3, 1, 1], True),
        ("Mul", [2, 3, 4, 5], [5], True),
        ("Sub", [2, 3, 4, 5], [], True),
        ("Div", [2, 1, 4, 1], [1, 3, 1, 5], False),
        ("Add", [4, 6], [4, 6], False),
    ],
)
def test_binary_with_broadcasting(
    device: OpenCLDevice, op: str, a: list[int], b: list[int], b_constant: bool
) -> None:
    b_value = random(*b, seed=1, low=0.5)
    model = model_of(
        [helper.make_node(op, ["a", "b"], ["y"])],
        {"a": a} if b_constant else {"a": a, "b": b},
        ["y"],
        {"b": b_value} if b_constant else None,
    )
    feeds = {"a": random(*a)} if b_constant else {"a": random(*a), "b": b_value}
    against_onnxruntime(device, model, feeds)


def test_sum_of_three_broadcast_inputs(device: OpenCLDevice) -> None:
    model = model_of(
        [helper.make_node("Sum", ["a", "b", "c"], ["y"])],
        {"a": [3], "b": [2, 3], "c": [4, 1, 1]},
        ["y"],
    )
    against_onnxruntime(
        device, model, {"a": random(3), "b": random(2, 3, seed=1), "c": random(4, 1, 1, seed=2)}
    )


def test_batch_normalization_alone_absorbs_per_channel_scale_shift_and_relu(
    device: OpenCLDevice,
) -> None:
    # DenseNet's pre-activation: BatchNormalization, Mul and Add by per-channel constants, Relu.
    rng = np.random.default_rng(1)
    constants = {
        "s": rng.uniform(0.5, 1.5, 6).astype(np.float32),
        "beta": random(6, seed=2),
        "mean": random(6, seed=3),
        "var": rng.uniform(0.5, 1.5, 6).astype(np.float32),
        "scale": random(6, 1, 1, seed=4),
        "shift": random(6, 1, 1, seed=5),
    }
    model = model_of(
        [
            helper.make_node(
                "BatchNormalization", ["x", "s", "beta", "mean", "var"], ["n"], name="bn"
            ),
            helper.make_node("Mul", ["n", "scale"], ["m"], name="scale"),
            helper.make_node("Add", ["m", "shift"], ["a"], name="shift"),
            helper.make_node("Relu", ["a"], ["y"], name="relu"),
        ],
        {"x": [2, 6, 5, 7]},
        ["y"],
        constants,
    )
    engine = against_onnxruntime(device, model, {"x": random(2, 6, 5, 7)})
    assert [(t.op_type, t.fused) for t in engine.layer_timings()] == [
        ("BatchNormalization", ("scale", "shift", "relu"))
    ]


# -- pooling -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "x_shape", "attrs"),
    [
        (
            "MaxPool",
            [2, 3, 15, 15],
            {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
        ),
        ("MaxPool", [1, 2, 14, 14], {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
        ("MaxPool", [1, 2, 12, 12], {"kernel_shape": [2, 2], "dilations": [2, 2]}),
        ("MaxPool", [1, 3, 20], {"kernel_shape": [4], "strides": [3], "auto_pad": "SAME_UPPER"}),
        ("AveragePool", [2, 3, 9, 9], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
        (
            "AveragePool",
            [2, 3, 9, 9],
            {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
        ),
        (
            "AveragePool",
            [1, 2, 14, 14],
            {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
        ),
        ("GlobalAveragePool", [2, 5, 7, 7], {}),
        ("GlobalMaxPool", [2, 5, 6, 4], {}),
    ],
    ids=[
        "max pads",
        "max ceil",
        "max dilations",
        "max 1-D same",
        "average pads",
        "average counting pads",
        "average ceil",
        "global average",
        "global max",
    ],
)
def test_pooling(device: OpenCLDevice, op: str, x_shape: list[int], attrs: dict[str, Any]) -> None:
    model = model_of([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": x_shape}, ["y"], opset=13)
    against_onnxruntime(device, model, {"x": random(*x_shape)})


# -- layout, normalisation -------------------------------------------------------------------


def test_concat_flatten_reshape_transpose_squeeze(device: OpenCLDevice) -> None:
    model = model_of(
        [
            helper.make_node("Concat", ["a", "b", "k"], ["c"], axis=1),
            helper.make_node("Transpose", ["c"], ["t"], perm=[0, 2, 1, 3]),
            helper.make_node("Reshape", ["t", "shape"], ["r"]),
            helper.make_node("Unsqueeze", ["r", "axes"], ["u"]),
            helper.make_node("Squeeze", ["u", "axes"], ["s"]),
            helper.make_node("Flatten", ["s"], ["f"], axis=2),
            helper.make_node("Concat", ["f", "f"], ["y"], axis=-1),
        ],
        {"a": [2, 3, 4, 5], "b": [2, 1, 4, 5]},
        ["y", "t"],
        {
            "k": random(2, 2, 4, 5, seed=2),
            "shape": np.array([0, 4, -1], np.int64),
            "axes": np.array([1], np.int64),
        },
    )
    against_onnxruntime(device, model, {"a": random(2, 3, 4, 5), "b": random(2, 1, 4, 5, seed=1)})


def test_five_dimensional_transpose_of_a_channel_shuffle(device: OpenCLDevice) -> None:
    model = model_of(
        [
            helper.make_node("Reshape", ["x", "groups"], ["g"]),
            helper.make_node("Transpose", ["g"], ["t"], perm=[0, 2, 1, 3, 4]),
            helper.make_node("Reshape", ["t", "back"], ["y"]),
        ],
        {"x": [2, 12, 5, 5]},
        ["y"],
        {"groups": np.array([2, 3, 4, 5, 5], np.int64), "back": np.array([2, 12, 5, 5], np.int64)},
    )
    against_onnxruntime(device, model, {"x": random(2, 12, 5, 5)})


@pytest.mark.parametrize(("opset", "axis"), [(11, 1), (13, 1), (13, -1)])
def test_softmax(device: OpenCLDevice, opset: int, axis: int) -> None:
    model = model_of(
        [helper.make_node("Softmax", ["x"], ["y"], axis=axis)],
        {"x": [2, 5, 3, 4]},
        ["y"],
        opset=opset,
    )
    against_onnxruntime(device, model, {"x": random(2, 5, 3, 4) * 3})


def test_lrn_dropout_and_identity(device: OpenCLDevice) -> None:
    model = model_of(
        [
            helper.make_node("LRN", ["x"], ["l"], size=5, alpha=1e-3, beta=0.75, bias=2.0),
            helper.make_node("Dropout", ["l"], ["d", "mask"], name="dropout"),
            helper.make_node("Identity", ["d"], ["y"]),
        ],
        {"x": [2, 7, 4, 4]},
        ["y"],
    )
    against_onnxruntime(device, model, {"x": random(2, 7, 4, 4) * 4})


def test_a_shape_chain_is_folded_per_batch_size_and_each_plan_is_kept(device: OpenCLDevice) -> None:
    model = model_of(
        [
            helper.make_node("Shape", ["x"], ["shape"]),
            helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
            helper.make_node("Unsqueeze", ["batch", "axes"], ["batch_1d"]),
            helper.make_node("Concat", ["batch_1d", "rest"], ["target"], axis=0),
            helper.make_node("Reshape", ["x", "target"], ["flat"]),
            helper.make_node("MatMul", ["flat", "w"], ["y"]),
        ],
        {"x": ["n", 2, 4, 4]},
        ["y"],
        {
            "zero": np.array(0, np.int64),
            "axes": np.array([0], np.int64),
            "rest": np.array([-1], np.int64),
            "w": random(32, 3, seed=1),
        },
    )
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    engine = Engine(graph_from_model(model), device)
    for batch in (1, 3, 1):
        x = random(batch, 2, 4, 4, seed=batch)
        (ours,) = engine.run({"x": x})
        assert relative_error(ours, session.run(None, {"x": x})[0]) <= TOLERANCE
    shapes = ((3, 2, 4, 4),)
    assert engine.plan(shapes) is engine.plan(shapes)
    with pytest.raises(PredictorError, match=r"takes \('\?', 2, 4, 4\)"):
        engine.run({"x": random(1, 3, 4, 4)})


# -- the predictor, the device, its errors ---------------------------------------------------


def manifest_for(
    path: Path, inputs: dict[str, list[int]], outputs: dict[str, list[int]]
) -> ModelManifest:
    return ModelManifest.model_validate(
        {
            "name": "opencl-test",
            "version": "1.0.0",
            "framework": {"name": "opencl"},
            "inputs": [{"name": n, "shape": s} for n, s in inputs.items()],
            "outputs": [{"name": n, "shape": s} for n, s in outputs.items()],
            "source": {"uri": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()},
        }
    )


@pytest.fixture
def small_model(tmp_path: Path) -> tuple[ModelManifest, Path]:
    model = model_of(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"], name="relu"),
            helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
            helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
            helper.make_node("Gemm", ["f", "fc"], ["logits"], name="fc", transB=1),
            helper.make_node("Softmax", ["logits"], ["y"], name="softmax"),
        ],
        {"x": ["n", 3, 16, 16]},
        ["y"],
        {"w": random(16, 3, 3, 3, seed=1), "fc": random(10, 16, seed=2)},
    )
    path = tmp_path / "small.onnx"
    onnx.save(model, path)
    return manifest_for(path, {"x": [-1, 3, 16, 16]}, {"y": [-1, 10]}), path


@pytest.fixture
def predictor() -> Iterator[OpenCLPredictor]:
    opened = OpenCLPredictor(OpenCLSettings())
    yield opened
    opened.close()


def test_predictor_describes_its_device_and_keeps_per_layer_timings(
    predictor: OpenCLPredictor, small_model: tuple[ModelManifest, Path]
) -> None:
    manifest, path = small_model
    assert HARDWARE is not None
    assert predictor.layer_timings() == []
    predictor.open(manifest, path, hardware=HARDWARE)
    (probabilities,) = predictor.predict({"x": random(4, 3, 16, 16)})
    assert probabilities.shape == (4, 10)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)

    timings = predictor.layer_timings()
    assert [(t.node, t.op_type, t.fused) for t in timings] == [
        ("conv", "Conv", ("relu",)),
        ("pool", "GlobalAveragePool", ()),
        ("fc", "Gemm", ()),
        ("softmax", "Softmax", ()),
    ]
    assert timings[0].input_shapes == ((4, 3, 16, 16), (16, 3, 3, 3))
    assert timings[0].output_shapes == ((4, 16, 16, 16),)
    for timing in timings:
        assert timing.queued_ns <= timing.submit_ns <= timing.start_ns <= timing.end_ns
        assert timing.as_dict()["duration_ns"] == timing.end_ns - timing.start_ns
    # One in-order queue: each layer starts once the one before it has ended.
    for before, after in itertools.pairwise(timings):
        assert after.start_ns >= before.end_ns

    description = predictor.describe()
    assert description["framework"] == "opencl"
    device = description["device"]
    for key in ("platform", "name", "vendor", "version", "compute_units", "global_memory_bytes"):
        assert device[key]
    assert device["emulated"] is False
    assert description["program"] == "source"


def test_device_capabilities_name_the_device(device: OpenCLDevice) -> None:
    assert HARDWARE is not None
    capabilities = device_capabilities(HARDWARE)
    assert capabilities["opencl"]["name"] == device.info.name
    assert capabilities["opencl"]["compute_units"] >= 1


def test_an_unsupported_operator_fails_at_open_naming_it(
    predictor: OpenCLPredictor, tmp_path: Path
) -> None:
    model = model_of(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Erf", ["r"], ["y"], name="erf")],
        {"x": [1, 4]},
        ["y"],
    )
    path = tmp_path / "erf.onnx"
    onnx.save(model, path)
    assert HARDWARE is not None
    with pytest.raises(
        PredictorError, match=r"does not support 1 operator type\(s\).*Erf \(nodes: erf\)"
    ):
        predictor.open(manifest_for(path, {"x": [1, 4]}, {"y": [1, 4]}), path, hardware=HARDWARE)


def test_a_corrupt_model_file_fails_naming_the_model(
    predictor: OpenCLPredictor, small_model: tuple[ModelManifest, Path], tmp_path: Path
) -> None:
    manifest, path = small_model
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(path.read_bytes()[:100] + b"\x00not a model\xff" * 64)
    assert HARDWARE is not None
    with pytest.raises(
        PredictorError, match=r"opencl cannot run opencl-test@1\.0\.0: .* not a readable ONNX model"
    ):
        predictor.open(manifest, corrupt, hardware=HARDWARE)


# A program that does not build: the error names the device, the OpenCL implementation's
# version (PoCL's names its LLVM) and the build log, and the process goes on.
BROKEN_PROGRAMS = {
    "a compile error": (
        "__kernel void broken(__global float* y) { y[0] = undeclared_name; }",
        r"the OpenCL kernels do not build on .*; build log:\n.*undeclared_name",
    ),
    "a kernel the program lacks": (
        "#if 0\n__kernel void left_out(__global float* y) { y[0] = 1.0f; }\n#endif\n"
        "__kernel void kept(__global float* y) { y[0] = 1.0f; }",
        r"the OpenCL program built from source on .* lacks kernels the engine needs: left_out",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN_PROGRAMS))
def test_a_program_that_does_not_build_fails_naming_device_platform_and_log(
    device: OpenCLDevice, case: str
) -> None:
    source, expected = BROKEN_PROGRAMS[case]
    context = cl.Context(device.context.devices)
    with pytest.raises(PredictorError) as raised:
        build_program(context, context.devices[0], source, BUILD_OPTIONS)
    message = str(raised.value)
    assert device.info.name in message
    assert device.info.platform_version in message  # "... PoCL 3.0-rc2 ... LLVM 14.0.6 ..."
    assert re.search(expected, message, re.DOTALL)


def test_a_vector_argument_whose_abi_the_target_changes_is_refused_before_running(
    device: OpenCLDevice,
) -> None:
    """A float16 helper on a CPU target without AVX-512 (PoCL 3.0 on a Zen 4 compiles for
    znver3): clang only warns, and the kernel would crash or read garbage when run."""
    source = (
        "float16 twice(float16 v) { return v + v; }\n"
        "__kernel void k(__global float* y) { float16 v = twice((float16)(1.0f)); y[0] = v.s0; }"
    )
    context = cl.Context(device.context.devices)
    try:
        build_program(context, context.devices[0], source, BUILD_OPTIONS)
    except PredictorError as exc:
        message = str(exc)
    else:
        pytest.skip(f"{device.info.name} passes float16 arguments natively")
    assert device.info.name in message
    assert "changes the ABI" in message


def test_a_bogus_program_binary_fails_clearly(
    tmp_path: Path, small_model: tuple[ModelManifest, Path]
) -> None:
    binary = tmp_path / "board.aocx"
    binary.write_bytes(b"\x7fELF" + bytes(256))
    predictor = OpenCLPredictor(OpenCLSettings(binary=binary))
    manifest, path = small_model
    with pytest.raises(
        PredictorError, match=r"board\.aocx does not load on .*built for another device"
    ):
        predictor.open(manifest, path, hardware="fpga")


def test_a_precompiled_binary_runs_on_the_emulated_fpga(
    device: OpenCLDevice, tmp_path: Path, small_model: tuple[ModelManifest, Path]
) -> None:
    if device.info.device_type != "cpu":
        pytest.skip("the FPGA flow is emulated on a CPU device")
    binary = tmp_path / "dlscope.bin"
    binary.write_bytes(device.program.binaries[0])  # as a board's toolchain would, ahead of time
    manifest, path = small_model
    predictor = OpenCLPredictor(OpenCLSettings(binary=binary))
    predictor.open(manifest, path, hardware="fpga")
    x = random(2, 3, 16, 16)
    (ours,) = predictor.predict({"x": x})
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert relative_error(ours, session.run(None, {"x": x})[0]) <= TOLERANCE
    described = predictor.describe()
    assert described["device"]["emulated"] is True
    assert described["program"] == str(binary)
    predictor.close()


def test_a_plan_that_does_not_fit_the_device_fails_before_running(device: OpenCLDevice) -> None:
    tiny = dataclasses.replace(
        device, info=dataclasses.replace(device.info, global_memory_bytes=1024**2)
    )
    engine = Engine.load(locate(SQUEEZENET_URI), tiny)
    with pytest.raises(PredictorError, match=r"needs \d+\.\d MiB of device memory .* has 1\.0 MiB"):
        engine.plan(((1, 3, 224, 224),))


def test_a_missing_device_type_is_refused_listing_the_devices_there(
    predictor: OpenCLPredictor, small_model: tuple[ModelManifest, Path]
) -> None:
    if any(d.type & cl.device_type.GPU for p in cl.get_platforms() for d in p.get_devices()):
        pytest.skip("there is an OpenCL GPU here")
    manifest, path = small_model
    with pytest.raises(PredictorError, match=r"no OpenCL gpu device here; found: .*\(cpu, "):
        predictor.open(manifest, path, hardware="gpu")


def test_unknown_hardware_is_refused(
    predictor: OpenCLPredictor, small_model: tuple[ModelManifest, Path]
) -> None:
    manifest, path = small_model
    with pytest.raises(PredictorError, match="cpu, gpu or fpga, not 'tpu'"):
        predictor.open(manifest, path, hardware="tpu")


# -- whole models ------------------------------------------------------------------------------

SQUEEZENET_URI = "pkg://onnx/backend/test/data/light/light_squeezenet.onnx"


def randomised(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """``model`` with its placeholder weights (ConstantOfShape nodes, all 0.02) replaced by
    random ones, scaled so that activations stay in range and top-1 is well defined."""
    rng = np.random.default_rng(seed)
    graph = model.graph
    initializers = {t.name: t for t in graph.initializer}
    readers: dict[str, tuple[onnx.NodeProto, int]] = {}
    for node in graph.node:
        for index, name in enumerate(node.input):
            readers.setdefault(name, (node, index))

    def role(name: str) -> tuple[str, int]:
        node, index = readers[name]
        return role(node.output[0]) if node.op_type == "Unsqueeze" else (node.op_type, index)

    kept = []
    for node in graph.node:
        if node.op_type != "ConstantOfShape":
            kept.append(node)
            continue
        shape = tuple(int(d) for d in numpy_helper.to_array(initializers[node.input[0]]))
        op, index = role(node.output[0])
        if op in ("Conv", "Gemm") and index == 1:
            value = rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))
        elif (op == "BatchNormalization" and index in (1, 4)) or op == "Mul":
            value = rng.uniform(0.5, 1.5, shape)
        else:
            value = rng.standard_normal(shape) * 0.1
        graph.initializer.append(numpy_helper.from_array(value.astype(np.float32), node.output[0]))
    del graph.node[:]
    graph.node.extend(kept)
    return model


@pytest.mark.parametrize("name", ["resnet50", "squeezenet", "densenet121"])
def test_zoo_model_agrees_with_onnxruntime(device: OpenCLDevice, name: str, tmp_path: Path) -> None:
    manifest = load_manifest(REPOSITORY_ROOT / "manifests" / "models" / f"{name}.yaml")
    assert isinstance(manifest, ModelManifest)
    (spec,) = manifest.inputs
    x = random(*spec.shape, seed=11)

    # As the zoo ships it, through the predictor.
    predictor = OpenCLPredictor(OpenCLSettings())
    path = locate(manifest.source.uri)
    assert HARDWARE is not None
    predictor.open(manifest, path, hardware=HARDWARE)
    (ours,) = predictor.predict({spec.name: x})
    predictor.close()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (theirs,) = session.run(None, {spec.name: x})
    assert relative_error(ours, theirs) <= TOLERANCE

    # With random weights, the classes differ and top-1 means something.
    model = randomised(onnx.load(str(path)))
    engine = against_onnxruntime(device, model, {spec.name: x})
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (theirs,) = session.run(None, {spec.name: x})
    (ours,) = engine.run({spec.name: x})
    assert ours.reshape(-1).argmax() == theirs.reshape(-1).argmax()


@pytest.fixture(scope="module")
def digits(digits_zoo: list[BuiltModel]) -> ModelManifest:
    built = {m.manifest.framework.name: m for m in digits_zoo}
    return built["onnxruntime"].manifest


def test_digits_cnn_agrees_with_onnxruntime_on_its_test_split(digits: ModelManifest) -> None:
    from shared.datasets import load_dataset
    from shared.manifests import DatasetManifest
    from shared.processing import preprocess_batch

    dataset_manifest = load_manifest(REPOSITORY_ROOT / "manifests" / "datasets" / "digits.yaml")
    assert isinstance(dataset_manifest, DatasetManifest)
    test = load_dataset(dataset_manifest, "test")
    assert test.labels is not None
    images = np.asarray(preprocess_batch(digits.inputs[0].steps, test.samples), dtype=np.float32)

    path = Path(digits.source.uri)
    opencl = OpenCLPredictor(OpenCLSettings())
    assert HARDWARE is not None
    opencl.open(digits, path, hardware=HARDWARE)
    (ours,) = opencl.predict({"input": images})
    timings = opencl.layer_timings()
    opencl.close()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (theirs,) = session.run(None, {"input": images})

    assert relative_error(ours, theirs) <= TOLERANCE
    assert (ours.argmax(axis=1) == theirs.argmax(axis=1)).all()
    accuracy = float((ours.argmax(axis=1) == test.labels).mean())
    assert accuracy == pytest.approx(digits.attributes["accuracy"]["top1"])
    assert [t.op_type for t in timings] == ["Conv", "Conv", "MaxPool", "Gemm"]
