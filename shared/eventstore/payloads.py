"""Reading event payloads leniently, for the projections.

A field that is absent or of the wrong type reads as unknown (None) rather than failing the
append that carries it: the log is the truth, and the read models make the best of it.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

__all__ = ["StoredPayload", "number", "text", "uuid_of"]

# A payload as the store keeps it, read leniently here; the typed payloads of the wire are
# ``shared.messages.Payload``'s subclasses.
StoredPayload = Mapping[str, Any]


def text(payload: StoredPayload, name: str) -> str | None:
    value = payload.get(name)
    return value if isinstance(value, str) and value else None


def number(payload: StoredPayload, name: str) -> float | None:
    value = payload.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def uuid_of(value: object) -> uuid.UUID | None:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value)) if value is not None else None
    except ValueError:
        return None
