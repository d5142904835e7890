"""Scheduler: evaluation lifecycle decisions and the agent directory."""

from services.scheduler.agents import Agent, AgentDirectory
from services.scheduler.service import SchedulerService

__all__ = ["Agent", "AgentDirectory", "SchedulerService"]
