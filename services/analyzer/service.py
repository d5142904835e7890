"""The analyzer: turns raw latencies into statistics and completes the evaluation."""

from __future__ import annotations

from shared.measurement import summarize
from shared.messages import Envelope, EvaluationCompleted, EvaluationMeasured
from shared.messaging import Binding
from shared.runtime import Runtime

__all__ = ["AnalyzerService"]


class AnalyzerService:
    name = "analyzer"

    def __init__(self, runtime: Runtime) -> None:
        self._bus = runtime.bus(self.name)

    async def start(self) -> None:
        await self._bus.start()
        await self._bus.subscribe(
            self._bus.topology.queue(self.name),
            [Binding(self._bus.topology.events, EvaluationMeasured.TYPE)],
            self._analyze,
        )

    async def stop(self) -> None:
        await self._bus.stop()

    async def _analyze(self, envelope: Envelope) -> None:
        measured = envelope.open(EvaluationMeasured)
        completed = EvaluationCompleted(
            evaluation_id=measured.evaluation_id, result=summarize(measured)
        )
        await self._bus.publish(envelope.caused(completed, producer=self.name))
