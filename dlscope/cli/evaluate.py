"""``dlscope run``, ``submit`` and ``publish``: request an evaluation (or, with several
frameworks, an experiment) and show its outcome.

The three take the same options (``EvaluationOptions``); ``run`` asks the embedded dlscope in
this process and ``submit`` a running deployment's gateway, through one ``Client`` interface;
``publish`` puts the request straight on the deployment's broker.

How one option reaches the kernel, ``-b 4`` (``batch_size``) for instance, in eight hops:

1. ``EvaluationOptions.batch_size`` (``cli/options.py``) becomes the wire ``Scenario``'s
   ``batch_size`` inside ``EvaluationRequested`` (``shared/messages/scenario.py``), validated
   once, there, for every client alike (a batched single-stream refuses ``--adaptive``);
2. the ``Client`` publishes the request (``cli/embedded_client.py`` through the embedded
   mode, ``cli/http.py`` through the gateway's ``POST /v1/evaluations``);
3. the scheduler's ``_schedule`` handler receives it typed and ``decisions.dispatch`` copies
   the scenario into the ``RunEvaluation`` job (``services/scheduler/decisions.py``);
4. the worker's ``JobRunner.run`` handler receives the job typed (``services/workers/jobs.py``)
   and calls ``MEASURE_JOB`` (``services/workers/handover.py``), ``measure_job`` in its
   framework process (``services/workers/framework/session.py``);
5. ``measurement.measure`` asks the scenario for its plan, ``Scenario.measurement()``: a
   ``BatchSweep`` of the one size 4 (``services/workers/framework/sessions/inference.py``), and
   builds the inputs of each query size before timing starts;
6. ``run_scenario`` (``shared/measurement/drivers.py``) issues queries of 4 sample indices;
7. ``run_query`` picks the inputs built for a query of that size;
8. ``Predictor.predict`` (``services/workers/framework/predictors/``) runs the framework on them.
"""

from __future__ import annotations

import json
import logging
import sys
import uuid
from pathlib import Path
from typing import Annotated

import typer

from dlscope.cli.client import Client, Compared, Evaluated
from dlscope.cli.experiments import show_comparison
from dlscope.cli.gateway_options import Token, gateway_option
from dlscope.cli.layers import show_layers, tracing_table
from dlscope.cli.options import (
    ComparisonOptions,
    EndpointOpt,
    EvaluationOptions,
    ModelArg,
    run_settings,
)
from dlscope.cli.outcome import exit_status, untrusted
from dlscope.cli.repeats import DEFAULT_MAX_SPREAD, run_arguments, run_repeated
from dlscope.cli.served_options import OptionalModelArg, ServedOptions
from dlscope.cli.spread import spread_options
from dlscope.cli.tables import generation_table, layers_table, summary_table
from dlscope.cli.terminal import LOG_FORMAT, console, fail
from shared.config import Settings
from shared.errors import DlscopeError
from shared.messages import Replay

__all__ = ["publish", "run", "submit"]

JsonPath = Annotated[Path | None, typer.Option("--json", help="write the full result here")]


@spread_options
def run(
    *,
    model: OptionalModelArg = None,
    options: EvaluationOptions,
    comparison: ComparisonOptions,
    served: ServedOptions,
    json_path: JsonPath = None,
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
    endpoint: EndpointOpt = None,
) -> None:
    """Evaluate a model with every service in this process (in-memory broker, SQLite).

    With --framework all (or a list), evaluate it on every framework installed here that
    has an export of it, one at a time on the shared device, and compare them.

    With --served-model NAME --tokenizer FILE --endpoint URL, a model a server serves that
    no manifest names.
    """
    # The outcome is reported below; the services' own warnings are for --verbose.
    logging.basicConfig(level=logging.INFO if verbose else logging.ERROR, format=LOG_FORMAT)
    if repeat > 1:
        options.wire_scenario()  # a bad option is refused before the first repetition
        if options.selection() is not None:
            raise fail("--repeat runs one framework; an experiment compares several once", 2)
        if options.driver == "loadgen":
            raise fail("--repeat compares raw latencies, which the loadgen driver keeps not", 2)
        run_repeated(run_arguments(sys.argv), repeat, max_spread=max_spread)
        return
    from dlscope.cli.embedded_client import EmbeddedClient

    client = EmbeddedClient(run_settings(endpoint))
    name, options = served.resolve(model, options, client)
    _request(client, name, options, comparison, "dlscope run", json_path, wait=True)


