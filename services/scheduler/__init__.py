"""Scheduler: evaluation lifecycle decisions and the agent directory."""

from services.scheduler.agents import AgentDirectory, AgentEntry
from services.scheduler.service import SchedulerService

__all__ = ["AgentDirectory", "AgentEntry", "SchedulerService"]
