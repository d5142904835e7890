"""Workers: run evaluations on one framework and kind of hardware."""

from services.workers.service import WorkerService, default_agent_id

__all__ = ["WorkerService", "default_agent_id"]
