"""Events by which workers (agents) announce themselves, and the scheduler's discovery call.

Every agent's events share ``stream_id = "agent-<agent_id>"``.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from shared.inputs import Reason
from shared.messages.envelope import Payload
from shared.messages.evaluation import Framework, Hardware

__all__ = ["AgentHeartbeat", "AgentOffline", "AgentOnline", "AgentsDiscover", "agent_stream"]


def agent_stream(agent_id: str) -> str:
    return f"agent-{agent_id}"


# The capability an agent announces when it can run no job (its framework or device is
# absent there): why, with what to install. The scheduler routes nothing to it, and names it
# when it says why no worker can run a request.
UNAVAILABLE = "unavailable"


class AgentOnline(Payload):
    TYPE = "agent.online"

    agent_id: str = Field(min_length=1)
    host: str
    framework: Framework
    framework_version: str
    hardware: Hardware
    capabilities: dict[str, Any] = Field(default_factory=dict)
    heartbeat_interval_s: float = Field(gt=0)


class AgentHeartbeat(Payload):
    TYPE = "agent.heartbeat"

    agent_id: str
    busy: bool
    # Who it is, again: a reader that missed the announcement (a recorder whose queue did
    # not exist yet when the agent started) still learns what the agent runs.
    host: str | None = None
    framework: Framework | None = None
    framework_version: str | None = None
    hardware: Hardware | None = None


class AgentOffline(Payload):
    TYPE = "agent.offline"

    agent_id: str
    reason: Reason


class AgentsDiscover(Payload):
    """Asks every agent to announce itself again (sent by a scheduler that has just started)."""

    TYPE = "agent.discover"

    requested_by: str
