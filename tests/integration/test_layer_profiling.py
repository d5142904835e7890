"""Every framework reports its layers through its own profiler, in passes after the timed
one: the zoo's digits CNN measured at trace level ``full`` on ONNX Runtime, PyTorch,
TensorFlow and the OpenCL engine (each skipped where it is not installed, saying why).

Each pass's layers are placed on the wall clock inside the query that ran them; every level
is reported, captured with its overhead or not with its reason; and the four frameworks'
layer summaries line up: the same convolutions, pooling and matrix product.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import torch

from dlscope.zoo import BuiltModel
from dlscope.zoo.export import export_torchscript
from services.workers.framework.frameworks import framework_for
from services.workers.framework.sessions import session_for
from services.workers.handover import JobInputs, Run
from shared.artifacts import ArtifactCache, sha256_of
from shared.breakdown import align, kind_of
from shared.errors import ConfigurationError
from shared.manifests import ModelManifest, ModelSource
from shared.messages import EvaluationProfiled, RunEvaluation, Scenario, TraceLevel
from tests.conftest import opencl_problem

FRAMEWORKS = ["onnxruntime", "pytorch", "tensorflow", "opencl"]
QUICK = Scenario(iterations=16, min_duration_s=0, warmup=0)


@pytest.fixture(scope="session")
def zoo(digits_zoo: list[BuiltModel]) -> dict[str, BuiltModel]:
    return {m.manifest.framework.name: m for m in digits_zoo}


def _measure(
    framework: str,
    manifest: ModelManifest,
    tmp_path: Path,
    level: TraceLevel = "full",
) -> Run:
    try:
        factory = framework_for(framework)
    except ConfigurationError as exc:
        pytest.skip(str(exc))
    if framework == "opencl" and (why := opencl_problem("cpu")) is not None:
        pytest.skip(f"OpenCL runs nothing here: {why}")
    # Fetched as a worker fetches it: verified, an archive (a SavedModel) unpacked.
    path = ArtifactCache(tmp_path / "artifacts").fetch(manifest.source)
    job = RunEvaluation(
        evaluation_id=uuid.uuid4(),
        manifest=manifest,
        framework=framework,  # type: ignore[arg-type]
        framework_version="*",
        hardware="cpu",
        scenario=QUICK,
        trace_level=level,
        trace_queries=3,
    )
    return session_for(factory, job).measure(
        job, JobInputs(model=path, results_dir=tmp_path / "results")
    )


@pytest.fixture(scope="session")
def runs(
    zoo: dict[str, BuiltModel], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Run | str]:
    """Each framework's run at level full, or why it could not run here."""
    done: dict[str, Run | str] = {}
    for framework in FRAMEWORKS:
        model = zoo["onnxruntime" if framework == "opencl" else framework]
        try:
            done[framework] = _measure(framework, model.manifest, tmp_path_factory.mktemp("run"))
        except pytest.skip.Exception as skipped:
            done[framework] = str(skipped)
    return done


def _run(runs: dict[str, Run | str], framework: str) -> Run:
    run = runs[framework]
    if isinstance(run, str):
        pytest.skip(run)
    return run


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_framework_level_reports_layers_inside_their_queries(
    runs: dict[str, Run | str], framework: str
) -> None:
    run = _run(runs, framework)
    outcomes = {outcome.level: outcome for outcome in run.tracing.outcomes}
    # Every level of "full" is reported: captured, or why not.
    assert list(outcomes) == ["application", "model", "framework", "library", "hardware"]
    for outcome in outcomes.values():
        assert outcome.captured or outcome.reason
    framework_level = outcomes["framework"]
    assert framework_level.captured, framework_level.reason
    assert framework_level.queries == 3
    assert framework_level.overhead is not None
    assert framework_level.overhead > 0
    assert framework_level.traced_p50_ns
    assert framework_level.untraced_p50_ns

    (traced,) = [p for p in run.tracing.passes if p.level == "framework"]
    for query in traced.queries:
        assert query.layers
        for layer in query.layers:
            assert query.start_ns <= layer.start_ns <= query.end_ns
            assert layer.end_ns >= layer.start_ns
    (summary,) = [p for p in run.tracing.profiled if p.level == "framework"]
    kinds = [kind_of(layer.op_type) for layer in summary.layers]
    assert kinds.count("conv") == 2
    assert "maxpool" in kinds
    assert "matmul" in kinds
    assert all(layer.calls == 3 for layer in summary.layers if kind_of(layer.op_type) == "conv")
    # One query's layers come with the measurement.
    assert run.layers is not None
    assert [layer.node for layer in run.layers] == [
        layer.node for layer in traced.queries[0].layers
    ]


