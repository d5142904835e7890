"""Every dlscope service in one process: ``dlscope run`` (one evaluation, or an experiment on
every framework installed here) and ``dlscope up``.

The composition root of the embedded mode: the in-process broker and the SQLite event store,
with the very services the distributed deployment runs as separate processes. Its workers share
one process, and still take turns at the device they measure: each holds its device's lease
(``services.workers.leases``), which excludes the other descriptors of this process as it
does other processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import TypeAdapter

from dlscope.catalogue import build_control_plane, build_gateway, build_worker
from services.workers import WorkerService
from services.workers.availability import not_installed
from shared.breakdown import profile_of
from shared.config import Settings
from shared.errors import ConfigurationError, DlscopeError, ModelNotFound
from shared.eventstore import EventStore
from shared.eventstore.views import ArtifactView, EvaluationView, ExperimentView, StoredEvent
from shared.manifests import SERVED_BY, ModelManifest
from shared.messages import (
    PROGRESS_KEY,
    DeviceLease,
    Envelope,
    EvaluationCompleted,
    EvaluationFailed,
    EvaluationMeasured,
    EvaluationProfiled,
    EvaluationRequested,
    ExperimentCompared,
    ExperimentFailed,
    ExperimentRequested,
    Framework,
    Hardware,
    ModelRef,
    Payload,
    ResolveArtifact,
    ResolvedArtifact,
    evaluation_stream,
    experiment_models,
    experiment_stream,
    rpc_key,
)
from shared.messaging import Binding, Bus
from shared.runtime import Runtime, Service, running, stopping
from shared.telemetry import SpanCounter, trace_id_hex
from shared.trace_files import default_trace_file

__all__ = [
    "EmbeddedExperiment",
    "EmbeddedResult",
    "ask_embedded_registry",
    "embedded_settings",
    "evaluate",
    "experiment",
    "list_models",
    "serve_all",
]

P = TypeVar("P", bound=Payload)


# Told each event of the evaluations run (type, payload): progress for the command line.
Watch = Callable[[str, Mapping[str, Any]], None]


def embedded_settings(settings: Settings) -> Settings:
    """The same settings, on the in-process broker and the SQLite store under ``home``; and,
    where no exporter is configured, spans kept in ``home``'s trace file, which ``dlscope
    trace <id>`` reads: a newcomer sees a trace without starting a Jaeger."""
    update: dict[str, Any] = {"broker_url": "memory://", "database_url": ""}
    if not settings.otlp_endpoint:
        update["otlp_endpoint"] = f"file://{default_trace_file(settings.home)}"
    return settings.model_copy(update=update)


def all_services(
    runtime: Runtime,
    workers: list[tuple[Framework, Hardware]],
    *,
    gateway: tuple[str, int] | None = None,
) -> list[Service]:
    # In the catalogue's start order: the recorder first, the gateway last.
    services = build_control_plane(runtime)
    services += [build_worker(runtime, f, h) for f, h in workers]
    if gateway is not None:
        services.append(build_gateway(runtime, *gateway))
    return services


@dataclass(frozen=True)
class EmbeddedResult:
    evaluation: EvaluationView
    events: list[StoredEvent]
    trace_id: str
    # The spans of its trace this process exported, per trace level (None: the services'
    # own); None when nothing exports them.
    spans: dict[str | None, int] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "evaluation": TypeAdapter(EvaluationView).dump_python(self.evaluation, mode="json"),
            "trace_id": self.trace_id,
            "spans_written": None if self.spans is None else sum(self.spans.values()),
            "events": _events_json(self.events),
        }


def _counter(settings: Settings) -> SpanCounter | None:
    """A count of the spans exported, where they are (never a reason to record them)."""
    return SpanCounter() if settings.otlp_endpoint else None


def _events_json(events: list[StoredEvent]) -> list[dict[str, Any]]:
    """The events as a result's JSON gives them: each field, and the payload as its document
    (``StoredEvent.payload``; the field behind it may hold the text it was stored as)."""
    dumped = TypeAdapter(list[StoredEvent]).dump_python(
        events, mode="json", exclude={"__all__": {"stored_payload"}}
    )
    return [
        {**fields, "payload": event.payload} for fields, event in zip(dumped, events, strict=True)
    ]


async def evaluate(
    settings: Settings, request: EvaluationRequested, *, watch: Watch | None = None
) -> EmbeddedResult:
    """Run one evaluation through every service in this process; return what was recorded.
    ``watch`` is told each event of the evaluation (its type and payload) as it happens."""
    counter = _counter(settings)
    runtime = Runtime.create(settings, "dlscope", spans=counter)
    try:
        async with running(all_services(runtime, [(request.framework, request.hardware)])):
            client = runtime.bus("cli")
            await client.start()
            trace_id = await _publish_and_wait(runtime, client, request, watch=watch)
            await runtime.broker.drained()  # the recorder has stored every event
            await client.stop()
        async with EventStore.from_url(settings.resolved_database_url) as store:
            evaluation = await store.get_evaluation(request.evaluation_id)
            events = await store.stream_events(evaluation_stream(request.evaluation_id))
        assert evaluation is not None, "the recorder stored the evaluation"
        return EmbeddedResult(
            evaluation=evaluation,
            events=events,
            trace_id=trace_id,
            spans=None if counter is None else counter.of(trace_id),
        )
    finally:
        await runtime.close()


@dataclass(frozen=True)
class EmbeddedExperiment:
    experiment: ExperimentView
    evaluations: list[EvaluationView]
    # Frameworks with an export of the model that cannot run here, and why.
    not_installed: dict[str, str]
    trace_id: str
    # Each measured member's device and window (its evaluation.measured ``lease``).
    windows: dict[uuid.UUID, DeviceLease] = field(default_factory=dict)
    # Each profiled member's layer summary (its evaluation.profiled), at a deep trace level.
    profiles: dict[uuid.UUID, EvaluationProfiled] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "experiment": TypeAdapter(ExperimentView).dump_python(self.experiment, mode="json"),
            "evaluations": TypeAdapter(list[EvaluationView]).dump_python(
                self.evaluations, mode="json"
            ),
            "not_installed": self.not_installed,
            "trace_id": self.trace_id,
            "device_windows": {
                str(member): window.model_dump(mode="json")
                for member, window in self.windows.items()
            },
        }


def installed(framework: str) -> str | None:
    """None when ``framework``'s module is installed here, else why. Looked up, not imported:
    the frameworks run in their workers' own processes, never in this one."""
    try:
        return not_installed(framework)
    except DlscopeError as exc:
        return str(exc)


