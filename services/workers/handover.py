"""What passes between a worker and its framework process, and the calls it can make there.

The worker side never imports the framework side (``services.workers.framework``, where the
frameworks are imported): an import contract keeps it so. What crosses the pipe is defined
here, on neither side: what the framework process says of itself once started
(``Described``), what one job measured (``Run``, with its traced passes as records on the
wall clock, ``Tracing``), and the functions the worker may call there, each a
``FrameworkCall`` that names its function and the type it answers with.
tests/unit/test_handover.py resolves every call in this module and checks that its function
takes a ``Session`` and answers with that type, so the name cannot drift from the code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from shared.config import Settings, default_home
from shared.measurement import ScenarioResult
from shared.measurement.cost import JobReadings
from shared.measurement.loadgen import LoadgenResult
from shared.messages import (
    AccuracyMeasurement,
    GenerationRecord,
    LayerTiming,
    LevelOutcome,
    OutputFingerprint,
    Perplexity,
    ProfiledPass,
    TraceLevel,
)

__all__ = [
    "MEASURE_JOB",
    "Described",
    "EndpointOptions",
    "FrameworkCall",
    "FrameworkOptions",
    "JobInputs",
    "Run",
    "TracedPass",
    "TracedQuery",
    "TracedStep",
    "Tracing",
]

R = TypeVar("R")


@dataclass(frozen=True)
class FrameworkCall(Generic[R]):
    """A function of the framework process, ``"module:function"``, answering with ``R``:
    named, not imported, because importing it would import the framework side."""

    target: str
    answers: type[R]

    @property
    def name(self) -> str:
        return self.target.rpartition(":")[2]


@dataclass(frozen=True)
class EndpointOptions:
    """The server an endpoint worker measures (``--framework endpoint``)."""

    url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 60.0
    connect_timeout_s: float = 5.0


@dataclass(frozen=True)
class FrameworkOptions:
    """What the framework process is told by its worker as it starts, over the connection
    (never through its environment or its arguments, where a key would show): the settings
    its framework reads, read once by the worker."""

    # Where predictors keep what they build (TensorRT engines): the worker's home.
    home: Path = field(default_factory=default_home)
    endpoint: EndpointOptions = field(default_factory=EndpointOptions)
    # The OpenCL engine's precompiled program and platform (DLSCOPE_OPENCL_*).
    opencl_binary: Path | None = None
    opencl_platform: str | None = None
    # CUDA_VISIBLE_DEVICES as the worker has it: the GPU the process measures is its first.
    visible_gpus: str | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> FrameworkOptions:
        return cls(
            home=settings.home,
            endpoint=EndpointOptions(
                url=settings.endpoint_url,
                api_key=settings.endpoint_api_key,
                timeout_s=settings.endpoint_timeout_s,
                connect_timeout_s=settings.endpoint_connect_timeout_s,
            ),
            opencl_binary=settings.opencl_binary,
            opencl_platform=settings.opencl_platform,
            visible_gpus=settings.cuda_visible_devices,
        )


@dataclass(frozen=True)
class Described:
    """What the framework process reports once it has imported its framework."""

    version: str
    device: dict[str, Any]
    # The framework's build as the environment capture reports it (torch's BLAS, threads).
    build: dict[str, Any]
    pid: int
    # Whether its jobs need the model's weights here: False where the model runs elsewhere
    # (a served model: the worker fetches its tokenizer only).
    needs_weights: bool = True


@dataclass(frozen=True)
class JobInputs:
    """What one job's measurement is given besides the job: where the worker put what it
    fetched, where results go, and the trace context of its span for the job."""

    # The model's weights; None where the framework needs none (``Described.needs_weights``).
    model: Path | None
    # Where a driver writes its own files (LoadGen's logs).
    results_dir: Path
    # A text model's fetched tokenizer.
    tokenizer: Path | None = None
    # The W3C trace context of the worker's span for the job, which a served model's
    # requests carry to the server.
    traceparent: str | None = None


@dataclass(frozen=True)
class TracedStep:
    name: str  # input, predict, post-process
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class TracedQuery:
    """One traced query on the wall clock, with its steps (model) or its layers (deeper)."""

    index: int
    start_ns: int
    end_ns: int
    steps: tuple[TracedStep, ...] = ()
    layers: tuple[LayerTiming, ...] = ()


@dataclass(frozen=True)
class TracedPass:
    level: TraceLevel
    source: str
    queries: tuple[TracedQuery, ...]
    layers_kept: bool = True  # False: past MAX_TRACED_LAYERS, its layers were not handed back


@dataclass(frozen=True)
class Tracing:
    """What the traced passes of one evaluation found."""

    level: TraceLevel
    outcomes: tuple[LevelOutcome, ...] = ()
    passes: tuple[TracedPass, ...] = ()
    profiled: tuple[ProfiledPass, ...] = ()

    @property
    def one_query(self) -> list[LayerTiming] | None:
        """The first query's layers of the first profiled pass that has some."""
        for traced in self.passes:
            if traced.level != "model" and traced.queries and traced.queries[0].layers:
                return list(traced.queries[0].layers)
        return None


@dataclass(frozen=True)
class Run:
    """What one job's session measured, handed back to the worker."""

    load_ns: int
    native: ScenarioResult | None
    loadgen: LoadgenResult | None
    accuracy: AccuracyMeasurement | None
    fingerprint: OutputFingerprint
    layers: list[LayerTiming] | None  # one query's, from the first profiled pass
    tracing: Tracing
    machine: JobReadings | None = None  # the noise probe and the job's peak memory
    generation: GenerationRecord | None = None  # a generative model's timed requests
    perplexity: Perplexity | None = None  # and its perplexity on the data set's texts


# One evaluation job's measurement: (job, JobInputs) -> Run.
MEASURE_JOB = FrameworkCall("services.workers.framework.session:measure_job", Run)
