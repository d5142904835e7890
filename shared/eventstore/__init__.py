"""The event store: every evaluation event, in order, and the read models derived from them.

Run ``await upgrade(url)`` once (it creates or migrates the tables), then open an
``EventStore.from_url(url)``: ``append`` records envelopes idempotently, and the read methods
answer from the log (``stream_events``, ``read_all``) or its projections (``get_evaluation``,
``list_evaluations``, ``list_agents``, ``list_artifacts``).
"""

from shared.eventstore.migrate import current_revision, head_revision, upgrade
from shared.eventstore.store import EventStore
from shared.eventstore.views import (
    AGENT_STATUSES,
    EVALUATION_STATUSES,
    AgentStatus,
    AgentView,
    ArtifactView,
    EvaluationStatus,
    EvaluationView,
    StoredEvent,
)

__all__ = [
    "AGENT_STATUSES",
    "EVALUATION_STATUSES",
    "AgentStatus",
    "AgentView",
    "ArtifactView",
    "EvaluationStatus",
    "EvaluationView",
    "EventStore",
    "StoredEvent",
    "current_revision",
    "head_revision",
    "upgrade",
]
