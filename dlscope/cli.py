"""The ``dlscope`` command line."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import signal
import sys
import uuid
from pathlib import Path
from typing import Annotated, Any, cast

import typer
from pydantic import ValidationError
from rich.markup import escape
from rich.table import Table

from dlscope.agents_cli import agents_command
from dlscope.dlq_cli import dlq
from dlscope.experiments_cli import (
    ConcurrentOpt,
    experiment_request,
    framework_selection,
    run_experiment,
    submit_experiment,
    warn_concurrent_alone,
)
from dlscope.gateway_client import gateway_client, submitted, until_settled
from dlscope.layers_cli import layers_command, tracing_table
from dlscope.live import LiveEvaluations
from dlscope.machine_cli import machine_rows
from dlscope.models_cli import models
from dlscope.repeats_cli import (
    DEFAULT_MAX_SPREAD,
    compare_command,
    run_arguments,
    run_repeated,
)
from dlscope.report_cli import report_command
from dlscope.terminal import console, fail
from dlscope.trace_cli import (
    DEFAULT_TRACE_LEVEL,
    DEFAULT_TRACE_QUERIES,
    TraceLevelOpt,
    TraceQueriesOpt,
    checked_trace_level,
    trace_command,
    trace_fields,
)
from dlscope.zoo_cli import build_on_first_use, zoo
from shared.config import Settings
from shared.errors import DlscopeError
from shared.messages import (
    FRAMEWORKS,
    HARDWARE,
    SCENARIOS,
    EvaluationRequested,
    Framework,
    Hardware,
    Scenario,
)

__all__ = ["app", "main"]

app = typer.Typer(
    help="dlscope: benchmark deep-learning inference across models, frameworks and hardware.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
db = typer.Typer(
    help="The event store: migrations, projections and admission checks.", no_args_is_help=True
)
app.add_typer(db, name="db")
app.add_typer(dlq, name="dlq")
app.add_typer(models, name="models")
app.add_typer(zoo, name="zoo")
app.command("compare")(compare_command)
app.command("layers")(layers_command)
app.command("trace")(trace_command)
app.command("agents")(agents_command)
app.command("report")(report_command)

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
SERVICES = ("gateway", "scheduler", "registry", "worker", "analyzer", "recorder")
TERMINAL = ("completed", "failed")


def _request(
    model: str,
    *,
    version: str,
    framework: str,
    framework_version: str,
    hardware: str,
    scenario: dict[str, Any],
    requested_by: str,
    dataset: str | None = None,
    split: str | None = None,
    trace_level: str = DEFAULT_TRACE_LEVEL,
    trace_queries: int = DEFAULT_TRACE_QUERIES,
    concurrent: bool = False,
) -> EvaluationRequested:
    if framework not in FRAMEWORKS:
        raise fail(f"unknown framework {framework!r}; choose one of: {', '.join(FRAMEWORKS)}", 2)
    if hardware not in HARDWARE:
        raise fail(f"unknown hardware {hardware!r}; choose one of: {', '.join(HARDWARE)}", 2)
    try:
        return EvaluationRequested(
            evaluation_id=uuid.uuid4(),
            model=model,
            model_version=version,
            framework=framework,
            framework_version=framework_version,
            hardware=hardware,
            scenario=Scenario.model_validate(scenario),
            dataset=dataset,
            split=split,
            requested_by=requested_by,
            trace_level=checked_trace_level(trace_level),
            trace_queries=trace_queries,
            concurrent=concurrent,
        )
    except ValidationError as exc:
        raise fail(_problems(exc, {**_REQUEST_OPTIONS, **_SCENARIO_OPTIONS}), 2) from exc


def _summary_table(evaluation: dict[str, Any]) -> Table:
    result = evaluation["result"]
    scenario = result.get("scenario") or {}
    table = Table(
        title=f"{evaluation['model']} {evaluation['model_version']} on "
        f"{evaluation['framework']} ({evaluation['hardware']}), "
        f"{scenario.get('name', 'single-stream')} ({scenario.get('driver', 'native')} driver)"
    )
    table.add_column("statistic")
    table.add_column("value", justify="right")
    for key in ("count", "batch_size", "warmup_count"):
        table.add_row(key.replace("_", " "), str(result[key]))
    for key in (
        "load_ms",
        "first_inference_ms",
        "mean_ms",
        "std_ms",
        "min_ms",
        "p50_ms",
        "p90_ms",
        "p99_ms",
        "max_ms",
    ):
        if result.get(key) is not None:
            label = key.removesuffix("_ms").replace("_", " ") + " (ms)"
            table.add_row(label, f"{result[key]:.3f}")
    table.add_row("throughput (samples/s)", f"{result['throughput_per_s']:.1f}")
    for phase in result.get("statistics") or []:
        _interval_rows(table, phase, several=len(result["statistics"]) > 1)
    if result.get("harness_overhead_ns") is not None:
        table.add_row("harness overhead (µs/query)", f"{result['harness_overhead_ns'] / 1e3:.2f}")
    for label, value in machine_rows(result.get("machine")):
        table.add_row(label, value)
    warmup = result.get("warmup")
    if warmup:
        table.add_row("warm-up ended by", str(warmup["decided_by"]))
    accuracy = result.get("accuracy")
    if accuracy:
        on = accuracy["dataset"] + (f" {accuracy['split']}" if accuracy["split"] else "")
        table.add_row(f"top-1 on {on} ({accuracy['samples']} samples)", f"{accuracy['top1']:.4f}")
        table.add_row("top-5", f"{accuracy['top5']:.4f}")
    for phase in result.get("loadgen") or []:
        table.add_row(f"LoadGen result (batch {phase['samples_per_query']})", phase["result"])
        table.add_row("LoadGen logs", phase["output_dir"])
    verdict = result.get("verdict")
    if verdict:
        table.add_row("verdict", verdict["status"])
        for reason in verdict["reasons"]:
            table.add_row(f"  {reason['severity']}: {reason['code']}", reason["message"])
    return table


def _layers_table(layers: list[dict[str, Any]], *, shown: int = 25) -> Table:
    """One query's layers as the first profiled pass timed them, slowest first."""
    total = sum(layer["end_ns"] - layer["start_ns"] for layer in layers)
    table = Table(title=f"per-layer time, one profiled query ({len(layers)} layers)")
    for column in ("layer", "op", "output shape", "µs", "share"):
        table.add_column(column, justify="right" if column in ("µs", "share") else "left")
    slowest = sorted(layers, key=lambda layer: layer["start_ns"] - layer["end_ns"])
    for layer in slowest[:shown]:
        took = layer["end_ns"] - layer["start_ns"]
        fused = f" (+{len(layer['fused'])} fused)" if layer["fused"] else ""
        table.add_row(
            layer["node"] + fused,
            layer["op_type"],
            " ".join(str(shape) for shape in layer["output_shapes"]),
            f"{took / 1e3:.1f}",
            f"{took / total:.1%}" if total else "",
        )
    if len(layers) > shown:
        table.add_row(f"… {len(layers) - shown} more (--json has them all)", "", "", "", "")
    return table


