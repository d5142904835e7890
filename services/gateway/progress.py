"""The workers' progress notifications, for the gateway's event streams: the steps of each
evaluation running now, in the order this gateway heard them (see
``shared.messages.progress``).

Nothing is stored: a gateway that was not listening when a step began shows it from the
next one, and the stored events say the rest. Every step is kept, not only the latest, so a
stream that reads the store late (``streaming.follow`` places the steps between the stored
``started`` and ``measured``) still shows each one."""

from __future__ import annotations

import uuid
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any

from shared.messages import PROGRESS_KEY, Envelope, EvaluationProgress
from shared.messaging import Bus, Routes

__all__ = ["ProgressFeed", "Told"]

# Evaluations whose steps are kept (the latest heard from): far more than run at once on
# any fleet. A step is a few hundred bytes: a few MB in all with about ten steps each.
KEPT = 1024
# Steps kept per evaluation: a run tells about ten (a batch sweep a few per batch size);
# past this the oldest go, which only a stream that fell that far behind would miss.
STEPS_KEPT = 64


@dataclass(frozen=True)
class Told:
    number: int  # grows with each notification this gateway hears, for "is this new?"
    payload: dict[str, Any]


class ProgressFeed:
    def __init__(self) -> None:
        self._told: OrderedDict[uuid.UUID, deque[Told]] = OrderedDict()
        self._heard = 0

    async def listen(self, bus: Bus) -> None:
        """Hear the notifications from now on (an exclusive queue: each gateway hears all)."""
        await bus.handle(
            bus.topology.queue("gateway", "progress", uuid.uuid4().hex),
            Routes(bus.topology.jobs).on(EvaluationProgress, self._hear, key=PROGRESS_KEY),
            durable=False,
        )

    def since(self, evaluation_id: uuid.UUID, number: int = 0) -> list[Told]:
        """The steps of ``evaluation_id`` heard after the one numbered ``number``, in order."""
        return [told for told in self._told.get(evaluation_id, ()) if told.number > number]

    def latest(self, evaluation_id: uuid.UUID) -> Told | None:
        steps = self._told.get(evaluation_id)
        return steps[-1] if steps else None

    async def _hear(self, progress: EvaluationProgress, envelope: Envelope) -> None:
        self._heard += 1
        steps = self._told.setdefault(progress.evaluation_id, deque(maxlen=STEPS_KEPT))
        steps.append(Told(self._heard, envelope.payload))
        self._told.move_to_end(progress.evaluation_id)
        while len(self._told) > KEPT:
            self._told.popitem(last=False)
