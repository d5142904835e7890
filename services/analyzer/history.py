"""One model x framework x hardware over time: its completed evaluations, oldest first, each
marked with what changed since the one before (the scenario measured, the model's version,
the environment), so a step in the latency can be told apart from an upgrade, another CPU or
another host."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from shared.eventstore import EvaluationView
from shared.messages import EvaluationHistory, HistoryPoint, LatencySummary

__all__ = ["environment_changes", "history"]

_MS = 1e-6

# What a change of is worth a marker: what the latency depends on beyond the code measured.
_WATCHED: tuple[tuple[str, str], ...] = (
    ("framework_version", "framework"),
    ("cpu_model", "CPU"),
    ("cpu_threads", "CPU threads"),
    ("host", "host"),
    ("os", "OS"),
    ("python", "Python"),
    ("dlscope_version", "dlscope"),
    ("numpy_version", "numpy"),
)


def history(
    model: str, framework: str, hardware: str, views: Sequence[EvaluationView]
) -> EvaluationHistory:
    """The history of completed ``views`` (in any order) of one model x framework x hardware."""
    points: list[HistoryPoint] = []
    previous: tuple[str, str | None, Mapping[str, Any]] | None = None
    for view in sorted(views, key=lambda v: (v.requested_at, str(v.evaluation_id))):
        summary = view.result
        if summary is None:
            continue
        environment = view.environment or {}
        measured = f"{summary.scenario.name}, batch size {summary.batch_size}"
        changed = []
        if previous is not None:
            if previous[0] != measured:
                changed.append(f"scenario {previous[0]} → {measured}")
            changed += environment_changes(previous[1:], (view.model_version, environment))
        previous = (measured, view.model_version, environment)
        points.append(_point(view, summary, environment, changed))
    return EvaluationHistory(model=model, framework=framework, hardware=hardware, points=points)


def environment_changes(
    before: tuple[str | None, Mapping[str, Any]], after: tuple[str | None, Mapping[str, Any]]
) -> list[str]:
    """What differs, in words: ``framework 2.12.0 → 2.13.0``, ``model 1.0.0 → 1.1.0``."""
    changes = []
    if before[0] != after[0]:
        changes.append(f"model {before[0]} → {after[0]}")
    for key, label in _WATCHED:
        old, new = before[1].get(key), after[1].get(key)
        if old != new and not (old is None or new is None):
            changes.append(f"{label} {old} → {new}")
    return changes


def _point(
    view: EvaluationView,
    summary: LatencySummary,
    environment: Mapping[str, Any],
    changed: list[str],
) -> HistoryPoint:
    low = high = None
    headline_ms = summary.p90_ms
    if summary.statistics:
        headline = summary.statistics[0].headline
        headline_ms = headline.value_ns * _MS
        if headline.interval is not None:
            low = headline.interval.low * _MS
            high = None if headline.interval.high is None else headline.interval.high * _MS
    return HistoryPoint(
        evaluation_id=view.evaluation_id,
        at=view.requested_at,
        model_version=view.model_version,
        framework_version=_text(environment.get("framework_version")),
        host=view.host,
        cpu=_text(environment.get("cpu_model")),
        headline=summary.headline,
        headline_ms=headline_ms,
        headline_low_ms=low,
        headline_high_ms=high,
        p50_ms=summary.p50_ms,
        p99_ms=summary.p99_ms,
        throughput_per_s=summary.throughput_per_s,
        verdict=None if summary.verdict is None else summary.verdict.status,
        batch_size=summary.batch_size,
        scenario=summary.scenario.name,
        changed=changed,
    )


def _text(value: object) -> str | None:
    return None if value is None else str(value)
