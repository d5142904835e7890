"""The command line's dlscope in this process: the services each command needs, on the
in-memory broker and the SQLite store under DLSCOPE_HOME (``dlscope.embedded``)."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

from dlscope.cli.client import (
    LAYERS_TOP,
    Compared,
    Evaluated,
    LayersWanted,
    ModelFilter,
    ModelRow,
)
from dlscope.cli.live import LiveEvaluations
from dlscope.cli.terminal import fail, progress
from dlscope.cli.zoo_build import build_on_first_use, unknown_model
from dlscope.embedded import (
    ask_embedded_registry,
    embedded_settings,
    evaluate,
    experiment,
    list_models,
)
from shared.breakdown import profile_of, report
from shared.config import Settings
from shared.errors import DlscopeError, ModelNotFound
from shared.eventstore import EventStore
from shared.eventstore.views import StoredEvent
from shared.manifests import ModelManifest
from shared.messages import (
    DeprecateArtifact,
    DeprecationResult,
    EvaluationProfiled,
    EvaluationRequested,
    ExperimentRequested,
    RegisterArtifact,
    RegistrationResult,
    evaluation_stream,
)

__all__ = ["EmbeddedClient"]

T = TypeVar("T")


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    try:
        return uvloop.run(coroutine)
    except DlscopeError as exc:
        raise fail(str(exc), 1) from exc


class EmbeddedClient:
    """dlscope in this process. ``settings`` as configured: the embedded services run on
    memory:// and the SQLite store under its home whatever it says, while ``layers`` reads
    the store it names (DLSCOPE_DATABASE_URL, or that same SQLite)."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.configured = settings or Settings()
        self.settings = embedded_settings(self.configured)

    def models(self, wanted: ModelFilter) -> list[ModelRow]:
        views = _run(list_models(self.settings, **dataclasses.asdict(wanted)))
        return [
            ModelRow(
                v.name,
                v.version,
                v.framework,
                v.task,
                v.deprecated,
                str(v.manifest.get("description", "")),
            )
            for v in views
        ]

    def register(self, manifest: ModelManifest, what: str) -> bool:
        body = manifest.model_dump(mode="json")  # relative sources now absolute
        # This user's own registry, in this process: the manifest may name their files.
        call = RegisterArtifact(manifest=body, local=True)
        result = _run(ask_embedded_registry(self.settings, "register", call, RegistrationResult))
        if result.manifest is None:
            raise fail(f"{what}: refused: {result.error}", 1)
        return bool(result.created)

    def deprecate(self, name: str, version: str, reason: str) -> None:
        call = DeprecateArtifact(name=name, version=version, reason=reason)
        reply = _run(ask_embedded_registry(self.settings, "deprecate", call, DeprecationResult))
        if reply.error is not None:
            raise fail(reply.error, 1)

    def report(self, keys: list[uuid.UUID]) -> dict[str, str]:
        # The analyzer's and the gateway's own code draws it: the same report as a deployment's.
        from services.analyzer.calls import AnalyzerCalls
        from services.gateway.ui.documents import ReportDocument, Source
        from services.gateway.ui.report import report_csv, report_html, report_markdown

        settings = self.settings

        async def read() -> ReportDocument:
            store = EventStore.from_url(settings.resolved_database_url)
            try:
                figures = AnalyzerCalls(store, "dlscope").figures
                return await Source(store, settings, figures).report(keys)
            finally:
                await store.close()

        with progress() as bar:
            task = bar.add_task("reading the event store", total=4)
            document = _run(read())
            if len(document.not_found) == len(keys):
                shown = ", ".join(document.not_found)
                raise fail(f"no evaluation or experiment {shown} is stored here", 1)
            bar.update(task, advance=1, description="drawing the charts")
            html = report_html(document)
            bar.update(task, advance=1, description="writing CSV")
            csv = report_csv(document)
            bar.update(task, advance=1, description="writing Markdown")
            markdown = report_markdown(document)
            bar.update(task, advance=1, description="done")
        return {"html": html, "csv": csv, "md": markdown}

    def layers(self, wanted: LayersWanted) -> dict[str, Any]:
        url = self.configured.resolved_database_url
        ids = (wanted.evaluation_id, *wanted.others)

        async def read() -> list[EvaluationProfiled | str]:
            async with EventStore.from_url(url) as store:
                return [profile_of(await store.stream_events(evaluation_stream(i))) for i in ids]

        try:
            found = asyncio.run(read())
        except DlscopeError as exc:
            raise fail(str(exc), 1) from exc
        for one, why in zip(ids, found, strict=True):
            if isinstance(why, str):
                raise fail(f"no layers of evaluation {one} in {url}: {why}", 1)
        profiled = [p for p in found if isinstance(p, EvaluationProfiled)]
        answer = report(profiled[0], top=wanted.top, level=wanted.level, compared=profiled[1:])
        if isinstance(answer, str):
            raise fail(answer, 1)
        return answer.model_dump(mode="json")

    def evaluate(self, request: EvaluationRequested, *, wait: bool) -> Evaluated:
        """Run ``request`` in this process (always to its end: nothing runs on without it)."""
        self._build_zoo_on_first_use(request.model)
        with LiveEvaluations(lines=self.settings.progress == "lines") as live:
            outcome = _run(evaluate(self.settings, request, watch=live.observe))
        if outcome.evaluation.status == "failed":
            self._refuse_if_unknown(request.model)
        document = outcome.to_json()
        if outcome.spans is not None:
            _count_application_spans(document["evaluation"], outcome.spans)
        return Evaluated(
            evaluation_id=request.evaluation_id,
            evaluation=document["evaluation"],
            document=document,
            layers=layer_report(outcome.events),
            footer=f"evaluation {request.evaluation_id}, trace {outcome.trace_id}: "
            f"{self.settings.trace_where(outcome.trace_id)}; "
            f"events stored in {self.settings.resolved_database_url}",
        )

    def experiment(self, request: ExperimentRequested, *, wait: bool) -> Compared:
        """Run ``request`` in this process, to its end."""
        model = request.models[0].model
        self._build_zoo_on_first_use(model)
        with LiveEvaluations(lines=self.settings.progress == "lines") as live:
            try:
                outcome = uvloop.run(experiment(self.settings, request, watch=live.observe))
            except DlscopeError as exc:
                if isinstance(exc, ModelNotFound):
                    self._refuse_if_unknown(model)
                raise fail(str(exc), 1) from exc
        view = outcome.experiment
        return Compared(
            model=model,
            hardware=request.hardware,
            comparison=view.comparison,
            error=view.error,
            experiment_id=view.experiment_id,
            document=outcome.to_json(),
            windows=outcome.windows,
            not_installed=outcome.not_installed,
            layers={
                member: found.model_dump(mode="json")
                for member, profiled in outcome.profiles.items()
                if not isinstance(found := report(profiled, top=LAYERS_TOP), str)
            },
            footer=f"experiment {view.experiment_id}, trace {outcome.trace_id}: "
            f"{self.settings.trace_where(outcome.trace_id)}; "
            f"events stored in {self.settings.resolved_database_url}",
        )

    def _build_zoo_on_first_use(self, model: str) -> None:
        build_on_first_use(model, self.settings.home, self)

    def _refuse_if_unknown(self, model: str) -> None:
        """A run of a model nobody registered ends with the nearest names, the zoo's models
        built on first use among them (the registry knows only those built)."""
        registered = sorted({row.name for row in self.models(ModelFilter(include_deprecated=True))})
        if model not in registered:
            raise fail(unknown_model(model, registered, self.settings.home), 1)


def layer_report(events: list[StoredEvent]) -> dict[str, Any] | None:
    """The layer breakdown of an evaluation from its events, as ``dlscope layers`` shows it;
    None when it was not profiled."""
    profiled = profile_of(events)
    if isinstance(profiled, str):
        return None
    answer = report(profiled, top=LAYERS_TOP)
    return None if isinstance(answer, str) else answer.model_dump(mode="json")


def _count_application_spans(evaluation: dict[str, Any], spans: dict[str | None, int]) -> None:
    """The application level's spans, as this process exported them: the worker counts the
    spans it made of each traced pass, but the services' own (every message's hops) are
    made everywhere, so the stored outcome leaves them uncounted."""
    for outcome in (evaluation.get("result") or {}).get("tracing", []):
        if outcome.get("level") == "application" and outcome.get("captured"):
            outcome["spans"] = spans.get(None, 0)
