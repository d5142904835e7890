"""Reading stored events as their payload classes, for the projections.

A projection handles a few payload classes; an event of another type, or one that today's
contract refuses (``StoredEvent.read``), is about no row it keeps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from shared.eventstore.views import StoredEvent
from shared.messages import Payload

__all__ = ["read_as", "types_of"]

P = TypeVar("P", bound=Payload)


def types_of(*classes: type[P]) -> dict[str, type[P]]:
    """The payload classes by the type name their events carry."""
    return {cls.TYPE: cls for cls in classes}


def read_as(event: StoredEvent, classes: Mapping[str, type[P]]) -> P | None:
    """``event``'s payload, if its type names one of ``classes`` and its contract admits it."""
    cls = classes.get(event.type)
    if cls is None:
        return None
    payload = event.read()
    return payload if isinstance(payload, cls) else None