def test_the_model_level_times_each_query_s_pipeline_steps(runs: dict[str, Run | str]) -> None:
    run = _run(runs, "onnxruntime")
    (model,) = [p for p in run.tracing.passes if p.level == "model"]
    assert len(model.queries) == 3
    for query in model.queries:
        assert [step.name for step in query.steps] == ["input", "predict", "post-process"]
        assert query.start_ns == query.steps[0].start_ns
        assert query.end_ns == query.steps[-1].end_ns


def test_onnx_runtime_reports_op_types_shapes_and_threads(runs: dict[str, Run | str]) -> None:
    run = _run(runs, "onnxruntime")
    (summary,) = [p for p in run.tracing.profiled if p.level == "framework"]
    conv = next(layer for layer in summary.layers if layer.op_type in ("Conv", "FusedConv"))
    assert conv.input_shapes[0] == (1, 1, 8, 8)
    assert conv.output_shapes
    assert conv.implementation == "CPUExecutionProvider"
    outcomes = {outcome.level: outcome for outcome in run.tracing.outcomes}
    assert "CPU" in str(outcomes["hardware"].reason)


def test_the_opencl_engine_reports_kernels_at_the_hardware_level(
    runs: dict[str, Run | str],
) -> None:
    run = _run(runs, "opencl")
    (kernels,) = [p for p in run.tracing.passes if p.level == "hardware"]
    layers = {layer.node for layer in kernels.queries[0].layers}
    assert layers >= {"node_conv2d", "node_conv2d_1", "node_linear"}
    for layer in kernels.queries[0].layers:
        assert layer.queued_ns is not None
        assert layer.submit_ns is not None
        assert layer.queued_ns <= layer.submit_ns <= layer.start_ns <= layer.end_ns


def test_digits_cnn_lines_up_across_the_four_frameworks(runs: dict[str, Run | str]) -> None:
    profiles = []
    for framework in FRAMEWORKS:
        run = _run(runs, framework)
        profiled = EvaluationProfiled(
            evaluation_id=uuid.uuid4(),
            agent_id="test",
            framework=framework,
            trace_level="full",
            levels=list(run.tracing.outcomes),
            passes=list(run.tracing.profiled),
        )
        (framework_pass,) = [p for p in profiled.passes if p.level == "framework"]
        profiles.append((profiled, framework_pass))
    comparison = align("framework", profiles)
    complete = [row.kind for row in comparison.rows if all(row.layers)]
    assert complete == ["conv", "conv", "maxpool", "matmul"]


def test_pytorch_reports_onednn_primitives_at_the_library_level(
    zoo: dict[str, BuiltModel], tmp_path: Path
) -> None:
    if not torch.backends.mkldnn.is_available():  # type: ignore[no-untyped-call]
        pytest.skip(f"torch {torch.__version__} here is built without oneDNN")
    # The digits CNN's convolutions are too small for torch to hand them to oneDNN; on a
    # 32x32 image, 32 channels in and 64 out are not.
    model = torch.nn.Sequential(
        torch.nn.Upsample(scale_factor=4),
        torch.nn.Conv2d(1, 32, 3, padding=1),
        torch.nn.Conv2d(32, 64, 3, padding=1),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(64, 10),
    ).eval()
    path = tmp_path / "wide.pt"
    with torch.no_grad():
        export_torchscript(model, torch.zeros(1, 1, 8, 8), path)
    manifest = zoo["pytorch"].manifest.model_copy(
        update={"name": "wide-cnn", "source": ModelSource(uri=str(path), sha256=sha256_of(path))}
    )
    run = _measure("pytorch", manifest, tmp_path, level="library")
    outcomes = {outcome.level: outcome for outcome in run.tracing.outcomes}
    assert outcomes["library"].captured, outcomes["library"].reason
    (library,) = [p for p in run.tracing.profiled if p.level == "library"]
    assert "convolution" in {layer.op_type for layer in library.layers}
    assert all(layer.implementation for layer in library.layers)