def _interval_rows(table: Table, phase: dict[str, Any], *, several: bool) -> None:
    """The headline percentile and the median with their confidence intervals; a percentile
    with too few queries behind it is shown as a bound (≥)."""
    prefix = f"batch {phase['samples_per_query']}: " if several else ""
    for figure in (phase["median"], phase["headline"]):
        name = f"p{figure['percentile'] * 100:g}"
        value = f"{figure['value_ns'] / 1e6:.3f}"
        if figure["kind"] == "bound":
            value = f"≥ {value} (bound: < {figure['min_queries']} queries)"
        elif figure.get("interval"):
            interval = figure["interval"]
            value += f" [{interval['low'] / 1e6:.3f}, {interval['high'] / 1e6:.3f}]"
        table.add_row(f"{prefix}{name} (ms) {_confidence(figure)}", value)
    throughput = phase["throughput"]
    interval = throughput["interval"]
    table.add_row(
        f"{prefix}samples/s {_confidence(throughput)}",
        f"{throughput['per_s']:.1f} [{interval['low']:.1f}, "
        + ("unbounded]" if interval["high"] is None else f"{interval['high']:.1f}]"),
    )


def _confidence(figure: dict[str, Any]) -> str:
    interval = figure.get("interval")
    return f"({interval['confidence']:.0%} CI)" if interval else ""


# Options shared by the commands that request an evaluation.
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


