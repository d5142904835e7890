"""The event store: every evaluation event, in order, and the read models derived from them.

Run ``await upgrade(url)`` once (it creates or migrates the tables), then open an
``EventStore.from_url(url)``: ``append`` records envelopes idempotently, and the read methods
answer from the log (``stream_events``, ``read_streams``, ``read_all``) or its projections
(``get_evaluation``, ``list_evaluations``, ``list_agents``, ``list_artifacts``,
``get_experiment``, ``list_experiments``).
"""

from shared.eventstore.entries import LogEntry, log_entry
from shared.eventstore.migrate import current_revision, head_revision, upgrade
from shared.eventstore.store import EventStore
from shared.eventstore.views import (
    AGENT_STATUSES,
    EVALUATION_STATUSES,
    EXPERIMENT_STATUSES,
    AgentStatus,
    AgentView,
    ArtifactView,
    EvaluationStatus,
    EvaluationView,
    ExperimentStatus,
    ExperimentView,
    StoredEvent,
)

__all__ = [
    "AGENT_STATUSES",
    "EVALUATION_STATUSES",
    "EXPERIMENT_STATUSES",
    "AgentStatus",
    "AgentView",
    "ArtifactView",
    "EvaluationStatus",
    "EvaluationView",
    "EventStore",
    "ExperimentStatus",
    "ExperimentView",
    "LogEntry",
    "StoredEvent",
    "current_revision",
    "head_revision",
    "log_entry",
    "upgrade",
]
