"""The analyzer: turns raw latencies into statistics and completes the evaluation; compares
the members of an experiment once they all have an outcome, or when its deadline passes.

measured -> completed (statistics, accuracy and the output fingerprint carried along)
experiment scheduled + every member completed or failed -> experiment compared
experiment scheduled + deadline passed                  -> experiment compared (incomplete)

Experiments are followed in memory, from a durable queue: one analyzer process assembles
them. The comparison's event id is derived from the experiment id, so whichever event
triggers it (the last outcome, a redelivery, the deadline) it is stored once.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from services.analyzer.experiments import Experiment, compare, evolve
from services.analyzer.summary import summarize
from shared.messages import (
    Envelope,
    EvaluationCompleted,
    EvaluationFailed,
    EvaluationMeasured,
    ExperimentCompared,
    ExperimentScheduled,
    experiment_stream,
)
from shared.messaging import Binding
from shared.runtime import Runtime

__all__ = ["AnalyzerService"]

log = logging.getLogger(__name__)


class AnalyzerService:
    name = "analyzer"

    def __init__(self, runtime: Runtime) -> None:
        self._bus = runtime.bus(self.name)
        self._experiments: dict[uuid.UUID, Experiment] = {}
        self._deadlines: dict[uuid.UUID, asyncio.Task[None]] = {}

    async def start(self) -> None:
        await self._bus.start()
        events = self._bus.topology.events
        await self._bus.subscribe(
            self._bus.topology.queue(self.name),
            [Binding(events, EvaluationMeasured.TYPE)],
            self._analyze,
        )
        await self._bus.subscribe(
            self._bus.topology.queue(self.name, "experiments"),
            [
                Binding(events, ExperimentScheduled.TYPE),
                Binding(events, EvaluationCompleted.TYPE),
                Binding(events, EvaluationFailed.TYPE),
            ],
            self._follow_experiment,
        )

    async def stop(self) -> None:
        for deadline in self._deadlines.values():
            deadline.cancel()
        await self._bus.stop()

    async def _analyze(self, envelope: Envelope) -> None:
        measured = envelope.open(EvaluationMeasured)
        result = summarize(measured).model_copy(update={"fingerprint": measured.fingerprint})
        completed = EvaluationCompleted(
            evaluation_id=measured.evaluation_id,
            result=result,
            experiment_id=measured.experiment_id,
        )
        await self._bus.publish(envelope.caused(completed, producer=self.name))

    async def _follow_experiment(self, envelope: Envelope) -> None:
        event = envelope.typed()
        if not isinstance(event, ExperimentScheduled | EvaluationCompleted | EvaluationFailed):
            return
        if event.experiment_id is None:  # an evaluation of its own
            return
        state = evolve(self._experiments.get(event.experiment_id), event)
        self._experiments[event.experiment_id] = state
        if state.compared:
            return
        if state.settled:
            await self._compare(state, envelope)
        elif isinstance(event, ExperimentScheduled) and event.experiment_id not in self._deadlines:
            self._watch(event, envelope)

    def _watch(self, plan: ExperimentScheduled, scheduled: Envelope) -> None:
        async def expire() -> None:
            await asyncio.sleep(plan.deadline_s)
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