@app.command()
def run(
    model: Annotated[str, typer.Argument(help="model name, e.g. squeezenet")],
    version: Version = "*",
    framework: FrameworkOpt = "onnxruntime",
    framework_version: FrameworkVersion = "*",
    hardware: HardwareOpt = "cpu",
    scenario: ScenarioOpt = "single-stream",
    driver: DriverOpt = "native",
    iterations: Iterations = None,
    warmup: Warmup = None,
    batch_size: BatchSize = 1,
    samples_per_query: SamplesPerQuery = None,
    qps: Qps = None,
    latency_bound: LatencyBound = None,
    batch_sizes: BatchSizes = None,
    min_duration: MinDuration = None,
    max_duration: MaxDuration = None,
    adaptive: Adaptive = None,
    seed: Seed = 0,
    dataset: DatasetOpt = None,
    split: SplitOpt = None,
    trace_level: TraceLevelOpt = DEFAULT_TRACE_LEVEL,
    trace_queries: TraceQueriesOpt = DEFAULT_TRACE_QUERIES,
    atol: Atol = 1e-4,
    top1_agreement: Top1Agreement = 1.0,
    concurrent: ConcurrentOpt = False,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="write the full result here")
    ] = None,
    repeat: Annotated[
        int,
        typer.Option(
            min=1, help="run it this many times, each in a fresh process, and report the spread"
        ),
    ] = 1,
    max_spread: Annotated[
        float,
        typer.Option(
            min=0,
            help="with --repeat: the largest coefficient of variation of the runs' medians "
            "that is not flagged (0.03: 3 %)",
        ),
    ] = DEFAULT_MAX_SPREAD,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="show the services' logs")
    ] = False,
) -> None:
    """Evaluate a model with every service in this process (in-memory broker, SQLite).

    With --framework all (or a list), evaluate it on every framework installed here that
    has an export of it, in parallel, and compare them.
    """
    import uvloop

    # The outcome is reported below; the services' own warnings are for --verbose.
    logging.basicConfig(level=logging.INFO if verbose else logging.ERROR, format=LOG_FORMAT)

    from dlscope.embedded import embedded_settings, evaluate

    wire_scenario = _scenario(
        scenario,
        driver=driver,
        iterations=iterations,
        warmup=warmup,
        batch_size=batch_size,
        samples_per_query=samples_per_query,
        qps=qps,
        latency_bound=latency_bound,
        batch_sizes=batch_sizes,
        min_duration=min_duration,
        max_duration=max_duration,
        adaptive=adaptive,
        seed=seed,
    )
    if repeat > 1:
        if framework_selection(framework) is not None:
            raise fail("--repeat runs one framework; an experiment compares several once", 2)
        if driver == "loadgen":
            raise fail("--repeat compares raw latencies, which the loadgen driver keeps not", 2)
        run_repeated(run_arguments(sys.argv), repeat, max_spread=max_spread)
        return
    selection = framework_selection(framework)
    if selection is not None and trace_fields(trace_level, trace_queries):
        raise fail("--trace-level and --trace-queries trace one evaluation, not an experiment", 2)
    if selection is not None:
        experiment_request_ = experiment_request(
            model,
            version=version,
            frameworks=selection,
            framework_version=framework_version,
            hardware=hardware,
            scenario=wire_scenario,
            dataset=dataset,
            split=split,
            atol=atol,
            top1_agreement=top1_agreement,
            requested_by="dlscope run",
            concurrent=concurrent,
        )
        run_experiment(experiment_request_, json_path)
        return
    if concurrent:
        warn_concurrent_alone()

    request = _request(
        model,
        version=version,
        framework=framework,
        framework_version=framework_version,
        hardware=hardware,
        scenario=wire_scenario,
        requested_by="dlscope run",
        dataset=dataset,
        split=split,
        trace_level=trace_level,
        trace_queries=trace_queries,
        concurrent=concurrent,
    )
    settings = embedded_settings(Settings())
    build_on_first_use(model, settings.home)
    with LiveEvaluations() as progress:
        try:
            outcome = uvloop.run(evaluate(settings, request, watch=progress.observe))
        except DlscopeError as exc:
            raise fail(str(exc), 1) from exc
    document = outcome.to_json()
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(document, indent=2))
    evaluation = document["evaluation"]
    if evaluation["status"] != "completed":
        raise fail(f"evaluation {evaluation['evaluation_id']} failed: {evaluation['error']}", 1)
    console.print(_summary_table(evaluation))
    if evaluation["result"].get("layers"):
        console.print(_layers_table(evaluation["result"]["layers"]))
    if evaluation["result"].get("tracing"):
        console.print(tracing_table(evaluation["result"]["tracing"]))
    console.print(
        f"evaluation {evaluation['evaluation_id']}, trace {outcome.trace_id}; "
        f"events stored in {settings.resolved_database_url}"
    )
    if json_path is not None:
        console.print(f"full result written to {json_path}")


