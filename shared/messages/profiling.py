"""What a traced evaluation keeps of its layers: ``evaluation.profiled``, and the types in it.

A worker running an evaluation at ``framework`` level or deeper profiles the model in separate
passes after the timed one (see ``shared.messages.tracing``) and publishes, before its
``evaluation.measured``, one ``evaluation.profiled``: per pass, every layer's statistics over
the pass's queries. The spans go to the trace (Jaeger drops them after its retention); this
summary stays in the event store, so a layer breakdown can be queried and compared later.
"""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import Field

from shared.inputs import Count
from shared.messages.envelope import Payload
from shared.messages.tracing import ProfiledLevel, TraceLevel
from shared.values import Frozen

__all__ = [
    "EvaluationProfiled",
    "LayerStat",
    "LayerTiming",
    "LevelOutcome",
    "ProfiledPass",
    "Shape",
]

# A tensor's dimensions; -1 where the framework does not know one.
Shape = tuple[int, ...]


class LayerTiming(Frozen):
    """One layer's execution in one query, as a profiler reported it.

    Times are on the clock of whoever made the record: a predictor's own device clock (the
    OpenCL engine's profiling events), or the wall clock (ns since the epoch) once the worker
    placed it, as every layer of a profiled pass is."""

    node: str = Field(
        description="the layer's name: the ONNX node's where the framework runs the ONNX graph "
        "(ONNX Runtime, OpenCL), else the framework's own (an aten operator, a TF op)"
    )
    op_type: str
    fused: tuple[str, ...] = Field(default=(), description="nodes fused into this one")
    input_shapes: tuple[Shape, ...] = ()
    output_shapes: tuple[Shape, ...] = ()
    kernels: int = Field(default=1, ge=0, description="kernel launches the layer took")
    start_ns: int
    end_ns: int
    queued_ns: int | None = Field(default=None, description="OpenCL: when it was enqueued")
    submit_ns: int | None = Field(default=None, description="OpenCL: when it reached the device")
    thread: int | None = Field(default=None, description="the OS thread that ran it, if known")
    implementation: str | None = Field(
        default=None,
        description="the kernel the framework chose: an execution provider, a oneDNN ISA",
    )

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    def as_dict(self) -> dict[str, Any]:
        """The fields and the duration, as tables and benchmarks print them."""
        return {**self.model_dump(), "duration_ns": self.duration_ns}


class LayerStat(Frozen):
    """One layer over a profiled pass: every call it made in the pass's queries."""

    node: str
    op_type: str
    implementation: str | None = None
    input_shapes: tuple[Shape, ...] = ()
    output_shapes: tuple[Shape, ...] = ()
    calls: int = Field(ge=1, description="calls over the pass's queries")
    total_ns: int = Field(ge=0)
    mean_ns: float = Field(ge=0, description="per call")
    p50_ns: float = Field(ge=0, description="per call")
    share: float = Field(
        ge=0, description="total time over the queries' time: the layer's share of a query"
    )


class ProfiledPass(Frozen):
    """One profiled pass: a level, the profiler that served it, its layers in the order they
    first ran."""

    level: ProfiledLevel
    source: str = Field(description="the profiler, e.g. 'onnxruntime session profiling'")
    queries: int = Field(ge=1, description="queries profiled")
    batch_size: int = Field(ge=1, description="samples per query")
    query_p50_ns: float = Field(ge=0, description="a query's median time while profiled")
    layers: list[LayerStat]
    layers_dropped: int = Field(
        default=0, ge=0, description="layers past the cap on one pass's layers, not kept"
    )


class LevelOutcome(Frozen):
    """What one trace level captured, or why it did not; and what it cost."""

    level: TraceLevel
    captured: bool
    reason: str | None = Field(default=None, description="why it was not captured")
    source: str | None = Field(default=None, description="the profiler that served it")
    queries: int = Field(default=0, ge=0, description="queries traced at this level")
    traced_p50_ns: float | None = Field(
        default=None, description="a query's median time while traced at this level"
    )
    untraced_p50_ns: float | None = Field(
        default=None, description="the same queries' median time untraced, on the same inputs"
    )
    overhead: float | None = Field(
        default=None, description="traced_p50_ns / untraced_p50_ns: what tracing costs a query"
    )
    spans: int = Field(default=0, ge=0, description="spans this level added to the trace")


class EvaluationProfiled(Payload):
    """The layer summary of an evaluation traced at ``framework`` level or deeper; published
    by the worker before ``evaluation.measured``, once per attempt."""

    TYPE = "evaluation.profiled"

    evaluation_id: uuid.UUID
    agent_id: str
    framework: str
    trace_level: TraceLevel
    levels: list[LevelOutcome]
    passes: list[ProfiledPass]
    experiment_id: uuid.UUID | None = None
    attempt: Count = Field(default=1, description="the attempt that profiled this")
