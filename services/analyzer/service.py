"""The analyzer: turns raw latencies into statistics and completes the evaluation; compares
the members of an experiment once they all have an outcome, or when its deadline passes.

measured -> completed (statistics, accuracy and the output fingerprint carried along), unless
            the evaluation already has its outcome (its row in the event store says so): a
            worker frozen past its failure that published anyway does not complete it
experiment scheduled + every member completed or failed -> experiment compared
experiment scheduled + deadline passed                  -> experiment compared (incomplete)

Experiments are followed in memory, from a durable queue: one analyzer process assembles
them. What it had taken from that queue before a restart is in the event store: on start,
before it follows the queue again, it reads every experiment still in flight (scheduled, not
yet compared) back from the log, folds its plan and its members' outcomes again and re-arms
its deadline; the queue then brings what came meanwhile (an event seen both ways folds
once). The comparison's event id is derived from the experiment id, so whichever event
triggers it (the last outcome, a redelivery, the deadline, a restart) it is stored once.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import UTC, datetime

from services.analyzer.calls import AnalyzerCalls
from services.analyzer.experiments import Experiment, compare, evolve
from services.analyzer.summary import summarize
from shared.eventstore import EventStore, ExperimentView
from shared.messages import (
    Envelope,
    EvaluationCompleted,
    EvaluationFailed,
    EvaluationMeasured,
    ExperimentCompared,
    ExperimentScheduled,
    evaluation_stream,
    experiment_stream,
)
from shared.messaging import Routes
from shared.runtime import Runtime

__all__ = ["AnalyzerService"]

log = logging.getLogger(__name__)

ExperimentEvent = ExperimentScheduled | EvaluationCompleted | EvaluationFailed


class AnalyzerService:
    name = "analyzer"

    def __init__(self, runtime: Runtime) -> None:
        self._settings = runtime.settings
        self._bus = runtime.bus(self.name)
        self._store: EventStore | None = None
        self._experiments: dict[uuid.UUID, Experiment] = {}
        self._deadlines: dict[uuid.UUID, asyncio.Task[None]] = {}

    async def start(self) -> None:
        self._store = EventStore.from_url(self._settings.resolved_database_url)
        await self._bus.start()
        events = self._bus.topology.events
        await self._bus.handle(
            self._bus.topology.queue(self.name),
            Routes(events).on(EvaluationMeasured, self._analyze),
        )
        await self._recover(self._store)
        await self._bus.handle(
            self._bus.topology.queue(self.name, "experiments"),
            Routes(events)
            .on(ExperimentScheduled, self._follow_experiment)
            .on(EvaluationCompleted, self._follow_experiment)
            .on(EvaluationFailed, self._follow_experiment),
        )
        # Figures and histories for the gateway's pages and reports, read from the store.
        await self._bus.handle(
            self._bus.topology.queue(self.name, "calls"),
            AnalyzerCalls(self._store, self.name).routes(self._bus.topology.jobs),
        )

    async def stop(self) -> None:
        for deadline in self._deadlines.values():
            deadline.cancel()
        await self._bus.stop()
        if self._store is not None:
            await self._store.close()

    def experiment(self, experiment_id: uuid.UUID) -> Experiment | None:
        """The experiment as followed here, if it is."""
        return self._experiments.get(experiment_id)

    @property
    def following(self) -> set[uuid.UUID]:
        """The experiments followed here and not compared yet."""
        return {key for key, state in self._experiments.items() if not state.compared}

    async def _recover(self, store: EventStore) -> None:
        """Follow again every experiment in flight, as the event store has it."""
        page, offset = 200, 0
        while views := await store.list_experiments(status="scheduled", limit=page, offset=offset):
            for view in views:
                await self._recover_experiment(store, view)
            offset += page

    async def _recover_experiment(self, store: EventStore, view: ExperimentView) -> None:
        key = view.experiment_id
        members = view.member_ids
        streams = [experiment_stream(key), *(evaluation_stream(m) for m in members)]
        state, scheduled = self._experiments.get(key), None
        for stored in await store.read_streams(streams):
            event = stored.read()  # None: refused by today's contract, as the projections take it
            if isinstance(event, ExperimentScheduled) and event.experiment_id == key:
                scheduled = stored.envelope()
            elif not isinstance(event, EvaluationCompleted | EvaluationFailed):
                continue
            elif event.experiment_id is None:  # an outcome that does not say: the plan does
                event = event.model_copy(update={"experiment_id": key})
            elif event.experiment_id != key:
                continue
            state = evolve(state, event)
        if state is None or scheduled is None:
            return
        self._experiments[key] = state
        if state.compared:
            return
        if state.settled:
            await self._compare(state, scheduled)
        elif key not in self._deadlines and state.plan is not None:
            elapsed = (datetime.now(UTC) - scheduled.occurred_at).total_seconds()
            self._watch(state.plan, scheduled, after=state.plan.deadline_s - elapsed)
        log.info("experiment %s followed again after a restart", key)

    async def _analyze(self, measured: EvaluationMeasured, envelope: Envelope) -> None:
        assert self._store is not None, "started"
        # An outcome is final: a second one would only be kept in the log, unseen, and
        # contradict the first there. (A row not there yet is an evaluation in flight.)
        row = await self._store.get_evaluation(measured.evaluation_id)
        if row is not None and row.status in ("completed", "failed"):
            log.warning(
                "evaluation %s has already %s: attempt %d's measurement by %s is not analysed",
                measured.evaluation_id,
                row.status,
                measured.attempt,
                measured.agent_id,
            )
            return
        result = summarize(measured).model_copy(update={"fingerprint": measured.fingerprint})
        completed = EvaluationCompleted(
            evaluation_id=measured.evaluation_id,
            result=result,
            experiment_id=measured.experiment_id,
        )
        await self._bus.publish(envelope.caused(completed, producer=self.name))

    async def _follow_experiment(self, event: ExperimentEvent, envelope: Envelope) -> None:
        if event.experiment_id is None:  # an evaluation of its own
            return
        state = evolve(self._experiments.get(event.experiment_id), event)
        self._experiments[event.experiment_id] = state
        if state.compared:
            return
        if state.settled:
            await self._compare(state, envelope)
        elif isinstance(event, ExperimentScheduled) and event.experiment_id not in self._deadlines:
            self._watch(event, envelope, after=event.deadline_s)

    def _watch(self, plan: ExperimentScheduled, scheduled: Envelope, *, after: float) -> None:
        async def expire() -> None:
            await asyncio.sleep(max(after, 0.0))
            self._deadlines.pop(plan.experiment_id, None)
            state = self._experiments.get(plan.experiment_id)
            if state is None or state.compared:
                return
            try:
                await self._compare(state, scheduled)
            except Exception:  # no message to retry: the broker may be down
                log.exception(
                    "experiment %s: comparison at the deadline not sent", plan.experiment_id
                )

        self._deadlines[plan.experiment_id] = asyncio.create_task(expire())

    async def _compare(self, state: Experiment, cause: Envelope) -> None:
        compared = ExperimentCompared(experiment_id=state.experiment_id, comparison=compare(state))
        await self._bus.publish(
            Envelope.wrap(
                compared,
                stream_id=experiment_stream(state.experiment_id),
                correlation_id=state.experiment_id,
                causation_id=cause.event_id,
                producer=self.name,
                event_id=uuid.uuid5(state.experiment_id, ExperimentCompared.TYPE),
            )
        )
        # Marked only once sent, so a failed send is tried again with the redelivery. Only
        # the mark is kept: late or redelivered outcomes find the experiment done.
        self._experiments[state.experiment_id] = Experiment(state.experiment_id, compared=True)
        deadline = self._deadlines.pop(state.experiment_id, None)
        if deadline is not None:
            deadline.cancel()
