"""Immutable values: the frozen pydantic models that results, statistics and reports are
made of."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Frozen"]


class Frozen(BaseModel):
    """A value: frozen (hashable, never changed after it is made), and refusing fields it does
    not declare, so a misspelt field in a stored or sent result is an error, not lost."""

    model_config = ConfigDict(frozen=True, extra="forbid")