@spread_options
def submit(
    *,
    model: OptionalModelArg = None,
    options: EvaluationOptions,
    comparison: ComparisonOptions,
    served: ServedOptions,
    gateway: Annotated[str, gateway_option()] = "http://127.0.0.1:8080",
    wait: Annotated[bool, typer.Option(help="wait for the outcome and print it")] = True,
    token: Token = None,
    json_path: JsonPath = None,
) -> None:
    """Submit an evaluation to a running gateway over HTTP; with --framework all (or a
    list), an experiment on every matching worker, and print the comparison."""
    from dlscope.cli.http import HttpClient

    client = HttpClient(gateway, token)
    try:
        name, options = served.resolve(model, options, client)
        _request(client, name, options, comparison, "dlscope submit", json_path, wait=wait)
    finally:
        client.close()


def _request(
    client: Client,
    model: str,
    options: EvaluationOptions,
    comparison: ComparisonOptions,
    requested_by: str,
    json_path: Path | None,
    *,
    wait: bool,
) -> None:
    """Ask ``client`` for the evaluation or experiment the options describe; show it."""
    frameworks = options.selection()
    if frameworks is not None:
        request = options.experiment(model, frameworks, comparison, requested_by=requested_by)
        compared = client.experiment(request, wait=wait)
        if compared is not None:
            _write(json_path, compared)
            show_comparison(compared, json_path)
        return
    comparison.warn_if_alone()
    evaluation = options.request(model, requested_by=requested_by, concurrent=comparison.concurrent)
    evaluated = client.evaluate(evaluation, wait=wait)
    if evaluated is not None:
        _write(json_path, evaluated)
        _show(evaluated, json_path)


def _write(json_path: Path | None, outcome: Evaluated | Compared) -> None:
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(outcome.document, indent=2))


def _show(evaluated: Evaluated, json_path: Path | None) -> None:
    evaluation = evaluated.evaluation
    if evaluation["status"] != "completed":
        raise fail(f"evaluation {evaluated.evaluation_id} failed: {evaluation['error']}", 1)
    console.print(summary_table(evaluation))
    result = evaluation["result"]
    replay = (result.get("scenario") or {}).get("replay")
    if replay is not None:
        console.print(f"workload: {Replay.model_validate(replay)}", markup=False)
    if result.get("generation"):
        console.print(generation_table(result["generation"]))
    if result.get("tracing"):
        console.print(tracing_table(result["tracing"]))
    if evaluated.layers is not None:
        show_layers(evaluated.layers)
    elif result.get("layers"):  # a gateway that answers no breakdown: one query's layers
        console.print(layers_table(result["layers"]))
    if evaluated.footer is not None:
        console.print(evaluated.footer, markup=False)
    if json_path is not None:
        console.print(f"full result written to {json_path}", markup=False)
    if status := exit_status(result):
        raise untrusted(result, status)


@spread_options
def publish(
    model: ModelArg,
    options: EvaluationOptions,
    gateway: Annotated[
        str, gateway_option("the deployment's gateway, named in the hint how to follow it")
    ] = "http://127.0.0.1:8080",
) -> None:
    """Publish an evaluation.requested message straight to the broker (DLSCOPE_BROKER_URL),
    and say how to follow it on the deployment's gateway."""
    import uvloop

    if options.selection() is not None:
        raise fail(
            "publish sends one evaluation; to compare frameworks use "
            "`dlscope submit --framework all` (or publish experiment.requested, see "
            "docs/rabbitmq.md)",
            2,
        )

    from shared.messages import Envelope, evaluation_stream
    from shared.runtime import Runtime

    request = options.request(model, requested_by="dlscope publish")
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
    console.print(_following(request.evaluation_id, gateway), soft_wrap=True, highlight=False)


def _following(evaluation_id: uuid.UUID, gateway: str) -> str:
    """How to follow a published evaluation: the deployment's gateway has it once its
    recorder stored the request (its page, its events as they come, then its report)."""
    root = gateway.rstrip("/")
    return (
        f"follow it at {root}/evaluations/{evaluation_id} (its events as they come: curl -N "
        f"-H 'Accept: text/event-stream' {root}/v1/evaluations/{evaluation_id}/events); once "
        f"it ends: dlscope report {evaluation_id} --gateway {root}"
    )
