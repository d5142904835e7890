"""What the gateway asks the analyzer over the broker: the figures it draws from the stored
raw measurements, and the history of one model x framework x hardware. The HTTP routes
(``analysis_api``) and the web pages (``ui``) both ask through here."""

from __future__ import annotations

import uuid

from services.gateway.context import GatewayContext, ask_analyzer
from shared.errors import StoreUnavailable
from shared.messages import (
    EvaluationHistory,
    FiguresReply,
    FiguresRequest,
    HistoryReply,
    HistoryRequest,
)

__all__ = ["draw", "history_of"]


async def draw(context: GatewayContext, evaluation_ids: list[uuid.UUID]) -> FiguresReply:
    """The analyzer's figures of ``evaluation_ids``; a store it cannot read is a 503."""
    reply = await ask_analyzer(
        context, "figures", FiguresRequest(evaluation_ids=evaluation_ids), FiguresReply
    )
    if reply.error is not None:
        raise StoreUnavailable(reply.error)
    return reply


async def history_of(
    context: GatewayContext, model: str, framework: str, hardware: str, limit: int = 200
) -> EvaluationHistory:
    reply = await ask_analyzer(
        context,
        "history",
        HistoryRequest(model=model, framework=framework, hardware=hardware, limit=limit),
        HistoryReply,
    )
    if reply.error is not None or reply.history is None:
        raise StoreUnavailable(reply.error or "the analyzer sent no history")
    return reply.history