def _scenario(
    name: str,
    *,
    driver: str,
    iterations: int | None,
    warmup: int | None,
    batch_size: int,
    samples_per_query: int | None,
    qps: float | None,
    latency_bound: float | None,
    batch_sizes: str | None,
    min_duration: float | None,
    max_duration: float | None,
    adaptive: float | None,
    seed: int,
) -> dict[str, Any]:
    """The scenario's wire fields from the CLI's options, checked now: a bad one is refused
    before anything starts. Options left out keep the scenario's defaults."""
    given: dict[str, Any] = {
        "name": name,
        "driver": driver,
        "iterations": iterations,
        "warmup": warmup,
        "batch_size": batch_size,
        "samples_per_query": samples_per_query,
        "target_qps": qps,
        "latency_bound_ms": latency_bound,
        "min_duration_s": min_duration,
        "max_duration_s": max_duration,
        "adaptive_half_width": adaptive,
        "seed": seed,
    }
    if batch_sizes is not None:
        try:
            given["batch_sizes"] = [int(size) for size in batch_sizes.split(",")]
        except ValueError as exc:
            raise fail(
                f"--batch-sizes takes integers separated by commas, not {batch_sizes!r}", 2
            ) from exc
    fields = {key: value for key, value in given.items() if value is not None}
    try:
        return Scenario.model_validate(fields).model_dump(mode="json", exclude_unset=True)
    except ValidationError as exc:
        raise fail(_problems(exc, _SCENARIO_OPTIONS, scenario=name), 2) from exc


# The options that set each wire field, so that an error names what the user typed.
_SCENARIO_OPTIONS = {
    "name": "--scenario",
    "driver": "--driver",
    "iterations": "--iterations (-n)",
    "warmup": "--warmup",
    "batch_size": "--batch-size (-b)",
    "samples_per_query": "--samples-per-query",
    "target_qps": "--qps",
    "latency_bound_ms": "--latency-bound",
    "batch_sizes": "--batch-sizes",
    "min_duration_s": "--min-duration",
    "max_duration_s": "--max-duration",
    "adaptive_half_width": "--adaptive",
    "seed": "--seed",
}
_REQUEST_OPTIONS = {
    "model": "MODEL",
    "model_version": "--version",
    "framework_version": "--framework-version",
    "dataset": "--dataset",
    "split": "--split",
    "scenario": "--scenario",
}
# pydantic's wording of a bound, as the CLI says it.
_BOUNDS = {
    "greater_than_equal": "must be at least {ge}",
    "greater_than": "must be greater than {gt}",
    "less_than_equal": "must be at most {le}",
    "less_than": "must be less than {lt}",
    "literal_error": "must be one of {expected}",
}


def _problems(exc: ValidationError, options: dict[str, str], *, scenario: str = "") -> str:
    """Each of pydantic's errors as "<option> <what is wrong>, got <value>"."""
    problems = []
    for error in exc.errors():
        fields = [str(part) for part in error["loc"] if str(part) in options]
        template = _BOUNDS.get(error["type"])
        if fields and template is not None:
            said = template.format(**error.get("ctx", {}))
            problems.append(f"{options[fields[-1]]} {said}, got {error['input']!r}")
        elif fields:
            problems.append(f"{options[fields[-1]]}: {_rename(error['msg'], options)}")
        else:
            # A rule across fields (the scenario's own check): its message names the fields.
            message = _rename(error["msg"], options).removeprefix(f"{scenario} scenario: ")
            problems.append(f"--scenario {scenario}: {message}" if scenario else message)
    return "; ".join(problems)