async def experiment(
    settings: Settings, request: ExperimentRequested, *, watch: Watch | None = None
) -> EmbeddedExperiment:
    """Run an experiment of ``request``'s first model, with its exports for the other
    frameworks, on every one of them installed here (a worker each), in this process;
    ``watch`` is told each event of its member evaluations as it happens."""
    runtime = Runtime.create(settings, "dlscope")
    try:
        async with running(all_services(runtime, [])):
            client = runtime.bus("cli")
            await client.start()
            models = await _exports(runtime, client, request)
            # Every framework that runs one of the exports (ONNX also runs on opencl and
            # tensorrt), within the request's selection: a worker for each installed here.
            wanted = request.frameworks
            frameworks = dict.fromkeys(
                f
                for m in models
                for f in m.frameworks
                if f in wanted or (wanted == "all" and (f != SERVED_BY or settings.endpoint_url))
            )
            broken = {f: installed(f) for f in frameworks}
            not_installed: dict[str, str] = {f: why for f, why in broken.items() if why}
            serving = [f for f in frameworks if f not in not_installed]
            runnable = [m for m in models if any(f in serving for f in m.frameworks)]
            if not runnable:
                found = "; ".join(f"{f}: {why}" for f, why in not_installed.items())
                raise ConfigurationError(
                    f"no framework with an export of {models[0].ref} is installed here: {found}"
                )
            request = request.model_copy(
                update={
                    "models": [ModelRef(model=m.name, version=f"=={m.version}") for m in runnable]
                }
            )
            workers = await _framework_workers(runtime, serving, request.hardware, not_installed)
            async with stopping(workers):
                trace_id = await _publish_and_wait(runtime, client, request, watch=watch)
            await runtime.broker.drained()  # the recorder has stored every event
            await client.stop()
        async with EventStore.from_url(settings.resolved_database_url) as store:
            view = await store.get_experiment(request.experiment_id)
            assert view is not None, "the recorder stored the experiment"
            members = view.member_ids
            by_id = {e.evaluation_id: e for e in await store.get_evaluations(members)}
            streams = {m: await store.stream_events(evaluation_stream(m)) for m in members}
        windows = {m: window for m, events in streams.items() if (window := _window(events))}
        profiles = {
            m: profiled
            for m, events in streams.items()
            if isinstance(profiled := profile_of(events), EvaluationProfiled)
        }
        return EmbeddedExperiment(
            experiment=view,
            evaluations=[by_id[i] for i in members if i in by_id],
            not_installed=not_installed,
            trace_id=trace_id,
            windows=windows,
            profiles=profiles,
        )
    finally:
        await runtime.close()


