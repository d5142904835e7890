"""The scheduler's directory of agents, folded from their announcements and heartbeats.

Times are passed in (a monotonic clock reading), so the directory is plain data and logic.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from shared.manifests import matches
from shared.messages import AgentHeartbeat, AgentOffline, AgentOnline, EvaluationRequested

__all__ = ["Agent", "AgentDirectory"]


@dataclass(frozen=True)
class Agent:
    agent_id: str
    host: str
    framework: str
    framework_version: str
    hardware: str
    heartbeat_interval_s: float
    last_seen: float
    busy: bool = False

    def describe(self) -> str:
        return f"{self.agent_id} ({self.framework} {self.framework_version} on {self.hardware})"


class AgentDirectory:
    def __init__(self, *, missed_heartbeats: int) -> None:
        self._missed = missed_heartbeats
        self._agents: dict[str, Agent] = {}

    def observe(self, event: AgentOnline | AgentHeartbeat | AgentOffline, now: float) -> None:
        if isinstance(event, AgentOnline):
            self._agents[event.agent_id] = Agent(
                agent_id=event.agent_id,
                host=event.host,
                framework=event.framework,
                framework_version=event.framework_version,
                hardware=event.hardware,
                heartbeat_interval_s=event.heartbeat_interval_s,
                last_seen=now,
            )
        elif isinstance(event, AgentHeartbeat):
            # A heartbeat from an agent announced before this scheduler started is unknown
            # here; the discovery call on start makes such agents announce themselves.
            if (agent := self._agents.get(event.agent_id)) is not None:
                self._agents[event.agent_id] = replace(agent, last_seen=now, busy=event.busy)
        else:
            self._agents.pop(event.agent_id, None)

    def online(self, now: float) -> list[Agent]:
        return sorted(
            (
                a
                for a in self._agents.values()
                if now - a.last_seen <= a.heartbeat_interval_s * self._missed
            ),
            key=lambda a: a.agent_id,
        )

    def candidates(self, request: EvaluationRequested, now: float) -> list[Agent]:
        """Online agents that can run ``request``: framework, version, hardware, pinning."""
        return [
            agent
            for agent in self.online(now)
            if agent.framework == request.framework
            and agent.hardware == request.hardware
            and matches(agent.framework_version, request.framework_version)
            and request.agent_id in (None, agent.agent_id)
        ]

    def explain_no_match(self, request: EvaluationRequested, now: float) -> str:
        wanted = f"{request.framework} {request.framework_version} on {request.hardware}"
        if request.agent_id:
            wanted += f" (agent {request.agent_id})"
        online = self.online(now)
        offered = "; ".join(a.describe() for a in online) if online else "no agents are online"
        return f"no online worker offers {wanted}; available: {offered}"
