"""The evaluations this scheduler follows from their scheduling to their outcome.

Each is watched by a deadline (``deadlines``): no outcome within DLSCOPE_EVALUATION_TIMEOUT_S
of its scheduling, or of its latest attempt's start, fails it ("timeout"). The outcome events
settle its job (``running``) and disarm the deadline; a new attempt's start re-arms it, and
tells ``losses`` the job was taken up. A scheduler that starts again reads the evaluations in
flight back from the event store and follows them again (``recovery``).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime

from services.scheduler.attempts import described
from services.scheduler.deadlines import Deadlines
from services.scheduler.losses import Losses
from services.scheduler.recovery import in_flight
from services.scheduler.running import RunningJobs
from shared.config import Settings
from shared.errors import ConfigurationError, StoreUnavailable
from shared.eventstore import EventStore
from shared.messages import (
    Envelope,
    EvaluationCompleted,
    EvaluationFailed,
    EvaluationRequested,
    EvaluationScheduled,
    EvaluationStarted,
    evaluation_stream,
    failure_caused_by,
)
from shared.messaging import Bus
from shared.messaging.pause import when_available

__all__ = ["Following"]

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Following:
    jobs: RunningJobs
    losses: Losses
    bus: Bus
    settings: Settings
    _: KW_ONLY
    producer: str
    _deadlines: Deadlines = field(default_factory=Deadlines, init=False)
    # Set once the evaluations in flight have been read back (``recover``).
    recovered: asyncio.Event = field(default_factory=asyncio.Event, init=False)

    @property
    def watched(self) -> set[uuid.UUID]:
        """The evaluations scheduled here and still waiting for their outcome."""
        return self._deadlines.watched

    def close(self) -> None:
        self._deadlines.close()

    async def scheduled(self, event: EvaluationScheduled, envelope: Envelope) -> None:
        self.jobs.scheduled(event)

    async def started(self, event: EvaluationStarted, envelope: Envelope) -> None:
        if self.jobs.started(event, envelope.event_id) is not None:
            self.losses.taken_up(event.evaluation_id)
            watched = self._deadlines.request(envelope.correlation_id)
            if watched is not None:  # each attempt has the whole timeout
                self.watch(watched, attempt=event.attempt)

    async def settled(
        self, event: EvaluationCompleted | EvaluationFailed, envelope: Envelope
    ) -> None:
        self.jobs.settled(event.evaluation_id, described(event))
        self.losses.taken_up(event.evaluation_id)
        self._deadlines.disarm(envelope.correlation_id)

    def watch(self, request: Envelope, *, attempt: int = 0, since: datetime | None = None) -> None:
        """Fail the evaluation if it has no outcome in time (its worker may have died): within
        the timeout of its scheduling, or of its latest attempt's start (``since``, when
        that was before now)."""
        timeout = self.settings.evaluation_timeout_s
        elapsed = 0.0 if since is None else (datetime.now(UTC) - since).total_seconds()
        what = "being scheduled" if attempt == 0 else f"attempt {attempt} starting"

        async def expire() -> None:
            failed = failure_caused_by(
                request,
                EvaluationRequested,
                stage="timeout",
                reason=f"no outcome within {timeout:g} s of {what}; the worker may have "
                "stopped (DLSCOPE_EVALUATION_TIMEOUT_S)",
                producer=self.producer,
            )
            if failed is not None:
                await self.bus.publish(failed)
                # Known as over at once: a worker that wakes now is told so.
                outcome = failed.open(EvaluationFailed)
                self.jobs.settled(outcome.evaluation_id, described(outcome))

        self._deadlines.arm(request, timeout - elapsed, expire)

    async def recover(self) -> None:
        """Follow again every evaluation in flight, as the event store has it; a store that
        is unavailable is waited out (the live events are followed meanwhile)."""
        count = await when_available(
            self._recover_once,
            unavailable=(StoreUnavailable, ConfigurationError),  # down, or not migrated yet
            what=f"{self.producer}: reading back the evaluations in flight",
        )
        if count:
            log.info("following again %d evaluations in flight after a restart", count)
        self.recovered.set()

    async def _recover_once(self) -> int:
        store = EventStore.from_url(self.settings.resolved_database_url)
        try:
            return await self._recover_from(store)
        finally:
            await store.close()

    async def _recover_from(self, store: EventStore) -> int:
        ids: list[uuid.UUID] = []
        page = 500
        for status in ("scheduled", "running"):
            offset = 0
            while views := await store.list_evaluations(status=status, limit=page, offset=offset):
                ids.extend(view.evaluation_id for view in views)
                offset += page
        count = 0
        for evaluation_id in dict.fromkeys(ids):
            found = in_flight(await store.stream_events(evaluation_stream(evaluation_id)))
            if found is None or self.jobs.is_over(found.evaluation_id):
                continue
            self.jobs.scheduled(found.scheduled)
            if found.started is not None and found.started_by is not None:
                self.jobs.started(found.started, found.started_by)
            if found.request.correlation_id not in self._deadlines:
                attempt = 0 if found.started is None else found.started.attempt
                self.watch(found.request, attempt=attempt, since=found.since)
                count += 1
        return count
