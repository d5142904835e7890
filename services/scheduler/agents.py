"""The scheduler's directory of agents, folded from their announcements and heartbeats.

Times are passed in (a monotonic clock reading), so the directory is plain data and logic.
An agent silent for ``missed_heartbeats`` of its heartbeat intervals is no longer online;
``lapsed`` names those not yet declared offline, once each. An agent that went offline is
remembered, so that its next heartbeat brings it back online.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace

from shared.manifests import matches
from shared.messages import (
    UNAVAILABLE,
    AgentHeartbeat,
    AgentOffline,
    AgentOnline,
    EvaluationRequested,
)

__all__ = ["AgentDirectory", "AgentEntry", "no_worker_reason"]


@dataclass(frozen=True)
class AgentEntry:
    agent_id: str
    host: str
    framework: str
    framework_version: str
    hardware: str
    heartbeat_interval_s: float
    last_seen: float
    busy: bool = False
    # Declared offline (by itself, or by the scheduler for missed heartbeats).
    departed: bool = False
    # The last event heard from it: an offline declaration derives its id from it, so two
    # schedulers that notice the same silence declare it with the same event.
    last_event_id: uuid.UUID | None = None
    # Why it can run no job (its framework or device is absent there), as it announced.
    unavailable: str | None = None

    def describe(self) -> str:
        if self.unavailable is not None:
            return f"{self.agent_id} ({self.framework} on {self.hardware}: {self.unavailable})"
        return f"{self.agent_id} ({self.framework} {self.framework_version} on {self.hardware})"


class AgentDirectory:
    def __init__(self, *, missed_heartbeats: int) -> None:
        self.missed_heartbeats = missed_heartbeats
        self._agents: dict[str, AgentEntry] = {}

    def observe(
        self,
        event: AgentOnline | AgentHeartbeat | AgentOffline,
        now: float,
        *,
        event_id: uuid.UUID | None = None,
    ) -> None:
        if isinstance(event, AgentOnline):
            self._agents[event.agent_id] = AgentEntry(
                agent_id=event.agent_id,
                host=event.host,
                framework=event.framework,
                framework_version=event.framework_version,
                hardware=event.hardware,
                heartbeat_interval_s=event.heartbeat_interval_s,
                last_seen=now,
                last_event_id=event_id,
                unavailable=_text(event.capabilities.get(UNAVAILABLE)),
            )
        elif isinstance(event, AgentHeartbeat):
            # A heartbeat from an agent announced before this scheduler started is unknown
            # here; the discovery call on start makes such agents announce themselves.
            if (agent := self._agents.get(event.agent_id)) is not None:
                self._agents[event.agent_id] = replace(
                    agent, last_seen=now, busy=event.busy, departed=False, last_event_id=event_id
                )
        elif (agent := self._agents.get(event.agent_id)) is not None:
            self._agents[event.agent_id] = replace(agent, departed=True, busy=False)

    def excuse(self, now: float) -> None:
        """This scheduler could hear no one until ``now`` (its own link to the broker was
        down; ``now`` may be later than the clock, to give agents time to be heard again):
        every agent's silence counts from ``now``, not from its last heartbeat."""
        for agent_id, agent in self._agents.items():
            if not agent.departed and agent.last_seen < now:
                self._agents[agent_id] = replace(agent, last_seen=now)

    def known(self) -> list[AgentEntry]:
        """Every agent heard of, online or not."""
        return sorted(self._agents.values(), key=lambda a: a.agent_id)

    def online(self, now: float) -> list[AgentEntry]:
        return sorted(
            (a for a in self._agents.values() if not a.departed and not self._silent(a, now)),
            key=lambda a: a.agent_id,
        )

    def lapsed(self, now: float) -> list[AgentEntry]:
        """Agents that missed their heartbeats and have not been declared offline yet."""
        return sorted(
            (a for a in self._agents.values() if not a.departed and self._silent(a, now)),
            key=lambda a: a.agent_id,
        )

    def _silent(self, agent: AgentEntry, now: float) -> bool:
        return now - agent.last_seen > agent.heartbeat_interval_s * self.missed_heartbeats

    def candidates(
        self, request: EvaluationRequested, now: float, *, model_needs: str = "*"
    ) -> list[AgentEntry]:
        """Online agents that can run ``request``: framework, the version the request asks
        for and the one the model needs (``model_needs``), hardware, pinning."""
        return [
            agent
            for agent in self.online(now)
            if agent.unavailable is None
            and agent.framework == request.framework
            and agent.hardware == request.hardware
            and matches(agent.framework_version, request.framework_version)
            and matches(agent.framework_version, model_needs)
            and request.agent_id in (None, agent.agent_id)
        ]

    def route(
        self, request: EvaluationRequested, candidates: list[AgentEntry], now: float
    ) -> str | None:
        """The agent to pin the job to, or None for the shared queue of its framework and
        hardware: that queue reaches every such agent, so it is used only when all of them
        are candidates. Otherwise an idle candidate is preferred."""
        if request.agent_id is not None:
            return request.agent_id
        chosen = {agent.agent_id for agent in candidates}
        serving = {
            agent.agent_id
            for agent in self.online(now)
            if agent.framework == request.framework
            and agent.hardware == request.hardware
            and agent.unavailable is None  # it does not read the shared queue
        }
        if serving <= chosen:
            return None
        idle = [agent for agent in candidates if not agent.busy]
        return (idle or candidates)[0].agent_id

    def explain_no_match(
        self, request: EvaluationRequested, now: float, *, model_needs: str = "*"
    ) -> str:
        return no_worker_reason(
            request.framework,
            request.framework_version,
            request.hardware,
            self.online(now),
            model_needs=model_needs,
            agent_id=request.agent_id,
        )


def no_worker_reason(
    framework: str,
    version: str,
    hardware: str,
    online: list[AgentEntry],
    *,
    model_needs: str = "*",
    agent_id: str | None = None,
) -> str:
    """Why no online agent can run a job, and which agents there are."""
    wanted = f"{framework} {version} on {hardware}"
    if model_needs.strip() not in ("", "*"):
        wanted += f" (the model needs {framework} {model_needs})"
    if agent_id:
        wanted += f" (agent {agent_id})"
    offered = "; ".join(a.describe() for a in online) if online else "no agents are online"
    return f"no online worker offers {wanted}; available: {offered}"


def _text(value: object) -> str | None:
    return None if value is None else str(value)