def _window(events: list[StoredEvent]) -> DeviceLease | None:
    """The device and window of an evaluation's measurement, if it was measured."""
    measured = [e for e in events if e.type == EvaluationMeasured.TYPE]
    lease = measured[-1].payload.get("lease") if measured else None
    return None if lease is None else DeviceLease.model_validate(lease)


async def _framework_workers(
    runtime: Runtime, frameworks: list[Framework], hardware: Hardware, broken: dict[str, str]
) -> list[WorkerService]:
    """A started worker for each of ``frameworks`` that can run here (their framework
    processes start all at once); those that cannot are added to ``broken`` with the reason,
    and stopped. The caller stops the others."""
    workers = [WorkerService(runtime, framework=f, hardware=hardware) for f in frameworks]
    started = await asyncio.gather(*(w.start() for w in workers), return_exceptions=True)
    serving = []
    for worker, outcome in zip(workers, started, strict=True):
        if isinstance(outcome, BaseException) and not isinstance(outcome, DlscopeError):
            raise outcome
        why = str(outcome) if outcome is not None else worker.unavailable
        if why is None:
            serving.append(worker)
            continue
        # Stopped before the plan: an agent that cannot run gets no member to fail.
        broken[worker.framework] = why
        await (worker.process.close() if outcome is not None else worker.stop())
    return serving


async def _exports(
    runtime: Runtime, client: Bus, request: ExperimentRequested
) -> list[ModelManifest]:
    """The request's first model and its exports for the frameworks it asks for."""
    settings = runtime.settings
    named = request.models[0]
    found = await client.ask(
        rpc_key("registry", "resolve"),
        Envelope.wrap(
            ResolveArtifact(kind="model", name=named.model, version=named.version),
            stream_id="registry",
            correlation_id=request.experiment_id,
        ),
        ResolvedArtifact,
        timeout=settings.rpc_timeout_s,
    )
    if not isinstance(found.manifest, ModelManifest):
        raise ModelNotFound(found.error or f"no model {named.model!r} in the registry")
    await runtime.broker.drained()  # the registry's registrations are stored
    async with EventStore.from_url(settings.resolved_database_url) as store:
        views = await store.list_artifacts(kind="model")
    registered = [m for view in views if (m := view.model_manifest()) is not None]
    return experiment_models(found.manifest, registered, request.frameworks)


def _settled_by(
    request: EvaluationRequested | ExperimentRequested,
) -> tuple[str, uuid.UUID, tuple[str, ...]]:
    """The stream ``request`` starts, the id its events carry, and the event types that end
    it: what ``dlscope run`` waits for, for either kind of request."""
    if isinstance(request, EvaluationRequested):
        outcomes = (EvaluationCompleted.TYPE, EvaluationFailed.TYPE)
        return evaluation_stream(request.evaluation_id), request.evaluation_id, outcomes
    outcomes = (ExperimentCompared.TYPE, ExperimentFailed.TYPE)
    return experiment_stream(request.experiment_id), request.experiment_id, outcomes


