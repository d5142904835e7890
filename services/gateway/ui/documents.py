"""What a page or a report shows, gathered once: an evaluation with its figures and events,
an experiment with its members, a report of several ids with what it compares and what it
does not. Read from the event store's read models; the figures come from whoever ``draw``
is (the analyzer, asked over the broker by the gateway; the same code in-process for
``dlscope report`` on an embedded home)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from shared.config import Settings
from shared.eventstore import EvaluationView, EventStore, ExperimentView, StoredEvent
from shared.messages import (
    EvaluationFigures,
    ExperimentComparison,
    FiguresReply,
    LatencySummary,
    evaluation_stream,
)

__all__ = [
    "Draw",
    "EvaluationDocument",
    "EventLine",
    "ExperimentDocument",
    "ReportDocument",
    "Source",
    "comparison_notes",
    "event_line",
]

Draw = Callable[[list[uuid.UUID]], Awaitable[FiguresReply]]
_MS = 1e-6


@dataclass(frozen=True, slots=True)
class EventLine:
    """One stored event, told in a line: the payload itself can be megabytes (latencies)."""

    version: int
    type: str
    occurred_at: datetime
    recorded_at: datetime
    producer: str | None
    summary: str


@dataclass(frozen=True, slots=True)
class EvaluationDocument:
    view: EvaluationView
    trace_url: str | None  # None: no collector; trace_where says where it is
    figures: EvaluationFigures | None
    events: list[EventLine]
    trace_where: str = ""  # where to see the trace without a link (Settings.trace_where)

    @property
    def summary(self) -> LatencySummary | None:
        return self.view.result

    @property
    def request(self) -> Mapping[str, Any]:
        return self.view.request or {}

    @property
    def experiment_id(self) -> str | None:
        experiment = self.request.get("experiment_id")
        return None if experiment is None else str(experiment)

    @property
    def title(self) -> str:
        view = self.view
        return f"{view.model or '?'} on {view.framework or '?'} ({view.hardware or '?'})"


@dataclass(frozen=True, slots=True)
class ExperimentDocument:
    view: ExperimentView
    trace_url: str | None  # None: no collector; trace_where says where it is
    members: list[EvaluationView]
    figures: dict[uuid.UUID, EvaluationFigures]
    # Each member as an evaluation of its own (without its events), for a report's details.
    details: list[EvaluationDocument] = field(default_factory=list)
    trace_where: str = ""  # where to see the trace without a link (Settings.trace_where)

    @property
    def comparison(self) -> ExperimentComparison | None:
        return self.view.comparison

    @property
    def request(self) -> Mapping[str, Any]:
        return self.view.request or {}

    @property
    def title(self) -> str:
        hardware = self.request.get("hardware", "cpu")
        return f"{self.view.model or '?'} on {len(self.members)} frameworks ({hardware})"

    def label(self, member: EvaluationView) -> str:
        """How a member is named on charts: its framework, and its host where several."""
        hosts = {m.host for m in self.members}
        return member.framework or "?" if len(hosts) <= 1 else f"{member.framework} @ {member.host}"


@dataclass(frozen=True, slots=True)
class ReportDocument:
    experiments: list[ExperimentDocument]
    evaluations: list[EvaluationDocument]
    # What the report compares and what it will not, in words.
    notes: list[str]
    not_found: list[str]
    generated_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def title(self) -> str:
        parts = [e.title for e in self.experiments] + [e.title for e in self.evaluations]
        if len(parts) == 1:
            return f"dlscope report: {parts[0]}"
        return f"dlscope report: {len(parts)} results"

    @property
    def groups(self) -> list[list[EvaluationDocument]]:
        """The evaluations that can be compared with each other: completed, same model,
        scenario, batch size and hardware. Groups of one are shown, not compared."""
        grouped: dict[tuple[Any, ...], list[EvaluationDocument]] = {}
        for document in self.evaluations:
            grouped.setdefault(_comparable_key(document), []).append(document)
        return list(grouped.values())


def _comparable_key(document: EvaluationDocument) -> tuple[Any, ...]:
    summary = document.summary
    if summary is None:
        return ("unfinished", str(document.view.evaluation_id))
    return (
        document.view.model,
        document.view.hardware,
        summary.scenario.name,
        summary.batch_size,
    )


class Source:
    """Reads documents from ``store``; figures from ``draw``."""

    def __init__(self, store: EventStore, settings: Settings, draw: Draw) -> None:
        self._store = store
        self._settings = settings
        self._draw = draw

    async def evaluation(self, evaluation_id: uuid.UUID) -> EvaluationDocument | None:
        view = await self._store.get_evaluation(evaluation_id)
        if view is None:
            return None
        events = await self._store.stream_events(evaluation_stream(evaluation_id))
        figures = await self._figures([view])
        return EvaluationDocument(
            view=view,
            trace_url=self._settings.trace_url(view.trace_id),
            trace_where=self._settings.trace_where(view.trace_id),
            figures=figures.get(evaluation_id),
            events=[event_line(e) for e in events],
        )

    async def experiment(self, experiment_id: uuid.UUID) -> ExperimentDocument | None:
        view = await self._store.get_experiment(experiment_id)
        if view is None:
            return None
        planned = view.member_ids
        found = {v.evaluation_id: v for v in await self._store.get_evaluations(planned)}
        members = [found[key] for key in planned if key in found]
        figures = await self._figures(members)
        return ExperimentDocument(
            view=view,
            trace_url=self._settings.trace_url(view.trace_id),
            trace_where=self._settings.trace_where(view.trace_id),
            members=members,
            figures=figures,
            details=[
                EvaluationDocument(
                    view=member,
                    trace_url=self._settings.trace_url(member.trace_id),
                    trace_where=self._settings.trace_where(member.trace_id),
                    figures=figures.get(member.evaluation_id),
                    events=[],
                )
                for member in members
            ],
        )

    async def report(self, ids: Sequence[uuid.UUID]) -> ReportDocument:
        """A report of evaluations and experiments, by id (either kind, in any order)."""
        experiments, evaluations, not_found = [], [], []
        for key in dict.fromkeys(ids):
            experiment = await self.experiment(key)
            if experiment is not None:
                experiments.append(experiment)
                continue
            evaluation = await self.evaluation(key)
            if evaluation is not None:
                evaluations.append(evaluation)
            else:
                not_found.append(str(key))
        document = ReportDocument(experiments, evaluations, [], not_found)
        document.notes.extend(comparison_notes(document))
        return document

    async def _figures(self, views: Sequence[EvaluationView]) -> dict[uuid.UUID, EvaluationFigures]:
        # Only evaluations that got as far as a measurement have figures to draw.
        measured = [v.evaluation_id for v in views if v.status in ("completed", "failed")]
        if not measured:
            return {}
        reply = await self._draw(measured)
        return {f.evaluation_id: f for f in reply.figures}


def comparison_notes(document: ReportDocument) -> list[str]:
    """What the report compares, and what it will not, and why."""
    notes = []
    for experiment in document.experiments:
        if experiment.comparison is None:
            notes.append(
                f"Experiment {experiment.view.experiment_id} is {experiment.view.status}: "
                "no comparison yet; its members are listed as they stand."
            )
        else:
            notes.append(
                f"Experiment {experiment.view.experiment_id} compares {experiment.view.model} "
                f"on {len(experiment.members)} frameworks, on the same inputs: latency, "
                "accuracy and output parity side by side."
            )
    models = sorted({d.view.model or "?" for d in document.evaluations})
    if len(models) > 1:
        notes.append(
            f"The evaluations are of {len(models)} different models ({', '.join(models)}): "
            "each model's are compared only with each other; a difference between two models "
            "says nothing about the frameworks or the hardware."
        )
    for group in document.groups:
        first = group[0]
        summary = first.summary
        if summary is None:
            notes.append(
                f"Evaluation {first.view.evaluation_id} is {first.view.status}"
                + (f" ({first.view.error})" if first.view.error else "")
                + ": shown, not compared."
            )
        elif len(group) > 1:
            notes.append(
                f"Compared: {len(group)} evaluations of {first.view.model} "
                f"({summary.scenario.name}, batch size {summary.batch_size}, "
                f"{first.view.hardware})."
            )
    if len(document.groups) > 1 and len(models) == 1 and document.evaluations:
        notes.append(
            "Evaluations with different scenarios or batch sizes are shown apart, not "
            "compared: their latencies measure different things."
        )
    if document.not_found:
        missing = ", ".join(document.not_found)
        notes.append(f"Not found (neither an evaluation nor an experiment): {missing}.")
    return notes


def event_line(event: StoredEvent) -> EventLine:
    return EventLine(
        version=event.version,
        type=event.type,
        occurred_at=event.occurred_at,
        recorded_at=event.recorded_at,
        producer=event.producer,
        summary=_summary(event.type, event.payload),
    )


def _summary(kind: str, p: Mapping[str, Any]) -> str:
    if kind == "evaluation.requested":
        scenario = p.get("scenario") or {}
        return (
            f"{p.get('model')} {p.get('model_version', '*')} on {p.get('framework')} "
            f"({p.get('hardware', 'cpu')}), {scenario.get('name', 'single-stream')}"
            + (f", dataset {p['dataset']}" if p.get("dataset") else "")
        )
    if kind == "evaluation.scheduled":
        return (
            f"version {p.get('model_version')}; {len(p.get('candidates') or [])} agent(s) "
            f"could take it{', pinned to ' + str(p['agent_id']) if p.get('agent_id') else ''}"
        )
    if kind == "evaluation.started":
        return f"attempt {p.get('attempt', 1)} on {p.get('agent_id')} at host {p.get('host')}"
    if kind == "evaluation.measured":
        run = p.get("run") or {}
        queries = sum(len(ph.get("latencies_ns") or ()) for ph in run.get("phases") or ())
        load = float(p.get("load_ns") or 0) * _MS
        driver = "LoadGen" if p.get("loadgen") else f"{queries} timed queries"
        return f"{driver}; model loaded in {load:.1f} ms"
    if kind == "evaluation.completed":
        result = p.get("result") or {}
        verdict = (result.get("verdict") or {}).get("status", "")
        return (
            f"p50 {result.get('p50_ms', 0):.4g} ms, p90 {result.get('p90_ms', 0):.4g} ms, "
            f"{result.get('throughput_per_s', 0):,.0f} samples/s {verdict}"
        ).strip()
    if kind == "evaluation.failed":
        return f"{p.get('stage')}: {p.get('reason')}"
    if kind == "evaluation.profiled":
        passes = ", ".join(str(x.get("level")) for x in p.get("passes") or ())
        return f"traced at {p.get('trace_level')}; profiled passes: {passes or 'none'}"
    return ""