def _rename(message: str, options: dict[str, str]) -> str:
    message = message.replace("Value error, ", "").replace(": Input should be", " must be")
    message = message.replace("Input should be", "must be")
    if "batch_sizes" in options:  # the typed scenario's own wording
        message = message.replace("batch sizes must", "--batch-sizes must")
    return re.sub(
        r"\b(" + "|".join(sorted(options, key=len, reverse=True)) + r")\b",
        lambda match: options[match.group(1)] if "_" in match.group(1) else match.group(1),
        message,
    )


@app.command()
def up(
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    port: Annotated[int, typer.Option()] = 8080,
    framework: Annotated[
        str,
        typer.Option(
            "--framework",
            "-f",
            help="the workers to start: frameworks separated by commas, or 'all' (every one "
            "installed here)",
        ),
    ] = "onnxruntime",
) -> None:
    """Serve the HTTP gateway and every service in this process (in-memory broker, SQLite)."""
    import uvloop

    from dlscope.embedded import embedded_settings, installed, serve_all

    settings = embedded_settings(Settings())
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    wanted = FRAMEWORKS if framework == "all" else tuple(framework.split(","))
    unknown = [f for f in wanted if f not in FRAMEWORKS]
    if unknown:
        raise fail(f"unknown framework {unknown[0]!r}; choose from {', '.join(FRAMEWORKS)}", 2)
    missing = {f: why for f in wanted if (why := installed(f))}
    if framework != "all" and missing:
        raise fail("; ".join(missing.values()), 2)
    workers: list[tuple[Framework, Hardware]] = [
        (cast(Framework, f), "cpu") for f in wanted if f not in missing
    ]

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        names = ", ".join(f for f, _ in workers)
        console.print(f"dlscope up: http://{host}:{port}/docs, workers: {names} (Ctrl-C stops)")
        await serve_all(settings, host=host, port=port, stop=stop, workers=workers)

    uvloop.run(main())


@app.command()
def serve(
    service: Annotated[str, typer.Argument(help=f"one of {', '.join(SERVICES)}")],
    host: Annotated[str, typer.Option(help="gateway only")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="gateway only")] = 8080,
    framework: Annotated[str, typer.Option(help="worker only")] = "onnxruntime",
    hardware: Annotated[str, typer.Option(help="worker only")] = "cpu",
    agent_id: Annotated[str | None, typer.Option(help="worker only")] = None,
    partition: Annotated[
        int, typer.Option(help="recorder only: 0-based, of DLSCOPE_RECORDER_PARTITIONS")
    ] = 0,
) -> None:
    """Run one service against the configured broker and database (DLSCOPE_BROKER_URL, …)."""
    if service == "gateway":
        from services.gateway.main import main as gateway

        gateway(["--host", host, "--port", str(port)])
    elif service == "worker":
        from services.workers.main import main as worker

        worker(
            ["--framework", framework, "--hardware", hardware]
            + (["--agent-id", agent_id] if agent_id else [])
        )
    elif service == "recorder":
        from services.recorder.main import main as recorder

        recorder(["--partition", str(partition)])
    elif service in SERVICES:
        import importlib

        importlib.import_module(f"services.{service}.main").main([])
    else:
        raise fail(f"unknown service {service!r}; choose one of: {', '.join(SERVICES)}", 2)


