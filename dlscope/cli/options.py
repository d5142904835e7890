"""The options of the commands that request an evaluation (``run``, ``submit``, ``publish``),
declared once.

Each group is a frozen dataclass whose fields are typer options; ``dlscope.cli.spread`` lets
a command take a group as one typed parameter while typer still sees every option on its own.
The groups turn themselves into the typed wire requests, checked before anything starts, so
a bad option is refused naming the option the user typed. The scenario's own options, and
how they become the wire scenario, are ``dlscope.cli.scenario_options``.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Annotated, Any

import typer
from pydantic import TypeAdapter, ValidationError

from dlscope.cli.problems import REQUEST_OPTIONS, SCENARIO_OPTIONS, problems
from dlscope.cli.scenario_options import (
    Adaptive,
    BatchSize,
    BatchSizes,
    Concurrency,
    DriverOpt,
    E2eBound,
    InputTokens,
    Iterations,
    LatencyBound,
    MaxDuration,
    MaxNewTokens,
    MinDuration,
    Natural,
    OutputTokens,
    Qps,
    ReplayOpt,
    SamplesPerQuery,
    ScenarioOpt,
    Seed,
    SloPercentile,
    Temperature,
    TopK,
    TpotBound,
    TtftBound,
    Warmup,
    wire_scenario,
)
from dlscope.cli.terminal import errors, fail
from dlscope.cli.trace import (
    DEFAULT_TRACE_LEVEL,
    DEFAULT_TRACE_QUERIES,
    TraceLevelOpt,
    TraceQueriesOpt,
    checked_trace_level,
    trace_fields,
)
from shared.config import Settings
from shared.manifests import parse_constraint
from shared.messages import (
    FRAMEWORKS,
    HARDWARE,
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
    "run_settings",
]

ModelArg = Annotated[str, typer.Argument(help="model name, e.g. squeezenet")]
Version = Annotated[
    str,
    typer.Option(
        "--version",
        help="the model's version: latest (or '*'), the newest not deprecated; an exact one, "
        "e.g. 1.0.1; or a constraint, e.g. '>=1,<2' (the newest that satisfies it). The "
        "result names the version that ran",
    ),
]
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
    input_tokens: InputTokens = None
    output_tokens: OutputTokens = None
    replay: ReplayOpt = None
    natural: Natural = False
    ttft_bound: TtftBound = None
    tpot_bound: TpotBound = None
    e2e_bound: E2eBound = None
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

    def checked_version(self) -> None:
        """``--version`` refused before anything starts when it is no version constraint."""
        try:
            parse_constraint(self.version)
        except ValueError as exc:
            raise fail(f"--version: {exc}", 2) from exc

    def wire_scenario(self) -> dict[str, Any]:
        """The scenario's wire fields, checked now: a bad one is refused before anything
        starts. Options left out keep the scenario's defaults."""
        return wire_scenario(dataclasses.asdict(self))

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
        self.checked_version()
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
        """One model on several frameworks, compared, typed and checked; each member traced
        at ``--trace-level`` (one after another, as they are measured, unless concurrent)."""
        traced = trace_fields(self.trace_level, self.trace_queries)
        self.checked_version()
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
                    **traced,
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


def run_settings(endpoint: str | None) -> Settings:
    """The settings an embedded run starts its services with: the environment's, and with
    ``--endpoint`` the server an endpoint worker measures (which its worker tells its
    framework process)."""
    return Settings(endpoint_url=endpoint) if endpoint else Settings()
