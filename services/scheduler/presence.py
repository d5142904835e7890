"""What the scheduler hears of the agents, and what it makes of their silence.

Their announcements and heartbeats fill its directory (``agents``); an agent silent for
DLSCOPE_AGENT_MISSED_HEARTBEATS heartbeats is declared offline, once, and its job handed to
``losses``. The directory starts empty, so the scheduler asks every agent to announce itself
(``discover``), and does again when its own link to the broker comes back: the heartbeats
sent meanwhile never reached it, and that silence is not the agents'.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import KW_ONLY, dataclass, field

from services.scheduler.agents import AgentDirectory
from services.scheduler.losses import Losses
from shared.config import Settings
from shared.manifests import ModelManifest
from shared.messages import (
    AgentHeartbeat,
    AgentOffline,
    AgentOnline,
    AgentsDiscover,
    Envelope,
    EvaluationRequested,
    agent_stream,
)
from shared.messaging import Bus

__all__ = ["Presence"]

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Presence:
    agents: AgentDirectory
    losses: Losses
    bus: Bus
    settings: Settings
    _: KW_ONLY
    producer: str
    # Offline declarations sent by this instance: their echo must not undo a heartbeat that
    # arrived in between.
    _declared: set[uuid.UUID] = field(default_factory=set, init=False)
    # Since when this instance has been hearing the agents (its start, or its link to the
    # broker coming back): until they have had time to answer the discovery call, an empty
    # directory means "not heard yet", not "no such agent".
    _listening_since: float = field(default_factory=time.monotonic, init=False)
    # This instance's own link to the broker went down and it has not yet made up for what
    # it could not hear meanwhile (``hearing_again``).
    _deaf: bool = field(default=False, init=False)

    async def discover(self) -> None:
        """Ask every agent to announce itself (the scheduler's directory starts empty)."""
        self._listening_since = time.monotonic()
        await self.bus.publish(
            Envelope.wrap(
                AgentsDiscover(requested_by=self.producer),
                stream_id="scheduler",
                correlation_id=uuid.uuid4(),
                producer=self.producer,
            )
        )

    @property
    def _discovery_window(self) -> float:
        """How long agents have to answer a discovery call: one heartbeat interval (an
        answer is one round trip; a request for an agent that truly is not there should not
        wait much longer than that to be told so)."""
        return self.settings.heartbeat_interval_s

    async def heard(
        self, event: AgentOnline | AgentHeartbeat | AgentOffline, envelope: Envelope
    ) -> None:
        if envelope.event_id in self._declared:
            self._declared.discard(envelope.event_id)
            return
        self.agents.observe(event, time.monotonic(), event_id=envelope.event_id)
        if isinstance(event, AgentOffline):
            await self.losses.agent_lost(event.agent_id, event.reason)
        else:
            self.losses.agent_found(event.agent_id)

    async def sweep(self) -> None:
        """Declare offline, once, every agent that missed its heartbeats."""
        # Twice per heartbeat: an agent is declared at most half an interval late.
        period = self.settings.heartbeat_interval_s / 2
        skipped = False
        while True:
            asked = time.monotonic()
            await asyncio.sleep(period)
            if not self.bus.is_connected:
                self._deaf = True
                continue
            await self.hearing_again()
            # Woken a heartbeat late, this process was held up (a starved CPU, a long pause):
            # the heartbeats that came meanwhile may wait unread behind this turn, so an
            # agent's silence may be this scheduler's deafness. One turn waits for them; never
            # two in a row, so a scheduler always late still declares.
            late = time.monotonic() - asked - period > self.settings.heartbeat_interval_s
            if late and not skipped:
                skipped = True
                continue
            skipped = False
            try:
                await self._declare_lapsed()
            except Exception as exc:  # a broker outage must not end the sweeping
                log.warning("offline declarations not sent: %s", exc)

    async def hearing_again(self) -> None:
        """This scheduler's own link was down and is back: the heartbeats sent meanwhile never
        reached it, so that silence is not the agents' (a broker outage otherwise failed every
        running evaluation, its agent "offline"), and an agent that started meanwhile is not
        known here yet. Done once, by whichever notices first: the sweep, or a request that
        arrives before the sweep's next turn (it was failed for "no agents are online")."""
        if not self._deaf:
            return
        self._deaf = False
        # The agents reconnect on their own schedule, each perhaps a reconnect interval and
        # a heartbeat after this scheduler, later still on a loaded host: their silence
        # counts from one whole grace period from now.
        grace = self.agents.missed_heartbeats * self.settings.heartbeat_interval_s
        self.agents.excuse(time.monotonic() + grace)
        try:
            await self.discover()
        except Exception as exc:
            log.warning("discovery after a reconnect not sent: %s", exc)

    async def until_answered(self, request: EvaluationRequested, model: ModelManifest) -> None:
        """Just started, or back from a broker outage, with no agent for ``request`` yet: wait
        until the agents have had time to answer the discovery call, so that "no such agent"
        is said only of agents that are truly absent."""
        await self.hearing_again()
        now = time.monotonic()
        answering = self._listening_since + self._discovery_window - now
        needs = model.version_needed_by(request.framework)
        if answering > 0 and not self.agents.candidates(request, now, model_needs=needs):
            await asyncio.sleep(answering)

    async def _declare_lapsed(self) -> None:
        missed = self.agents.missed_heartbeats
        # One at a time, looked up again after each await: a heartbeat may have come meanwhile.
        while lapsed := self.agents.lapsed(time.monotonic()):
            agent = lapsed[0]
            offline = AgentOffline(
                agent_id=agent.agent_id,
                reason=f"missed {missed} heartbeats (one every {agent.heartbeat_interval_s:g} s)",
            )
            envelope = Envelope.wrap(
                offline,
                stream_id=agent_stream(agent.agent_id),
                correlation_id=uuid.uuid4(),
                producer=self.producer,
                event_id=None
                if agent.last_event_id is None
                else uuid.uuid5(agent.last_event_id, AgentOffline.TYPE),
            )
            # Recorded here before the await: a heartbeat handled meanwhile must win.
            self.agents.observe(offline, time.monotonic())
            self._declared.add(envelope.event_id)
            await self.bus.publish(envelope)
            log.warning("agent %s is offline: %s", agent.agent_id, offline.reason)
            await self.losses.agent_lost(agent.agent_id, offline.reason)
