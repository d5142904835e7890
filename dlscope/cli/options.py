"""The options of the commands that request an evaluation (``run``, ``submit``, ``publish``),
declared once.

Each group is a frozen dataclass whose fields are typer options; ``dlscope.cli.spread`` lets
a command take a group as one typed parameter while typer still sees every option on its own.
The groups turn themselves into the typed wire requests, checked before anything starts, so
a bad option is refused naming the option the user typed.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from typing import Annotated, Any

import typer
from pydantic import TypeAdapter, ValidationError

from dlscope.cli.problems import REQUEST_OPTIONS, SCENARIO_OPTIONS, problems
from dlscope.cli.terminal import errors, fail
from dlscope.cli.trace import (
    DEFAULT_TRACE_LEVEL,
    DEFAULT_TRACE_QUERIES,
    TraceLevelOpt,
    TraceQueriesOpt,
    checked_trace_level,
    trace_fields,
)
from shared.messages import (
    FRAMEWORKS,
    HARDWARE,
    SCENARIOS,
    EvaluationRequested,
    ExperimentRequested,
    FrameworkSelection,
    Scenario,
)

__all__ = [
    "ComparisonOptions",
    "EndpointOpt",
    "EvaluationOptions",
    "ModelArg",
    "use_endpoint",
]

ModelArg = Annotated[str, typer.Argument(help="model name, e.g. squeezenet")]
Version = Annotated[str, typer.Option("--version", help="model version constraint, e.g. '>=1,<2'")]
FrameworkOpt = Annotated[
    str,
    typer.Option(
        "--framework",
        "-f",
        help=f"one of {', '.join(FRAMEWORKS)}; several separated by commas, or 'all', "
        "compare the model on each (an experiment)",
    ),
]
EndpointOpt = Annotated[
    str | None,
    typer.Option(
        "--endpoint",
        help="with --framework endpoint: the OpenAI-compatible API root of the server that "
        "serves the model under its name, e.g. http://127.0.0.1:8000/v1 (its key: "
        "DLSCOPE_ENDPOINT_API_KEY)",
    ),
]
FrameworkVersion = Annotated[str, typer.Option(help="framework version constraint")]
HardwareOpt = Annotated[str, typer.Option("--hardware", help=f"one of {', '.join(HARDWARE)}")]
ScenarioOpt = Annotated[
    str, typer.Option("--scenario", help=f"one of {', '.join(SCENARIOS)} (MLPerf semantics)")
]
DriverOpt = Annotated[
    str,
    typer.Option(
        "--driver", help="native, or loadgen: MLCommons LoadGen, which writes its mlperf logs"
    ),
]
Iterations = Annotated[
    int | None,
    typer.Option("--iterations", "-n", help="at least this many timed queries (offline: samples)"),
]
Warmup = Annotated[
    int | None,
    typer.Option(help="queries per warm-up window (warm-up runs until steady); 0: none"),
]
BatchSize = Annotated[
    int, typer.Option("--batch-size", "-b", help="samples per query (offline: per batch)")
]
SamplesPerQuery = Annotated[int | None, typer.Option(help="multi-stream: samples per query")]
Qps = Annotated[float | None, typer.Option("--qps", help="server: target queries per second")]
LatencyBound = Annotated[
    float | None, typer.Option("--latency-bound", help="server: p99 latency bound (ms)")
]
BatchSizes = Annotated[
    str | None, typer.Option("--batch-sizes", help="batch-sweep: sizes, e.g. 1,2,4,8")
]
MinDuration = Annotated[
    float | None, typer.Option("--min-duration", help="the timed phase lasts at least (s)")
]
MaxDuration = Annotated[
    float | None, typer.Option("--max-duration", help="the timed phase stops here (s)")
]
Seed = Annotated[int, typer.Option(help="seed of the inputs, the sample order, the arrivals")]
Adaptive = Annotated[
    float | None,
    typer.Option(
        "--adaptive",
        help="keep measuring until the headline's 95%% interval is within this fraction "
        "(e.g. 0.01), or --max-duration",
    ),
]
MaxNewTokens = Annotated[
    int | None,
    typer.Option("--max-new-tokens", help="text generation: tokens per request (default 32)"),
]
Natural = Annotated[
    bool,
    typer.Option(
        "--natural",
        help="text generation: stop a request at its end-of-sequence token; by default every "
        "request generates exactly --max-new-tokens",
    ),
]
TtftBound = Annotated[
    float | None,
    typer.Option("--ttft-bound", help="text generation: p99 time-to-first-token bound (ms)"),
]
TpotBound = Annotated[
    float | None,
    typer.Option("--tpot-bound", help="text generation: p99 time-per-output-token bound (ms)"),
]
SloPercentile = Annotated[
    float | None,
    typer.Option(
        "--slo-percentile",
        help="text generation: the percentile the TTFT/TPOT bounds judge (default 0.99)",
    ),
]
Concurrency = Annotated[
    int | None,
    typer.Option(
        "--concurrency",
        help="text generation: streams issuing requests back to back at once (default 1)",
    ),
]
Temperature = Annotated[
    float | None,
    typer.Option(
        "--temperature", help="text generation: sample at this temperature (default 0: greedy)"
    ),
]
TopK = Annotated[
    int | None, typer.Option("--top-k", help="text generation, sampling: the k best tokens only")
]
DatasetOpt = Annotated[
    str | None,
    typer.Option("--dataset", help="a labelled dataset, e.g. digits: measures top-1/top-5"),
]
SplitOpt = Annotated[str | None, typer.Option("--split", help="one split, e.g. test")]
Atol = Annotated[
    float,
    typer.Option(help="experiments: allowed |difference| of outputs, per unit of output scale"),
]
Top1Agreement = Annotated[
    float, typer.Option(help="experiments: fraction of samples whose top-1 must agree")
]
ConcurrentOpt = Annotated[
    bool,
    typer.Option(
        "--concurrent",
        help="experiments: run the members together, without device leases (a contention "
        "study; each result is labelled measured under contention). By default members that "
        "share a device are measured one at a time",
    ),
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvaluationOptions:
    """What to evaluate and how: the model's version, the framework (or several: an
    experiment), the hardware, the scenario, the dataset and the trace."""

    version: Version = "*"
    framework: FrameworkOpt = "onnxruntime"
    framework_version: FrameworkVersion = "*"
    hardware: HardwareOpt = "cpu"
    scenario: ScenarioOpt = "single-stream"
    driver: DriverOpt = "native"
    iterations: Iterations = None
    warmup: Warmup = None
    batch_size: BatchSize = 1
    samples_per_query: SamplesPerQuery = None
    qps: Qps = None
    latency_bound: LatencyBound = None
    batch_sizes: BatchSizes = None
    min_duration: MinDuration = None
    max_duration: MaxDuration = None
    adaptive: Adaptive = None
    seed: Seed = 0
    max_new_tokens: MaxNewTokens = None
    natural: Natural = False
    ttft_bound: TtftBound = None
    tpot_bound: TpotBound = None
    slo_percentile: SloPercentile = None
    concurrency: Concurrency = None
    temperature: Temperature = None
    top_k: TopK = None
    dataset: DatasetOpt = None
    split: SplitOpt = None
    trace_level: TraceLevelOpt = DEFAULT_TRACE_LEVEL
    trace_queries: TraceQueriesOpt = DEFAULT_TRACE_QUERIES

    def selection(self) -> FrameworkSelection | None:
        """``all`` or several comma-separated frameworks: an experiment; one framework: None."""
        if self.framework == "all":
            return "all"
        names = [name.strip() for name in self.framework.split(",") if name.strip()]
        unknown = [name for name in names if name not in FRAMEWORKS]
        if unknown or not names:
            shown = ", ".join(repr(name) for name in unknown) or repr(self.framework)
            raise fail(
                f"unknown framework {shown}; choose one of: {', '.join(FRAMEWORKS)}, "
                "several separated by commas, or all",
                2,
            )
        return TypeAdapter(FrameworkSelection).validate_python(names) if len(names) > 1 else None

    def wire_scenario(self) -> dict[str, Any]:
        """The scenario's wire fields, checked now: a bad one is refused before anything
        starts. Options left out keep the scenario's defaults."""
        given: dict[str, Any] = {
            "name": self.scenario,
            "driver": self.driver,
            "iterations": self.iterations,
            "warmup": self.warmup,
            "batch_size": self.batch_size,
            "samples_per_query": self.samples_per_query,
            "target_qps": self.qps,
            "latency_bound_ms": self.latency_bound,
            "min_duration_s": self.min_duration,
            "max_duration_s": self.max_duration,
            "adaptive_half_width": self.adaptive,
            "seed": self.seed,
            "max_new_tokens": self.max_new_tokens,
            "ignore_eos": False if self.natural else None,
            "ttft_bound_ms": self.ttft_bound,
            "tpot_bound_ms": self.tpot_bound,
            "slo_percentile": self.slo_percentile,
            "concurrency": self.concurrency,
            "temperature": self.temperature,
            "top_k": self.top_k,
        }
        if self.batch_sizes is not None:
            try:
                given["batch_sizes"] = [int(size) for size in self.batch_sizes.split(",")]
            except ValueError as exc:
                raise fail(
                    f"--batch-sizes takes integers separated by commas, not {self.batch_sizes!r}",
                    2,
                ) from exc
        fields = {key: value for key, value in given.items() if value is not None}
        try:
            return Scenario.model_validate(fields).model_dump(mode="json", exclude_unset=True)
        except ValidationError as exc:
            raise fail(problems(exc, SCENARIO_OPTIONS, scenario=self.scenario), 2) from exc

    def request(
        self, model: str, *, requested_by: str, concurrent: bool = False
    ) -> EvaluationRequested:
        """One evaluation on one framework, typed and checked."""
        if self.framework not in FRAMEWORKS:
            known = ", ".join(FRAMEWORKS)
            raise fail(f"unknown framework {self.framework!r}; choose one of: {known}", 2)
        if self.hardware not in HARDWARE:
            known = ", ".join(HARDWARE)
            raise fail(f"unknown hardware {self.hardware!r}; choose one of: {known}", 2)
        scenario = self.wire_scenario()
        try:
            return EvaluationRequested(
                evaluation_id=uuid.uuid4(),
                model=model,
                model_version=self.version,
                framework=self.framework,
                framework_version=self.framework_version,
                hardware=self.hardware,
                scenario=Scenario.model_validate(scenario),
                dataset=self.dataset,
                split=self.split,
                requested_by=requested_by,
                trace_level=checked_trace_level(self.trace_level),
                trace_queries=self.trace_queries,
                concurrent=concurrent,
            )
        except ValidationError as exc:
            raise fail(problems(exc, {**REQUEST_OPTIONS, **SCENARIO_OPTIONS}), 2) from exc

    def experiment(
        self,
        model: str,
        frameworks: FrameworkSelection,
        comparison: ComparisonOptions,
        *,
        requested_by: str,
    ) -> ExperimentRequested:
        """One model on several frameworks, compared, typed and checked."""
        if trace_fields(self.trace_level, self.trace_queries):
            raise fail(
                "--trace-level and --trace-queries trace one evaluation, not an experiment", 2
            )
        scenario = self.wire_scenario()
        try:
            return ExperimentRequested.model_validate(
                {
                    "experiment_id": uuid.uuid4(),
                    "models": [{"model": model, "version": self.version}],
                    "frameworks": frameworks,
                    "framework_version": self.framework_version,
                    "hardware": self.hardware,
                    "scenario": scenario,
                    "dataset": self.dataset,
                    "split": self.split,
                    "tolerance": {
                        "atol": comparison.atol,
                        "min_top1_agreement": comparison.top1_agreement,
                    },
                    "requested_by": requested_by,
                    "concurrent": comparison.concurrent,
                }
            )
        except ValidationError as exc:
            said = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise fail(said, 2) from exc


@dataclasses.dataclass(frozen=True, kw_only=True)
class ComparisonOptions:
    """How the members of an experiment are compared, and whether they share the device."""

    atol: Atol = 1e-4
    top1_agreement: Top1Agreement = 1.0
    concurrent: ConcurrentOpt = False

    def warn_if_alone(self) -> None:
        """``--concurrent`` with one framework: accepted, and said to mean next to nothing."""
        if not self.concurrent:
            return
        errors.print(
            "[yellow]warning:[/] --concurrent runs an experiment's members together; with one "
            "framework there is nothing to run beside. The evaluation only skips the device "
            "lease, and its result is labelled as measured under contention.",
            soft_wrap=True,
            highlight=False,
        )


def use_endpoint(url: str | None) -> None:
    """The server an embedded endpoint worker measures: its framework process reads it from
    the environment it inherits (``DLSCOPE_ENDPOINT_URL``)."""
    if url:
        os.environ["DLSCOPE_ENDPOINT_URL"] = url
