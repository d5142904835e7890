"""Workers: run evaluations on one framework and kind of hardware."""

from services.workers.agent import default_agent_id
from services.workers.service import WorkerService

__all__ = ["WorkerService", "default_agent_id"]