async def _publish_and_wait(
    runtime: Runtime,
    client: Bus,
    request: EvaluationRequested | ExperimentRequested,
    *,
    watch: Watch | None = None,
) -> str:
    """Publish ``request`` once every service and worker has started (and announced itself),
    as one trace; return its trace id when an event that ends it came (``_settled_by``)."""
    stream_id, correlation_id, outcomes = _settled_by(request)
    finished: asyncio.Future[Envelope] = asyncio.get_running_loop().create_future()

    async def on_outcome(envelope: Envelope) -> None:
        if envelope.correlation_id == correlation_id and not finished.done():
            finished.set_result(envelope)

    await client.subscribe(
        runtime.topology.queue("cli", uuid.uuid4().hex),
        [Binding(runtime.topology.events, outcome) for outcome in outcomes],
        on_outcome,
        durable=False,
    )
    if watch is not None:

        async def on_event(envelope: Envelope) -> None:
            watch(envelope.type, envelope.payload)

        # Every evaluation's events (the experiment's members carry its id, not its stream),
        # and the workers' progress notifications between them.
        await client.subscribe(
            runtime.topology.queue("cli", uuid.uuid4().hex),
            [
                Binding(runtime.topology.events, "evaluation.*"),
                Binding(runtime.topology.jobs, PROGRESS_KEY),
            ],
            on_event,
            durable=False,
        )
    # Let the workers' announcements reach the scheduler before the request does.
    await runtime.broker.drained()
    with runtime.telemetry.tracer.start_as_current_span("dlscope run") as span:
        await client.publish(
            Envelope.wrap(
                request, stream_id=stream_id, correlation_id=correlation_id, producer="cli"
            )
        )
        trace_id = trace_id_hex(span.get_span_context())
    await finished
    return trace_id


async def serve_all(
    settings: Settings,
    *,
    host: str,
    port: int,
    stop: asyncio.Event,
    workers: list[tuple[Framework, Hardware]],
) -> None:
    """``dlscope up``: the gateway, every service and ``workers``, until ``stop`` is set."""
    runtime = Runtime.create(settings, "dlscope")
    try:
        async with running(all_services(runtime, workers, gateway=(host, port))):
            await stop.wait()
    finally:
        await runtime.close()


@contextlib.asynccontextmanager
async def _registry(settings: Settings) -> AsyncIterator[Bus]:
    """The recorder and the registry in this process (which registers the built-in zoo),
    and a client bus to talk to them; everything they published is stored on exit."""
    runtime = Runtime.create(settings, "dlscope")
    try:
        async with running(build_control_plane(runtime, ("recorder", "registry"))):
            client = runtime.bus("cli")
            await client.start()
            yield client
            await runtime.broker.drained()
            await client.stop()
    finally:
        await runtime.close()


async def ask_embedded_registry(
    settings: Settings, call: str, payload: Payload, answer: type[P]
) -> P:
    """The recorder and the registry run here for one request/reply call (``register``,
    ``deprecate``, …), its reply opened as ``answer``, and stop once what it did is stored.
    Not the gateway's ``ask_registry``, which asks a registry already running elsewhere."""
    async with _registry(settings) as client:
        return await client.ask(
            rpc_key("registry", call),
            Envelope.wrap(payload, stream_id="registry", correlation_id=uuid.uuid4()),
            answer,
            timeout=settings.rpc_timeout_s,
        )


async def list_models(
    settings: Settings,
    *,
    name: str | None = None,
    framework: str | None = None,
    task: str | None = None,
    include_deprecated: bool = False,
) -> list[ArtifactView]:
    """The embedded registry's models (the built-in zoo and what was registered here)."""
    async with _registry(settings):
        pass
    async with EventStore.from_url(settings.resolved_database_url) as store:
        return await store.list_artifacts(
            kind="model",
            name=name,
            framework=framework,
            task=task,
            include_deprecated=include_deprecated,
        )