@app.command()
def submit(
    model: Annotated[str, typer.Argument()],
    gateway: Annotated[str, typer.Option(envvar="DLSCOPE_GATEWAY_URL")] = "http://127.0.0.1:8080",
    version: Version = "*",
    framework: FrameworkOpt = "onnxruntime",
    framework_version: FrameworkVersion = "*",
    hardware: HardwareOpt = "cpu",
    scenario: ScenarioOpt = "single-stream",
    driver: DriverOpt = "native",
    iterations: Iterations = None,
    warmup: Warmup = None,
    batch_size: BatchSize = 1,
    samples_per_query: SamplesPerQuery = None,
    qps: Qps = None,
    latency_bound: LatencyBound = None,
    batch_sizes: BatchSizes = None,
    min_duration: MinDuration = None,
    max_duration: MaxDuration = None,
    adaptive: Adaptive = None,
    seed: Seed = 0,
    dataset: DatasetOpt = None,
    split: SplitOpt = None,
    trace_level: TraceLevelOpt = DEFAULT_TRACE_LEVEL,
    trace_queries: TraceQueriesOpt = DEFAULT_TRACE_QUERIES,
    atol: Atol = 1e-4,
    top1_agreement: Top1Agreement = 1.0,
    concurrent: ConcurrentOpt = False,
    wait: Annotated[bool, typer.Option(help="wait for the outcome and print it")] = True,
    token: Annotated[str | None, typer.Option(envvar="DLSCOPE_API_TOKEN")] = None,
) -> None:
    """Submit an evaluation to a running gateway over HTTP; with --framework all (or a
    list), an experiment on every matching worker, and print the comparison."""
    wire_scenario = _scenario(
        scenario,
        driver=driver,
        iterations=iterations,
        warmup=warmup,
        batch_size=batch_size,
        samples_per_query=samples_per_query,
        qps=qps,
        latency_bound=latency_bound,
        batch_sizes=batch_sizes,
        min_duration=min_duration,
        max_duration=max_duration,
        adaptive=adaptive,
        seed=seed,
    )
    selection = framework_selection(framework)
    tracing = trace_fields(trace_level, trace_queries)
    if selection is not None and tracing:
        raise fail("--trace-level and --trace-queries trace one evaluation, not an experiment", 2)
    if selection is not None:
        experiment_body = {
            "model": model,
            "version": version,
            "frameworks": selection,
            "framework_version": framework_version,
            "hardware": hardware,
            "scenario": wire_scenario,
            "dataset": dataset,
            "split": split,
            "tolerance": {"atol": atol, "min_top1_agreement": top1_agreement},
            # Only when asked: a gateway that predates the field refuses it.
            **({"concurrent": True} if concurrent else {}),
        }
        submit_experiment(gateway, token, experiment_body, wait)
        return
    if concurrent:
        warn_concurrent_alone()
    body = {
        "model": model,
        "version": version,
        "framework": framework,
        "framework_version": framework_version,
        "hardware": hardware,
        "scenario": wire_scenario,
        "dataset": dataset,
        "split": split,
        **tracing,
        **({"concurrent": True} if concurrent else {}),
    }
    with gateway_client(gateway, token) as client:
        accepted = submitted(client, gateway, "/v1/evaluations", body, "evaluation")
        console.print(f"evaluation {accepted['id']} accepted; trace: {accepted['trace_url']}")
        if not wait:
            return
        with console.status("waiting for the evaluation…"):
            evaluation = until_settled(client, f"/v1/evaluations/{accepted['id']}", TERMINAL, 0.2)
    if evaluation["status"] == "failed":
        raise fail(f"evaluation failed: {evaluation['error']}", 1)
    console.print(_summary_table({**evaluation, "model_version": evaluation["model_version"]}))


@app.command()
def publish(
    model: Annotated[str, typer.Argument()],
    version: Version = "*",
    framework: FrameworkOpt = "onnxruntime",
    framework_version: FrameworkVersion = "*",
    hardware: HardwareOpt = "cpu",
    scenario: ScenarioOpt = "single-stream",
    driver: DriverOpt = "native",
    iterations: Iterations = None,
    warmup: Warmup = None,
    batch_size: BatchSize = 1,
    samples_per_query: SamplesPerQuery = None,
    qps: Qps = None,
    latency_bound: LatencyBound = None,
    batch_sizes: BatchSizes = None,
    min_duration: MinDuration = None,
    max_duration: MaxDuration = None,
    adaptive: Adaptive = None,
    seed: Seed = 0,
    dataset: DatasetOpt = None,
    split: SplitOpt = None,
    trace_level: TraceLevelOpt = DEFAULT_TRACE_LEVEL,
    trace_queries: TraceQueriesOpt = DEFAULT_TRACE_QUERIES,
) -> None:
    """Publish an evaluation.requested message straight to the broker (DLSCOPE_BROKER_URL)."""
    import uvloop

    if framework_selection(framework) is not None:
        raise fail(
            "publish sends one evaluation; to compare frameworks use "
            "`dlscope submit --framework all` (or publish experiment.requested, see README.md)",
            2,
        )

    from shared.messages import Envelope, evaluation_stream
    from shared.runtime import Runtime

    request = _request(
        model,
        version=version,
        framework=framework,
        framework_version=framework_version,
        hardware=hardware,
        scenario=_scenario(
            scenario,
            driver=driver,
            iterations=iterations,
            warmup=warmup,
            batch_size=batch_size,
            samples_per_query=samples_per_query,
            qps=qps,
            latency_bound=latency_bound,
            batch_sizes=batch_sizes,
            min_duration=min_duration,
            max_duration=max_duration,
            adaptive=adaptive,
            seed=seed,
        ),
        requested_by="dlscope publish",
        dataset=dataset,
        split=split,
        trace_level=trace_level,
        trace_queries=trace_queries,
    )
    settings = Settings()
    if settings.broker_url.startswith("memory://"):
        raise fail("set DLSCOPE_BROKER_URL to the RabbitMQ of a running deployment (amqp://…)", 2)

    async def send() -> None:
        runtime = Runtime.create(settings, "dlscope-cli")
        bus = runtime.bus("cli")
        try:
            await bus.start()
            await bus.publish(
                Envelope.wrap(
                    request,
                    stream_id=evaluation_stream(request.evaluation_id),
                    correlation_id=request.evaluation_id,
                    producer="cli",
                )
            )
        finally:
            await bus.stop()
            await runtime.close()

    try:
        uvloop.run(send())
    except DlscopeError as exc:
        raise fail(str(exc), 1) from exc
    console.print(f"published evaluation {request.evaluation_id}")


