"""Progress notifications: where a running evaluation is, for whoever is watching.

Not events. A worker publishes one as its measurement moves from step to step (fetching,
loading, warming up, timed queries, the accuracy pass, tracing) on the jobs exchange under
``PROGRESS_KEY``, not persistently, and nothing records them: what each step took is in the
measurement itself (load time, warm-up report, timed duration), and a watcher that was not
listening has lost nothing it cannot read from the event store. Whoever listens (the
command line, the gateway's event streams) binds ``PROGRESS_KEY`` on the jobs exchange.
"""

from __future__ import annotations

import uuid

from pydantic import Field

from shared.inputs import Count
from shared.messages.envelope import Payload

__all__ = ["PROGRESS_KEY", "EvaluationProgress"]

PROGRESS_KEY = "progress.evaluation"


class EvaluationProgress(Payload):
    TYPE = "evaluation.progress"

    evaluation_id: uuid.UUID
    agent_id: str
    phase: str = Field(description='"loading the model", "running the scenario", …')
    part: str = Field(default="", description='within the phase: "warming up", "timed queries"')
    expected_s: float | None = Field(
        default=None, ge=0, description="about how long the part should take; null: unknown"
    )
    limit_s: float | None = Field(
        default=None, ge=0, description="the part stops by then, whatever happens"
    )
    experiment_id: uuid.UUID | None = None
    attempt: Count = 1
