"""The workers' progress notifications, for the gateway's event streams: the latest step of
each evaluation running now, as the worker told it (see ``shared.messages.progress``).

Nothing is stored: a gateway that was not listening when a step began shows it from the
next one, and the stored events say the rest."""

from __future__ import annotations

import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from shared.messages import PROGRESS_KEY, Envelope, EvaluationProgress
from shared.messaging import Binding, Bus

__all__ = ["ProgressFeed", "Told"]

# Evaluations whose latest step is kept: far more than run at once on any fleet.
KEPT = 4096


@dataclass(frozen=True)
class Told:
    number: int  # grows with each notification this gateway hears, for "is this new?"
    payload: dict[str, Any]


class ProgressFeed:
    def __init__(self) -> None:
        self._latest: OrderedDict[uuid.UUID, Told] = OrderedDict()
        self._heard = 0

    async def listen(self, bus: Bus) -> None:
        """Hear the notifications from now on (an exclusive queue: each gateway hears all)."""
        await bus.subscribe(
            bus.topology.queue("gateway", "progress", uuid.uuid4().hex),
            [Binding(bus.topology.jobs, PROGRESS_KEY)],
            self._hear,
            durable=False,
        )

    def latest(self, evaluation_id: uuid.UUID) -> Told | None:
        return self._latest.get(evaluation_id)

    async def _hear(self, envelope: Envelope) -> None:
        progress = envelope.open(EvaluationProgress)
        self._heard += 1
        self._latest[progress.evaluation_id] = Told(self._heard, envelope.payload)
        self._latest.move_to_end(progress.evaluation_id)
        while len(self._latest) > KEPT:
            self._latest.popitem(last=False)
