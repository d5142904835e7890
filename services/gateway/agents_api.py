"""/v1/agents: the fleet, online or offline: each worker's host, framework and version,
hardware and device, state, current job, last heartbeat and jobs done.

Read from the recorder's read models, which follow the same events the scheduler's own
picture is folded from (``services/scheduler/agents.py``): announcements and heartbeats,
the scheduler's offline declarations for missed heartbeats, and each evaluation's latest
attempt (which agent runs it, and how it ended).
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Depends

from services.gateway.context import GatewayContext, context_of
from services.gateway.schemas import AgentOut
from shared.eventstore import AgentView

__all__ = ["describe_device", "router"]

router = APIRouter(prefix="/v1/agents")
Context = Annotated[GatewayContext, Depends(context_of)]

# More evaluations running at once than this would mean more agents than any fleet has.
_RUNNING_READ = 10_000


@router.get("", response_model=list[AgentOut])
async def list_agents(context: Context) -> list[AgentOut]:
    agents = await context.store.list_agents()
    jobs = await context.store.jobs_by_agent()
    running = await context.store.list_evaluations(status="running", limit=_RUNNING_READ)
    # The newest start wins where an agent lost is still named by an older one.
    current = {e.agent_id: e.evaluation_id for e in reversed(running) if e.agent_id}
    return [_out(a, jobs.get(a.agent_id, {}), current) for a in agents]


def _out(agent: AgentView, jobs: dict[str, int], current: dict[str, uuid.UUID]) -> AgentOut:
    job = current.get(agent.agent_id) if agent.status == "online" else None
    if agent.status != "online":
        state = "offline"
    else:
        state = "busy" if agent.busy or job is not None else "online"
    return AgentOut(
        agent_id=agent.agent_id,
        host=agent.host,
        framework=agent.framework,
        framework_version=agent.framework_version,
        hardware=agent.hardware,
        status=agent.status,
        busy=agent.busy,
        last_seen=agent.last_seen,
        capabilities=agent.capabilities,
        state=state,
        device=describe_device(agent.hardware, agent.capabilities),
        current_job=job,
        last_heartbeat=agent.last_seen,
        jobs_done=jobs.get("completed", 0) + jobs.get("failed", 0),
        jobs_failed=jobs.get("failed", 0),
        jobs_queued=jobs.get("scheduled", 0),
    )


def describe_device(hardware: str | None, capabilities: dict[str, Any] | None) -> str | None:
    """The device an agent runs its framework on, in a few words, from what it announced."""
    found = capabilities or {}
    if isinstance(error := found.get("device_error"), str):
        return f"unavailable: {error}"
    opencl = found.get("opencl")
    if isinstance(opencl, dict) and opencl.get("name"):
        emulated = " (emulating an FPGA board)" if opencl.get("emulated") else ""
        return f"OpenCL {opencl['name']} on {opencl.get('platform', '?')}{emulated}"
    gpus = [g for g in found.get("gpus") or [] if isinstance(g, dict) and g.get("name")]
    if hardware == "gpu" and gpus:
        return ", ".join(f"GPU {g.get('index', i)}: {g['name']}" for i, g in enumerate(gpus))
    cpu = found.get("cpu_model")
    if isinstance(cpu, str) and cpu:
        cores = found.get("cpu_cores")
        return f"{cpu} ({cores} cores)" if cores else cpu
    return None
