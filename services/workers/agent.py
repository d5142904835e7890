"""The agent: how a worker makes itself known to the scheduler.

start -> AgentOnline (framework and version, hardware, host capabilities, the device the
    framework sees) -> AgentHeartbeat every interval (busy or not) -> AgentOffline at stop;
    announced again whenever someone asks (AgentsDiscover: a scheduler that restarted).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import uuid
from collections.abc import Callable
from typing import Any

from services.workers.environment import capabilities, host_name
from shared.messages import (
    AgentHeartbeat,
    AgentOffline,
    AgentOnline,
    AgentsDiscover,
    Envelope,
    Framework,
    Hardware,
    agent_stream,
)
from shared.messaging import Bus, Routes

__all__ = ["Agent", "default_agent_id"]

log = logging.getLogger(__name__)


def default_agent_id(framework: str, hardware: str) -> str:
    # Agent ids are one routing-key word: no dots.
    host = re.sub(r"[^A-Za-z0-9_-]", "-", host_name())
    return f"{host}-{framework}-{hardware}-{uuid.uuid4().hex[:6]}"


class Agent:
    def __init__(
        self,
        bus: Bus,
        *,
        agent_id: str,
        framework: Framework,
        hardware: Hardware,
        heartbeat_interval_s: float,
        busy: Callable[[], bool],
    ) -> None:
        self.agent_id = agent_id
        self.name = f"worker {agent_id}"
        self._bus = bus
        self._framework = framework
        self._hardware = hardware
        self._interval_s = heartbeat_interval_s
        self._busy = busy
        self._version = ""
        self._device: dict[str, Any] = {}
        self._heartbeat: asyncio.Task[None] | None = None

    async def start(self, *, version: str, device: dict[str, Any]) -> None:
        """Announce ``version`` and ``device`` (what the framework process reported), then
        heartbeat until stopped."""
        self._version, self._device = version, device
        await self._bus.handle(
            self._bus.topology.queue("worker", "discovery", self.agent_id),
            Routes(self._bus.topology.events).on(AgentsDiscover, self._announce_on_discovery),
            durable=False,
        )
        await self._announce()
        self._heartbeat = asyncio.create_task(self._beat(), name=f"heartbeat {self.agent_id}")

    async def stop(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
        with contextlib.suppress(Exception):  # the broker may already be gone
            await self._publish(AgentOffline(agent_id=self.agent_id, reason="stopped"))

    async def _announce(self) -> None:
        await self._publish(
            AgentOnline(
                agent_id=self.agent_id,
                host=host_name(),
                framework=self._framework,
                framework_version=self._version,
                hardware=self._hardware,
                capabilities={**capabilities(), **self._device},
                heartbeat_interval_s=self._interval_s,
            )
        )

    async def _announce_on_discovery(self, call: AgentsDiscover, envelope: Envelope) -> None:
        await self._announce()

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self._publish(
                    AgentHeartbeat(
                        agent_id=self.agent_id,
                        busy=self._busy(),
                        host=host_name(),
                        framework=self._framework,
                        framework_version=self._version,
                        hardware=self._hardware,
                    )
                )
            except Exception as exc:  # a broker outage must not kill the heartbeat
                log.warning("heartbeat not sent: %s", exc)

    async def _publish(self, payload: AgentOnline | AgentHeartbeat | AgentOffline) -> None:
        await self._bus.publish(
            Envelope.wrap(
                payload,
                stream_id=agent_stream(self.agent_id),
                correlation_id=uuid.uuid4(),
                producer=self.name,
            )
        )