@db.command("upgrade")
def db_upgrade() -> None:
    """Apply the event store's migrations (DLSCOPE_DATABASE_URL, default SQLite under home)."""
    from shared.eventstore.migrate import current_revision, upgrade

    url = Settings().resolved_database_url

    async def main() -> str | None:
        await upgrade(url)
        return await current_revision(url)

    try:
        revision = asyncio.run(main())
    except DlscopeError as exc:
        raise fail(str(exc), 1) from exc
    console.print(f"event store at revision {revision}")


@db.command("rebuild-projections")
def db_rebuild_projections() -> None:
    """Drop the read models and rebuild them by replaying every stored event."""
    from shared.eventstore import EventStore

    url = Settings().resolved_database_url

    async def main() -> int:
        async with EventStore.from_url(url) as store:
            return await store.rebuild_projections()

    try:
        replayed = asyncio.run(main())
    except DlscopeError as exc:
        raise fail(str(exc), 1) from exc
    console.print(f"projections rebuilt from {replayed} events")


@db.command("check")
def db_check(
    quarantine: Annotated[
        bool,
        typer.Option(
            "--quarantine",
            help="Move them out of the log into the quarantine table and rebuild the projections.",
        ),
    ] = False,
    shown: Annotated[int, typer.Option("--show", min=0, help="How many to list.")] = 20,
) -> None:
    """Find stored events the wire contracts would not admit today (unknown type, payload
    failing its schema); exits 1 if some remain in the log."""
    from shared.eventstore import EventStore
    from shared.eventstore.quarantine import (
        Inadmissible,
        by_type,
        find_inadmissible,
        quarantine_inadmissible,
    )

    url = Settings().resolved_database_url

    async def main() -> tuple[list[Inadmissible], int, int]:
        async with EventStore.from_url(url) as store:
            found = await find_inadmissible(store)
            moved = await quarantine_inadmissible(store, found) if quarantine else 0
            return found, moved, await store.count_events()

    try:
        found, moved, remaining = asyncio.run(main())
    except DlscopeError as exc:
        raise fail(str(exc), 1) from exc
    if not found:
        console.print(f"all {remaining} stored events are admitted by the wire contracts")
        return
    console.print(f"{len(found)} stored events would not be admitted today:")
    for event_type, count in by_type(found).most_common():
        console.print(f"  {count:>6}  {escape(event_type)}", highlight=False)
    table = Table("position", "event id", "type", "stream", "reason")
    for item in found[:shown]:
        event = item.event
        reason = item.reason if len(item.reason) <= 100 else item.reason[:99] + "…"
        table.add_row(
            str(event.position),
            str(event.event_id),
            escape(event.type),
            escape(event.stream_id),
            escape(reason),
        )
    if shown:
        console.print(table)
    if quarantine:
        console.print(
            f"moved {moved} into the quarantine table (quarantined_events) and rebuilt the "
            f"projections from the {remaining} events left"
        )
        return
    raise fail("run `dlscope db check --quarantine` to move them out of the log", 1)


def main() -> None:
    app()
