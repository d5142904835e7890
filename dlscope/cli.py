"""The ``dlscope`` command line."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import time
import uuid
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from pydantic import ValidationError
from rich.table import Table

from dlscope.models_cli import models
from dlscope.terminal import console, fail
from dlscope.zoo_cli import build_on_first_use, zoo
from shared.config import Settings
from shared.errors import DlscopeError
from shared.messages import FRAMEWORKS, HARDWARE, EvaluationRequested, Scenario

__all__ = ["app", "main"]

app = typer.Typer(
    help="dlscope: benchmark deep-learning inference across models, frameworks and hardware.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
db = typer.Typer(help="The event store: migrations and projections.", no_args_is_help=True)
app.add_typer(db, name="db")
app.add_typer(models, name="models")
app.add_typer(zoo, name="zoo")

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
    iterations: int,
    warmup: int,
    batch_size: int,
    seed: int,
    requested_by: str,
    dataset: str | None = None,
    split: str | None = None,
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
            scenario=Scenario(
                warmup=warmup, iterations=iterations, batch_size=batch_size, seed=seed
            ),
            dataset=dataset,
            split=split,
            requested_by=requested_by,
        )
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise fail(problems, 2) from exc


def _summary_table(evaluation: dict[str, Any]) -> Table:
    result = evaluation["result"]
    table = Table(
        title=f"{evaluation['model']} {evaluation['model_version']} on "
        f"{evaluation['framework']} ({evaluation['hardware']})"
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
        table.add_row(key.removesuffix("_ms").replace("_", " ") + " (ms)", f"{result[key]:.3f}")
    table.add_row("throughput (samples/s)", f"{result['throughput_per_s']:.1f}")
    accuracy = result.get("accuracy")
    if accuracy:
        on = accuracy["dataset"] + (f" {accuracy['split']}" if accuracy["split"] else "")
        table.add_row(f"top-1 on {on} ({accuracy['samples']} samples)", f"{accuracy['top1']:.4f}")
        table.add_row("top-5", f"{accuracy['top5']:.4f}")
    return table


# Options shared by the commands that request an evaluation.
Version = Annotated[str, typer.Option("--version", help="model version constraint, e.g. '>=1,<2'")]
FrameworkOpt = Annotated[
    str, typer.Option("--framework", "-f", help=f"one of {', '.join(FRAMEWORKS)}")
]
FrameworkVersion = Annotated[str, typer.Option(help="framework version constraint")]
HardwareOpt = Annotated[str, typer.Option("--hardware", help=f"one of {', '.join(HARDWARE)}")]
Iterations = Annotated[int, typer.Option("--iterations", "-n", help="timed queries")]
Warmup = Annotated[int, typer.Option(help="untimed queries before timing")]
BatchSize = Annotated[int, typer.Option("--batch-size", "-b")]
Seed = Annotated[int, typer.Option(help="seed of the generated inputs")]
DatasetOpt = Annotated[
    str | None,
    typer.Option("--dataset", help="a labelled dataset, e.g. digits: measures top-1/top-5"),
]
SplitOpt = Annotated[str | None, typer.Option("--split", help="one split, e.g. test")]


@app.command()
def run(
    model: Annotated[str, typer.Argument(help="model name, e.g. squeezenet")],
    version: Version = "*",
    framework: FrameworkOpt = "onnxruntime",
    framework_version: FrameworkVersion = "*",
    hardware: HardwareOpt = "cpu",
    iterations: Iterations = 200,
    warmup: Warmup = 10,
    batch_size: BatchSize = 1,
    seed: Seed = 0,
    dataset: DatasetOpt = None,
    split: SplitOpt = None,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="write the full result here")
    ] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="show the services' logs")
    ] = False,
) -> None:
    """Evaluate a model with every service in this process (in-memory broker, SQLite)."""
    import uvloop

    # The outcome is reported below; the services' own warnings are for --verbose.
    logging.basicConfig(level=logging.INFO if verbose else logging.ERROR, format=LOG_FORMAT)

    from dlscope.embedded import embedded_settings, evaluate

    request = _request(
        model,
        version=version,
        framework=framework,
        framework_version=framework_version,
        hardware=hardware,
        iterations=iterations,
        warmup=warmup,
        batch_size=batch_size,
        seed=seed,
        requested_by="dlscope run",
        dataset=dataset,
        split=split,
    )
    settings = embedded_settings(Settings())
    build_on_first_use(model, settings.home)
    with console.status(f"evaluating {model} on {framework} ({hardware})…"):
        try:
            outcome = uvloop.run(evaluate(settings, request))
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
    console.print(
        f"evaluation {evaluation['evaluation_id']}, trace {outcome.trace_id}; "
        f"events stored in {settings.resolved_database_url}"
    )
    if json_path is not None:
        console.print(f"full result written to {json_path}")


@app.command()
def up(
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    port: Annotated[int, typer.Option()] = 8080,
) -> None:
    """Serve the HTTP gateway and every service in this process (in-memory broker, SQLite)."""
    import uvloop

    from dlscope.embedded import embedded_settings, serve_all

    settings = embedded_settings(Settings())
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        console.print(f"dlscope up: http://{host}:{port}/docs (Ctrl-C stops)")
        await serve_all(settings, host=host, port=port, stop=stop)

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
    iterations: Iterations = 200,
    warmup: Warmup = 10,
    batch_size: BatchSize = 1,
    seed: Seed = 0,
    dataset: DatasetOpt = None,
    split: SplitOpt = None,
    wait: Annotated[bool, typer.Option(help="wait for the outcome and print it")] = True,
    token: Annotated[str | None, typer.Option(envvar="DLSCOPE_API_TOKEN")] = None,
) -> None:
    """Submit an evaluation to a running gateway over HTTP."""
    body = {
        "model": model,
        "version": version,
        "framework": framework,
        "framework_version": framework_version,
        "hardware": hardware,
        "scenario": {
            "iterations": iterations,
            "warmup": warmup,
            "batch_size": batch_size,
            "seed": seed,
        },
        "dataset": dataset,
        "split": split,
    }
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(base_url=gateway, headers=headers, timeout=30) as client:
        try:
            response = client.post("/v1/evaluations", json=body)
        except httpx.HTTPError as exc:
            raise fail(f"cannot reach the gateway at {gateway}: {exc}", 2) from exc
        if response.status_code != 202:
            raise fail(
                f"the gateway refused the evaluation ({response.status_code}): {response.text}", 2
            )
        accepted = response.json()
        console.print(f"evaluation {accepted['id']} accepted; trace: {accepted['trace_url']}")
        if not wait:
            return
        with console.status("waiting for the evaluation…"):
            while True:
                status = client.get(f"/v1/evaluations/{accepted['id']}")
                if status.status_code == 200 and status.json()["status"] in TERMINAL:
                    break
                time.sleep(0.2)  # polling a remote HTTP API: nothing to await locally
        evaluation = status.json()
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
    iterations: Iterations = 200,
    warmup: Warmup = 10,
    batch_size: BatchSize = 1,
    seed: Seed = 0,
    dataset: DatasetOpt = None,
    split: SplitOpt = None,
) -> None:
    """Publish an evaluation.requested message straight to the broker (DLSCOPE_BROKER_URL)."""
    import uvloop

    from shared.messages import Envelope, evaluation_stream
    from shared.runtime import Runtime

    request = _request(
        model,
        version=version,
        framework=framework,
        framework_version=framework_version,
        hardware=hardware,
        iterations=iterations,
        warmup=warmup,
        batch_size=batch_size,
        seed=seed,
        requested_by="dlscope publish",
        dataset=dataset,
        split=split,
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


def main() -> None:
    app()
