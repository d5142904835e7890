"""The analyzer's request/reply calls (``rpc.analyzer.figures``, ``rpc.analyzer.history``):
figures and histories for the gateway's pages and reports, computed from the event store.

Reading a store that is away is answered with the reason rather than left unanswered: the
caller (an HTTP request) should hear at once that it may try again, not wait for a timeout.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from services.analyzer.figures import figures
from services.analyzer.history import history
from shared.errors import StoreUnavailable
from shared.eventstore import EventStore, StoredEvent
from shared.messages import (
    Envelope,
    EvaluationFigures,
    EvaluationMeasured,
    EvaluationProfiled,
    FiguresReply,
    FiguresRequest,
    HistoryReply,
    HistoryRequest,
    evaluation_stream,
    rpc_key,
)
from shared.messaging import Routes

__all__ = ["AnalyzerCalls", "measured_figures"]


class AnalyzerCalls:
    def __init__(self, store: EventStore, producer: str) -> None:
        self._store = store
        self._producer = producer

    def routes(self, exchange: str) -> Routes:
        """The calls answered here, each under its own key on ``exchange``."""
        return (
            Routes(exchange)
            .on(FiguresRequest, self._figures, key=rpc_key(self._producer, "figures"))
            .on(HistoryRequest, self._history, key=rpc_key(self._producer, "history"))
        )

    async def _figures(self, call: FiguresRequest, request: Envelope) -> Envelope:
        try:
            reply = await self.figures(call.evaluation_ids)
        except StoreUnavailable as exc:
            reply = FiguresReply(error=str(exc))
        return request.caused(reply, producer=self._producer)

    async def _history(self, call: HistoryRequest, request: Envelope) -> Envelope:
        try:
            views = await self._store.list_evaluations(
                model=call.model,
                framework=call.framework,
                hardware=call.hardware,
                status="completed",
                limit=call.limit,
            )
            reply = HistoryReply(history=history(call.model, call.framework, call.hardware, views))
        except StoreUnavailable as exc:
            reply = HistoryReply(error=str(exc))
        return request.caused(reply, producer=self._producer)

    async def figures(self, evaluation_ids: list[uuid.UUID]) -> FiguresReply:
        drawn, unmeasured = [], []
        for evaluation_id in evaluation_ids:
            found = await measured_figures(self._store, evaluation_id)
            if found is None:
                unmeasured.append(evaluation_id)
            else:
                drawn.append(found)
        return FiguresReply(figures=drawn, unmeasured=unmeasured)


async def measured_figures(store: EventStore, evaluation_id: uuid.UUID) -> EvaluationFigures | None:
    """The figures of the latest measurement stored for ``evaluation_id``, or None."""
    events = await store.stream_events(evaluation_stream(evaluation_id))
    measured = _latest(events, EvaluationMeasured.TYPE)
    if measured is None:
        return None
    profile = _latest(events, EvaluationProfiled.TYPE)

    def draw() -> EvaluationFigures:
        return figures(
            EvaluationMeasured.model_validate(measured),
            None if profile is None else EvaluationProfiled.model_validate(profile),
        )

    # A run of 100 000 queries takes tens of milliseconds to validate and draw: off the loop
    # that also analyses measurements and follows experiments.
    return await asyncio.to_thread(draw)


def _latest(events: list[StoredEvent], type_name: str) -> dict[str, Any] | None:
    """The payload of the latest attempt's event of that type."""
    return next((e.payload for e in reversed(events) if e.type == type_name), None)
