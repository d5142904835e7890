"""Where an evaluation stands in a sweep: ``dlscope sweep`` runs a language model at several
loads, one ordinary evaluation each, and labels each request with the sweep it belongs to,
what the sweep varies and the load this one ran at. The label is all a sweep is in the
store: its page gathers the evaluations that carry its id (``EventStore.list_sweep``), so a
sweep needs no event of its own and its members' history is theirs alone."""

from __future__ import annotations

import uuid
from typing import Literal

from pydantic import BaseModel, Field

from shared.inputs import REQUESTED

__all__ = ["SWEPT", "SweepPoint", "Swept"]

Swept = Literal["streams", "rate", "batch"]
SWEPT: tuple[str, ...] = ("streams", "rate", "batch")


class SweepPoint(BaseModel):
    """One load of a sweep: concurrent streams, a Poisson rate (req/s) or a batch size."""

    model_config = REQUESTED

    sweep_id: uuid.UUID
    over: Swept = Field(description="what the sweep varies: streams, rate or batch")
    level: float = Field(gt=0, le=10_000_000, description="this evaluation's load")
    search: bool = Field(
        default=False, description="a goodput search chose this load (rather than --levels)"
    )
