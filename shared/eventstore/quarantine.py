"""Which stored events the wire contracts would not admit today, and why.

The recorder admits an event only if its type is one ``shared.messages`` knows and its
payload validates against the class registered for that type (``Envelope.typed``); anything
else is dead-lettered. Events stored before that rule, or before a contract was tightened,
may not pass it. ``find_inadmissible`` lists them; ``EventStore.quarantine`` moves them out
of the log into ``quarantined_events`` and derives the projections again without them
(``dlscope db check [--quarantine]``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from pydantic import ValidationError

from shared.errors import InvalidMessage
from shared.eventstore.store import EventStore
from shared.eventstore.views import StoredEvent

__all__ = [
    "Inadmissible",
    "admission_problem",
    "by_type",
    "find_inadmissible",
    "quarantine_inadmissible",
]

_CHUNK = 1000


@dataclass(frozen=True, slots=True)
class Inadmissible:
    """A stored event the recorder would dead-letter today, with the reason it would give."""

    event: StoredEvent
    reason: str


def admission_problem(event: StoredEvent) -> str | None:
    """Why the recorder would refuse ``event`` today, or None if it would store it."""
    try:
        event.envelope().typed()
    except InvalidMessage as exc:
        return str(exc)
    except ValidationError as exc:  # the envelope itself, e.g. a payload that is not an object
        return f"invalid envelope: {exc.error_count()} problem(s), first: {exc.errors()[0]['msg']}"
    return None


async def find_inadmissible(store: EventStore) -> list[Inadmissible]:
    """Every event in the log the contracts would not admit, in log order."""
    found: list[Inadmissible] = []
    after = 0
    while events := await store.read_all(after=after, limit=_CHUNK):
        for event in events:
            reason = admission_problem(event)
            if reason is not None:
                found.append(Inadmissible(event, reason))
        after = events[-1].position
    return found


async def quarantine_inadmissible(store: EventStore, found: list[Inadmissible]) -> int:
    """Move ``found`` into quarantine (projections rebuilt without them); the number moved."""
    return await store.quarantine({item.event.position: item.reason for item in found})


def by_type(found: list[Inadmissible]) -> Counter[str]:
    """How many inadmissible events of each type."""
    return Counter(item.event.type for item in found)
