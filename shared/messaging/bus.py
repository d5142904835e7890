"""The bus services talk through: typed envelopes over a broker port, traced, with one policy.

A bus is made of parts with one concern each, and keeps the methods services call:
- ``publishing.Publisher``: envelopes out, each in a PRODUCER span whose context it carries;
- ``subscriptions.Subscriptions``: the queues it consumes, each with its consumer
  (``consumers``), which runs the handler in a CONSUMER span continuing the publisher's trace
  (``handling``) and settles the delivery by the one policy (``policy``, ``settling``);
- ``requests.Requests``: request/reply over the jobs exchange.
"""

from __future__ import annotations

import weakref
from collections.abc import Coroutine
from typing import Any

from shared.messages import Envelope, Topology
from shared.messaging.broker import STREAM_HEADER, Binding, Broker, Subscription
from shared.messaging.consumers import Consuming, current_delivery
from shared.messaging.handling import BatchHandler, Handler, Handling
from shared.messaging.pause import PAUSE_CAP_S
from shared.messaging.publishing import Publisher
from shared.messaging.requests import Requests
from shared.messaging.routes import Routes
from shared.messaging.settling import DeadLetterHook, Settling
from shared.messaging.subscriptions import Subscriptions
from shared.telemetry import Telemetry

__all__ = [
    "BatchHandler",
    "Bus",
    "DeadLetterHook",
    "Handler",
    "current_delivery",
    "paused_consumers",
]

# The buses on each broker, for a process-wide view of paused consumers (the embedded mode
# runs every service's bus on one broker; /readyz reports them all). Weak: a broker's buses
# go with it.
_buses: weakref.WeakKeyDictionary[Broker, weakref.WeakSet[Bus]] = weakref.WeakKeyDictionary()


def paused_consumers(broker: Broker) -> dict[str, str]:
    """Every paused subscription of every bus on ``broker``: ``service:queue`` -> why."""
    paused: dict[str, str] = {}
    for bus in _buses.get(broker, ()):
        paused.update({f"{bus.service}:{queue}": why for queue, why in bus.paused.items()})
    return paused


class Bus:
    """One service's bus. Its publishing, consuming and request methods are its parts' own,
    or hand back their part's coroutine rather than await it: a message pays for no extra
    await on its way through the bus (``await bus.publish(...)`` reads as ever)."""

    def __init__(
        self,
        broker: Broker,
        *,
        topology: Topology,
        telemetry: Telemetry,
        service: str,
        max_attempts: int = 3,
        prefetch: int = 16,
        pause_initial_s: float = 0.5,
        pause_cap_s: float = PAUSE_CAP_S,
        event_log_partitions: int | None = None,
        max_message_bytes: int = 32 * 1024**2,
    ) -> None:
        self.broker = broker
        # No message above this is sent or read (DLSCOPE_MAX_MESSAGE_BYTES); a subscription
        # may allow more (the registry's registrations carry their files).
        self.max_message_bytes = max_message_bytes
        self._event_log_partitions = event_log_partitions
        self.topology = topology
        self.service = service
        self._publisher = Publisher(
            broker,
            topology=topology,
            tracer=telemetry.tracer,
            service=service,
            max_message_bytes=max_message_bytes,
            by_stream=(event_log_partitions or 1) > 1,
        )
        consuming = Consuming(
            handling=Handling(
                self._publisher, tracer=telemetry.tracer, service=service, max_attempts=max_attempts
            ),
            settling=Settling(
                broker,
                service=service,
                max_attempts=max_attempts,
                dead_letter_exchange=topology.dlx,
            ),
            service=service,
        )
        self._subscriptions = Subscriptions(
            broker,
            consuming,
            dead_letter_exchange=topology.dlx,
            prefetch=prefetch,
            max_message_bytes=max_message_bytes,
            pause_initial_s=pause_initial_s,
            pause_cap_s=pause_cap_s,
        )
        self._requests = Requests(
            broker, self._publisher, topology=topology, max_message_bytes=max_message_bytes
        )
        # The parts' own methods, as they are: events produced together, in few messages
        # (``Publisher.publish_batch``); a queue consumed by a handler of one event
        # (``Subscriptions.subscribe``), or of each delivery's events at once
        # (``handle_together``); a request and its reply, or the reply opened as a payload
        # class (``Requests.request``, ``ask``).
        self.publish_batch = self._publisher.publish_batch
        self.subscribe = self._subscriptions.subscribe
        self.handle_together = self._subscriptions.handle_together
        self.request = self._requests.request
        self.ask = self._requests.ask
        _buses.setdefault(broker, weakref.WeakSet()).add(self)

    async def start(self) -> None:
        # Several buses may share one broker (the embedded mode); whoever created the broker
        # closes it, after every bus on it has stopped.
        if not self.broker.is_connected:
            await self.broker.connect()
        await self.broker.declare_exchanges(
            [self.topology.events, self.topology.jobs],
            dead_letter_exchange=self.topology.dlx,
            dead_letter_queue=self.topology.dead_letters,
        )
        if self._event_log_partitions is not None:
            await self._declare_event_log(self._event_log_partitions)

    async def _declare_event_log(self, partitions: int) -> None:
        # The recorders' queues are the event log's front door. Whichever service starts
        # first declares them, so an event published before any recorder has started (the
        # registry's built-ins, say) waits in them instead of being dropped as unroutable.
        topology = self.topology
        if partitions == 1:
            await self.broker.declare_queue(
                topology.recorder_queue(0, 1),
                [Binding(topology.events, "#")],
                dead_letter_exchange=topology.dlx,
            )
        else:
            await self.broker.declare_partitions(
                topology.recorder_partitions,
                source=topology.events,
                queues=[topology.recorder_queue(i, partitions) for i in range(partitions)],
                hash_header=STREAM_HEADER,
                dead_letter_exchange=topology.dlx,
            )

    async def stop(self) -> None:
        await self._subscriptions.stop()
        self._requests.cancel()

    @property
    def is_connected(self) -> bool:
        return self.broker.is_connected

    @property
    def paused(self) -> dict[str, str]:
        """The subscriptions paused now, waiting for a dependency: queue -> why."""
        return self._subscriptions.paused

    def publish(
        self,
        envelope: Envelope,
        *,
        exchange: str | None = None,
        routing_key: str | None = None,
        reply_to: str | None = None,
        persistent: bool = True,
        max_bytes: int | None = None,
    ) -> Coroutine[Any, Any, Envelope]:
        """``Publisher.publish``: ``envelope`` as an event (by default), returned as sent."""
        return self._publisher.publish(
            envelope,
            exchange=exchange,
            routing_key=routing_key,
            reply_to=reply_to,
            persistent=persistent,
            max_bytes=max_bytes,
        )

    def handle(
        self,
        queue: str,
        routes: Routes,
        *,
        durable: bool = True,
        prefetch: int | None = None,
        on_dead_letter: DeadLetterHook | None = None,
        count_redeliveries: bool = False,
        max_message_bytes: int | None = None,
    ) -> Coroutine[Any, Any, Subscription]:
        """Consume ``queue`` with typed handlers (``subscribe``'s options); its bindings are
        the routes'."""
        return self._subscriptions.subscribe(
            queue,
            routes.bindings,
            routes,
            durable=durable,
            prefetch=prefetch,
            on_dead_letter=on_dead_letter,
            count_redeliveries=count_redeliveries,
            max_message_bytes=max_message_bytes,
        )
