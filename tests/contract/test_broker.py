"""The broker port's contract, run against every adapter: the in-memory one and RabbitMQ.

Every test gets its own namespace (exchanges ``<ns>.events|jobs|dlx``, queues ``<ns>.test.*``)
and waits for what it expects with a timeout; absence is shown by order (a message published
after the unwanted ones arrives, and nothing arrived before it), never by sleeping.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import aio_pika
import orjson
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.trace import SpanKind

from shared.config import Settings
from shared.errors import (
    BrokerUnavailable,
    ConfigurationError,
    InvalidMessage,
    StoreUnavailable,
    TransientError,
)
from shared.messages import (
    AgentHeartbeat,
    AgentOffline,
    AgentOnline,
    AgentsDiscover,
    Envelope,
    Payload,
    Topology,
    TypedEnvelope,
)
from shared.messaging.amqp import AmqpBroker
from shared.messaging.broker import (
    DEAD_LETTERED_FROM_HEADER,
    REASON_HEADER,
    STREAM_HEADER,
    Binding,
    Broker,
    Consumer,
    Delivery,
    Outcome,
    OutgoingMessage,
    Settlement,
    Subscription,
)
from shared.messaging.bus import Bus, current_delivery, paused_consumers
from shared.messaging.memory import MemoryBroker
from shared.messaging.routes import Routes
from shared.telemetry import Telemetry

WAIT = 10.0  # seconds: generous for a loaded 2-core machine, never reached when all is well

ADAPTERS = [
    pytest.param("memory", id="memory"),
    pytest.param("rabbitmq", id="rabbitmq", marks=pytest.mark.rabbitmq),
]

ACK = Settlement(Outcome.ACK)


class Recorder:
    """A consumer that keeps what it gets, in the order deliveries start."""

    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []
        self._arrived: asyncio.Queue[Delivery] = asyncio.Queue()

    async def __call__(self, delivery: Delivery) -> Settlement:
        self.deliveries.append(delivery)
        self._arrived.put_nowait(delivery)
        return ACK

    async def next(self) -> Delivery:
        return await asyncio.wait_for(self._arrived.get(), WAIT)

    async def take(self, count: int) -> list[Delivery]:
        return [await self.next() for _ in range(count)]


@dataclass
class Holder:
    """A consumer that acks everything, but holds the first delivery of some bodies until
    their event is set, and keeps the task handling each delivery. A stubborn one finishes
    a held delivery even when cancelled, as work that cannot be interrupted would."""

    def __init__(self, hold: dict[bytes, asyncio.Event], *, stubborn: bool = False) -> None:
        self.hold = hold
        self.stubborn = stubborn
        self.count: Counter[bytes] = Counter()
        self.tasks: defaultdict[bytes, list[asyncio.Task[object]]] = defaultdict(list)
        self._arrived: asyncio.Queue[bytes] = asyncio.Queue()

    async def __call__(self, delivery: Delivery) -> Settlement:
        task = asyncio.current_task()
        assert task is not None
        self.count[delivery.body] += 1
        self.tasks[delivery.body].append(task)
        self._arrived.put_nowait(delivery.body)
        if delivery.body in self.hold and self.count[delivery.body] == 1:
            try:
                await self.hold[delivery.body].wait()
            except asyncio.CancelledError:
                if not self.stubborn:
                    raise
                await self.hold[delivery.body].wait()
        return ACK

    async def until(self, body: bytes) -> None:
        async with asyncio.timeout(WAIT):
            while await self._arrived.get() != body:
                pass

    async def handled(self, *bodies: bytes) -> None:
        """Wait until the adapter is done with every delivery of these bodies so far."""
        await handled([task for body in bodies for task in self.tasks[body]])


async def handled(tasks: Sequence[asyncio.Task[object]]) -> None:
    """Wait for these delivery-handling tasks to end: the adapter has settled them."""
    _, pending = await asyncio.wait(tasks, timeout=WAIT)
    assert not pending


@dataclass
class Rig:
    """A connected broker with the namespace's exchanges declared."""

    broker: Broker
    topology: Topology
    queues: list[str] = field(default_factory=list)

    def queue(self, name: str) -> str:
        """A queue name in this test's namespace, deleted after the test."""
        queue = self.topology.queue("test", name)
        self.queues.append(queue)
        return queue

    async def subscribe(
        self,
        queue: str,
        patterns: Sequence[str],
        consumer: Consumer,
        *,
        exchange: str | None = None,
        prefetch: int = 16,
    ) -> Subscription:
        exchange = exchange or self.topology.events
        return await self.broker.consume(
            queue,
            [Binding(exchange, pattern) for pattern in patterns],
            consumer,
            prefetch=prefetch,
            dead_letter_exchange=self.topology.dlx,
        )

    async def publish(
        self,
        routing_key: str,
        body: bytes = b"{}",
        *,
        exchange: str | None = None,
        correlation_id: str | None = None,
        reply_to: str | None = None,
    ) -> None:
        message = OutgoingMessage(
            body=body,
            message_id=uuid.uuid4().hex,
            correlation_id=correlation_id,
            reply_to=reply_to,
        )
        await self.broker.publish(
            self.topology.events if exchange is None else exchange, routing_key, message
        )

    async def dead_letters(self) -> Recorder:
        recorder = Recorder()
        # No dead-letter exchange of its own: a dead letter of a dead letter would loop.
        await self.broker.consume(
            self.topology.dead_letters, [], recorder, prefetch=16, dead_letter_exchange=""
        )
        return recorder


@asynccontextmanager
async def open_rig(kind: str, url: str, namespace: str) -> AsyncIterator[Rig]:
    topology = Topology(namespace)
    broker: Broker
    if kind == "memory":
        broker = MemoryBroker()
    else:
        broker = AmqpBroker(url, connection_name=f"dlscope-test-{namespace}")
    await broker.connect()
    await broker.declare_exchanges(
        [topology.events, topology.jobs],
        dead_letter_exchange=topology.dlx,
        dead_letter_queue=topology.dead_letters,
    )
    rig = Rig(broker, topology)
    try:
        yield rig
    finally:
        await broker.close()
        if kind == "rabbitmq":
            await remove_namespace(url, topology, rig.queues)


async def remove_namespace(url: str, topology: Topology, queues: Sequence[str]) -> None:
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        for queue in (*queues, topology.dead_letters):
            await channel.queue_delete(queue)
        for exchange in (
            topology.events,
            topology.jobs,
            topology.dlx,
            topology.recorder_partitions,
        ):
            await channel.exchange_delete(exchange)


@pytest.fixture(params=ADAPTERS)
async def rig(
    request: pytest.FixtureRequest, namespace: str, rabbitmq_url: str
) -> AsyncIterator[Rig]:
    async with open_rig(request.param, rabbitmq_url, namespace) as opened:
        yield opened


# Routing


TOPIC_CASES = [
    # pattern, keys published in order (the last one matches), keys that must arrive
    ("a.#", ["b.a", "ab", "a", "a.b", "a.b.c.d"], ["a", "a.b", "a.b.c.d"]),
    ("#.c", ["c.a", "a.b.d", "c", "a.b.c"], ["c", "a.b.c"]),
    ("a.*", ["a", "a.b.c", "b.a", "a.b"], ["a.b"]),
    ("*.b.*", ["a.b", "b.b", "a.b.c.d", "x.b.y"], ["x.b.y"]),
    ("a.b", ["a.b.c", "a", "a.c", "b.a.b", "a.b"], ["a.b"]),
    ("#", ["", "a", "a.b.c"], ["", "a", "a.b.c"]),
    ("*", ["", "a.b", "a"], ["a"]),
]


@pytest.mark.parametrize(("pattern", "published", "expected"), TOPIC_CASES)
async def test_topic_pattern_routes_exactly_the_matching_keys(
    rig: Rig, pattern: str, published: list[str], expected: list[str]
) -> None:
    recorder = Recorder()
    await rig.subscribe(rig.queue("topic"), [pattern], recorder)
    for key in published:
        await rig.publish(key)

    await recorder.take(len(expected))

    # Order is kept within a queue, so anything unwanted would have arrived before the last.
    assert [d.routing_key for d in recorder.deliveries] == expected


async def test_one_message_reaches_every_bound_queue_once(rig: Rig) -> None:
    wide, narrow = Recorder(), Recorder()
    await rig.subscribe(rig.queue("wide"), ["job.#", "job.cpu"], wide)
    await rig.subscribe(rig.queue("narrow"), ["job.cpu"], narrow)

    await rig.publish("job.cpu", b"one")
    await rig.publish("job.end", b"end")

    assert [d.body for d in await wide.take(2)] == [b"one", b"end"]
    assert [d.body for d in await narrow.take(1)] == [b"one"]


async def test_a_message_no_queue_is_bound_for_is_dropped_without_error(rig: Rig) -> None:
    recorder = Recorder()
    await rig.subscribe(rig.queue("cpu"), ["job.cpu"], recorder)

    absent = rig.topology.queue("test", "absent")

    await rig.publish("job.fpga", b"no binding matches")
    await rig.publish(absent, b"no such queue", exchange="")
    await rig.publish("job.cpu", b"listened to")

    assert [d.body for d in await recorder.take(1)] == [b"listened to"]
    assert await rig.broker.queue_depth(absent) == 0


async def test_default_exchange_routes_by_queue_name_and_keeps_message_metadata(rig: Rig) -> None:
    queue = rig.queue("direct")
    recorder = Recorder()
    await rig.broker.consume(queue, [], recorder, prefetch=1, dead_letter_exchange=rig.topology.dlx)

    await rig.broker.publish(
        "",
        queue,
        OutgoingMessage(
            body=b'{"x": 1}',
            message_id="m-1",
            headers={"traceparent": "00-abc", "x-custom": "yes"},
            correlation_id="c-1",
            reply_to="somewhere",
        ),
    )

    delivery = await recorder.next()
    assert (delivery.exchange, delivery.routing_key) == ("", queue)
    assert delivery.body == b'{"x": 1}'
    assert (delivery.message_id, delivery.correlation_id) == ("m-1", "c-1")
    assert delivery.reply_to == "somewhere"
    assert delivery.headers["x-custom"] == "yes"
    assert delivery.attempt == 1


async def test_message_published_before_anyone_consumes_waits_in_the_queue(rig: Rig) -> None:
    queue = rig.queue("waiting")
    first = await rig.subscribe(queue, ["job.#"], Recorder())
    await first.cancel()

    await rig.publish("job.a", b"1")
    await rig.publish("job.b", b"2")
    assert await rig.broker.queue_depth(queue) == 2

    recorder = Recorder()
    await rig.subscribe(queue, ["job.#"], recorder)
    assert [d.body for d in await recorder.take(2)] == [b"1", b"2"]
    assert await rig.broker.queue_depth(rig.topology.queue("test", "never-declared")) == 0


async def test_a_queue_declared_before_any_consumer_keeps_what_is_published_meanwhile(
    rig: Rig,
) -> None:
    queue = rig.queue("log")
    binding = Binding(rig.topology.events, "job.#")
    await rig.broker.declare_queue(queue, [binding], dead_letter_exchange=rig.topology.dlx)
    await rig.broker.declare_queue(queue, [binding], dead_letter_exchange=rig.topology.dlx)

    await rig.publish("job.a", b"1")
    await rig.publish("other", b"not bound")
    await rig.publish("job.b", b"2")
    assert await rig.broker.queue_depth(queue) == 2

    recorder = Recorder()
    await rig.subscribe(queue, ["job.#"], recorder)  # same settings: the queue is kept
    assert [d.body for d in await recorder.take(2)] == [b"1", b"2"]

    with pytest.raises(ConfigurationError, match="nowhere"):
        await rig.broker.declare_queue(
            rig.queue("stray"),
            [Binding(f"{rig.topology.namespace}.nowhere", "#")],
            dead_letter_exchange=rig.topology.dlx,
        )


async def test_publishing_to_an_undeclared_exchange_fails_and_the_broker_stays_usable(
    rig: Rig,
) -> None:
    missing = f"{rig.topology.namespace}.nowhere"
    with pytest.raises(ConfigurationError, match="nowhere"):
        await rig.publish("job.cpu", exchange=missing)
    with pytest.raises(ConfigurationError, match="nowhere"):
        await rig.subscribe(rig.queue("orphan"), ["#"], Recorder(), exchange=missing)

    recorder = Recorder()
    await rig.subscribe(rig.queue("after"), ["job.#"], recorder)
    await rig.publish("job.cpu", b"still works")
    assert (await recorder.next()).body == b"still works"


# Partitions


class Partitions:
    """Consumers on every queue of a consistent-hash exchange, keeping which queue got what."""

    def __init__(self, rig: Rig, count: int) -> None:
        self.rig = rig
        self.exchange = rig.topology.recorder_partitions
        self.queues = [rig.queue(f"p{i}") for i in range(count)]
        self.got: defaultdict[str, list[Delivery]] = defaultdict(list)
        self._arrived: asyncio.Queue[None] = asyncio.Queue()

    async def declare(self) -> None:
        await self.rig.broker.declare_partitions(
            self.exchange,
            source=self.rig.topology.events,
            queues=self.queues,
            hash_header=STREAM_HEADER,
            dead_letter_exchange=self.rig.topology.dlx,
        )

    async def consume(self) -> None:
        for queue in self.queues:

            async def keep(delivery: Delivery, queue: str = queue) -> Settlement:
                self.got[queue].append(delivery)
                self._arrived.put_nowait(None)
                return ACK

            await self.rig.broker.consume(
                queue, [], keep, prefetch=16, dead_letter_exchange=self.rig.topology.dlx
            )

    async def take(self, count: int) -> None:
        async with asyncio.timeout(WAIT):
            for _ in range(count):
                await self._arrived.get()

    async def publish(self, routing_key: str, body: bytes, stream: str | None) -> None:
        headers = {STREAM_HEADER: stream} if stream is not None else {}
        message = OutgoingMessage(body=body, message_id=uuid.uuid4().hex, headers=headers)
        await self.rig.broker.publish(self.rig.topology.events, routing_key, message)


async def test_partitions_keep_each_stream_in_one_queue_in_order_and_use_every_queue(
    rig: Rig,
) -> None:
    partitions = Partitions(rig, 3)
    # Every recorder declares the partitions; declaring again changes nothing.
    await partitions.declare()
    await partitions.declare()
    await partitions.consume()
    streams = [f"stream-{i}" for i in range(40)]
    for step in range(3):
        for stream in streams:
            await partitions.publish(f"run.step{step}", f"{stream}/{step}".encode(), stream)

    await partitions.take(len(streams) * 3)

    owner: dict[str, str] = {}
    for queue, deliveries in partitions.got.items():
        for delivery in deliveries:
            stream = delivery.body.decode().split("/")[0]
            assert owner.setdefault(stream, queue) == queue, f"{stream} reached two queues"
    assert set(owner) == set(streams)
    assert set(owner.values()) == set(partitions.queues), "some queue got no stream"
    for stream in streams:
        bodies = [
            d.body
            for d in partitions.got[owner[stream]]
            if d.body.startswith(b"%s/" % stream.encode())
        ]
        assert bodies == [f"{stream}/{step}".encode() for step in range(3)]
    # A delivery still says where it was published and under which key.
    delivery = partitions.got[owner["stream-0"]][0]
    assert (delivery.exchange, delivery.headers[STREAM_HEADER]) == (rig.topology.events, "stream-0")
    assert delivery.routing_key.startswith("run.step")


async def test_partitions_put_every_message_without_the_header_in_one_queue(rig: Rig) -> None:
    partitions = Partitions(rig, 2)
    await partitions.declare()
    await partitions.consume()

    for i in range(10):
        await partitions.publish(f"raw.key{i}", f"raw-{i}".encode(), None)
    await partitions.take(10)

    # Nothing lost: all of them, in order, in the one queue a missing header hashes to.
    [(_, deliveries)] = [(q, d) for q, d in partitions.got.items() if d]
    assert [d.body for d in deliveries] == [f"raw-{i}".encode() for i in range(10)]


async def test_partitions_need_their_source_exchange(rig: Rig) -> None:
    with pytest.raises(ConfigurationError):
        await rig.broker.declare_partitions(
            rig.topology.recorder_partitions,
            source=rig.topology.queue("missing"),
            queues=[rig.queue("p0")],
            hash_header=STREAM_HEADER,
            dead_letter_exchange=rig.topology.dlx,
        )


# Settling


async def test_retry_requeues_at_the_tail_with_the_next_attempt_and_original_key(rig: Rig) -> None:
    seen: list[Delivery] = []
    arrived: asyncio.Queue[Delivery] = asyncio.Queue()

    async def retry_first_once(delivery: Delivery) -> Settlement:
        seen.append(delivery)
        arrived.put_nowait(delivery)
        if delivery.body == b"first" and delivery.attempt == 1:
            return Settlement(Outcome.RETRY, "not yet")
        return ACK

    queue = rig.queue("retry")
    await (await rig.subscribe(queue, ["job.#"], Recorder())).cancel()  # declares the queue
    await rig.publish("job.cpu", b"first", correlation_id="c-1")
    await rig.publish("job.gpu", b"second")
    await rig.subscribe(queue, ["job.#"], retry_first_once, prefetch=1)
    for _ in range(3):
        await asyncio.wait_for(arrived.get(), WAIT)

    assert [(d.body, d.attempt) for d in seen] == [(b"first", 1), (b"second", 1), (b"first", 2)]
    original, retried = seen[0], seen[2]
    assert (retried.exchange, retried.routing_key) == (rig.topology.events, "job.cpu")
    assert retried.message_id == original.message_id
    assert retried.correlation_id == "c-1"


async def test_a_consumer_that_raises_gets_the_message_again(rig: Rig) -> None:
    attempts: asyncio.Queue[int] = asyncio.Queue()

    async def crash_once(delivery: Delivery) -> Settlement:
        attempts.put_nowait(delivery.attempt)
        if delivery.attempt == 1:
            raise RuntimeError("consumer bug")
        return ACK

    await rig.subscribe(rig.queue("crash"), ["job.#"], crash_once)
    await rig.publish("job.cpu")

    assert [await asyncio.wait_for(attempts.get(), WAIT) for _ in range(2)] == [1, 2]


async def test_dead_letter_keeps_the_routing_key_and_records_the_reason_and_queue(
    rig: Rig,
) -> None:
    dead = await rig.dead_letters()

    async def reject(delivery: Delivery) -> Settlement:
        return Settlement(Outcome.DEAD_LETTER, "poison pill")

    await rig.subscribe(rig.queue("poison"), ["job.#"], reject)
    await rig.publish("job.cpu.agent-1", b"bad", correlation_id="c-9")

    letter = await dead.next()
    assert letter.body == b"bad"
    assert (letter.exchange, letter.routing_key) == (rig.topology.dlx, "job.cpu.agent-1")
    assert letter.headers[REASON_HEADER] == "poison pill"
    # The queue that refused it: a replay goes back there alone.
    assert letter.headers[DEAD_LETTERED_FROM_HEADER] == rig.queue("poison")
    assert letter.correlation_id == "c-9"


async def test_prefetch_bounds_the_deliveries_being_handled_at_once(rig: Rig) -> None:
    queue = rig.queue("prefetch")
    release = asyncio.Event()
    started: asyncio.Queue[Delivery] = asyncio.Queue()
    finished: asyncio.Queue[Delivery] = asyncio.Queue()
    in_flight = peak = 0

    async def slow(delivery: Delivery) -> Settlement:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        started.put_nowait(delivery)
        await release.wait()
        in_flight -= 1
        finished.put_nowait(delivery)
        return ACK

    await rig.subscribe(queue, ["job.#"], slow, prefetch=2)
    for n in range(6):
        await rig.publish("job.cpu", str(n).encode())
    first_two = [await asyncio.wait_for(started.get(), WAIT) for _ in range(2)]

    # Both are handled concurrently, and the other four wait in the queue, not in the client.
    assert [d.body for d in first_two] == [b"0", b"1"]
    assert await rig.broker.queue_depth(queue) == 4

    release.set()
    done = [await asyncio.wait_for(finished.get(), WAIT) for _ in range(6)]
    assert sorted(d.body for d in done) == [str(n).encode() for n in range(6)]
    assert peak == 2


async def test_cancelled_subscription_hands_its_unsettled_message_to_the_next_consumer(
    rig: Rig,
) -> None:
    queue = rig.queue("handover")
    got_it = asyncio.Event()

    async def never_settles(delivery: Delivery) -> Settlement:
        got_it.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    first = await rig.subscribe(queue, ["job.#"], never_settles)
    await rig.publish("job.cpu", b"precious")
    await asyncio.wait_for(got_it.wait(), WAIT)
    await first.cancel()

    recorder = Recorder()
    await rig.subscribe(queue, ["job.#"], recorder)
    delivery = await recorder.next()
    assert (delivery.body, delivery.routing_key) == (b"precious", "job.cpu")


async def assert_drained(rig: Rig, queue: str) -> None:
    """Nothing left in ``queue`` for a new consumer: its first delivery is a new message."""
    assert await rig.broker.queue_depth(queue) == 0
    recorder = Recorder()
    await rig.subscribe(queue, ["job.#"], recorder)
    await rig.publish("job.cpu", b"sentinel")
    assert (await recorder.next()).body == b"sentinel"


async def test_deliveries_settled_out_of_order_are_all_acknowledged(rig: Rig) -> None:
    queue = rig.queue("out-of-order")
    await (await rig.subscribe(queue, ["job.#"], Recorder())).cancel()  # declares it
    count = 200
    for n in range(count):
        await rig.publish("job.cpu", str(n).encode())
    done = [asyncio.Event() for _ in range(count)]
    tasks: list[asyncio.Task[object]] = []
    seen: list[int] = []

    async def reverse_in_tens(delivery: Delivery) -> Settlement:
        task = asyncio.current_task()
        assert task is not None
        tasks.append(task)
        n = int(delivery.body)
        seen.append(n)
        if n % 10 != 9:  # each group of ten completes from its last message to its first
            await done[n + 1].wait()
        done[n].set()
        return ACK

    subscription = await rig.subscribe(queue, ["job.#"], reverse_in_tens, prefetch=50)
    # Only 50 at a time are delivered until earlier ones are acked: all 200 need the acks.
    async with asyncio.timeout(WAIT):
        for event in done:
            await event.wait()
    await handled(tasks)
    await subscription.cancel()

    assert sorted(seen) == list(range(count))
    await assert_drained(rig, queue)


async def test_a_message_acked_before_an_earlier_one_stays_acked_when_cancelled(rig: Rig) -> None:
    queue = rig.queue("ack-ahead")
    await (await rig.subscribe(queue, ["job.#"], Recorder())).cancel()  # declares it
    await rig.publish("job.cpu", b"1")
    await rig.publish("job.cpu", b"2")
    holder = Holder({b"1": asyncio.Event()})  # never set: 1 is still being handled
    first = await rig.subscribe(queue, ["job.#"], holder, prefetch=2)
    await holder.until(b"2")
    await holder.handled(b"2")
    await first.cancel()

    recorder = Recorder()
    await rig.subscribe(queue, ["job.#"], recorder)
    await rig.publish("job.cpu", b"3")
    assert [d.body for d in await recorder.take(2)] == [b"1", b"3"]


async def test_request_reply_through_a_reply_queue(rig: Rig) -> None:
    replies = Recorder()
    reply_queue = await rig.broker.declare_reply_queue(replies)

    async def answer(delivery: Delivery) -> Settlement:
        assert delivery.reply_to is not None
        await rig.broker.publish(
            "",
            delivery.reply_to,
            OutgoingMessage(
                body=b"pong:" + delivery.body,
                message_id=uuid.uuid4().hex,
                correlation_id=delivery.correlation_id,
            ),
        )
        return ACK

    await rig.subscribe(rig.queue("rpc"), ["rpc.svc.ping"], answer, exchange=rig.topology.jobs)
    await rig.publish(
        "rpc.svc.ping",
        b"ping",
        exchange=rig.topology.jobs,
        correlation_id="r-1",
        reply_to=reply_queue,
    )

    reply = await replies.next()
    assert (reply.body, reply.correlation_id) == (b"pong:ping", "r-1")


# The bus on top of each adapter


class SpanSink(SpanProcessor):
    """Keeps ended spans and lets a test wait for them."""

    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []
        self._ended: asyncio.Queue[ReadableSpan] = asyncio.Queue()

    def on_end(self, span: ReadableSpan) -> None:
        self.spans.append(span)
        self._ended.put_nowait(span)

    async def wait_for(self, count: int, kind: SpanKind) -> list[ReadableSpan]:
        async with asyncio.timeout(WAIT):
            while len(found := [s for s in self.spans if s.kind is kind]) < count:
                await self._ended.get()
        return found


@pytest.fixture
def spans() -> SpanSink:
    return SpanSink()


@pytest.fixture
async def bus_for(rig: Rig, spans: SpanSink) -> AsyncIterator[Callable[[str], Bus]]:
    telemetry = Telemetry.create(Settings(), "test", extra_processor=spans)
    started: list[Bus] = []

    def make(service: str) -> Bus:
        bus = Bus(
            rig.broker, topology=rig.topology, telemetry=telemetry, service=service, max_attempts=3
        )
        started.append(bus)
        return bus

    yield make
    for bus in started:
        await bus.stop()
    telemetry.shutdown()


def envelope(type_: str, **payload: object) -> Envelope:
    return Envelope(type=type_, stream_id="test-1", correlation_id=uuid.uuid4(), payload=payload)


async def test_bus_names_the_stream_in_a_header(rig: Rig, bus_for: Callable[[str], Bus]) -> None:
    recorder = Recorder()
    await rig.subscribe(rig.queue("streams"), ["#"], recorder)

    await bus_for("producer").publish(envelope("thing.happened"))

    assert (await recorder.next()).headers[STREAM_HEADER] == "test-1"


async def test_bus_dead_letters_unreadable_messages_and_goes_on(
    rig: Rig, bus_for: Callable[[str], Bus]
) -> None:
    bus = bus_for("consumer")
    await bus.start()
    dead = await rig.dead_letters()
    handled: asyncio.Queue[Envelope] = asyncio.Queue()

    async def handler(message: Envelope) -> None:
        handled.put_nowait(message)

    await bus.subscribe(rig.queue("bus"), [Binding(rig.topology.events, "test.#")], handler)
    await rig.publish("test.garbage", b"not json at all")
    await rig.publish("test.incomplete", b'{"type": "test.incomplete"}')
    good = await bus.publish(envelope("test.good", n=1))

    assert (await asyncio.wait_for(handled.get(), WAIT)).event_id == good.event_id
    letters = await dead.take(2)
    assert [d.routing_key for d in letters] == ["test.garbage", "test.incomplete"]
    assert "not JSON" in str(letters[0].headers[REASON_HEADER])
    assert "InvalidMessage" in str(letters[1].headers[REASON_HEADER])
    assert handled.empty()


async def test_bus_retries_a_failing_handler_until_it_succeeds(
    rig: Rig, bus_for: Callable[[str], Bus], spans: SpanSink
) -> None:
    bus = bus_for("consumer")
    await bus.start()
    calls = 0

    async def flaky(message: Envelope) -> None:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise RuntimeError("a bug that went away")

    await bus.subscribe(rig.queue("bus"), [Binding(rig.topology.events, "test.#")], flaky)
    await bus.publish(envelope("test.flaky"))

    processed = await spans.wait_for(3, SpanKind.CONSUMER)
    # The attempt is recorded on retries; a span without it is the first delivery.
    attempts = [
        s.attributes.get("messaging.rabbitmq.delivery_attempt", 1)
        for s in processed
        if s.attributes
    ]
    assert attempts == [1, 2, 3]
    assert [s.status.is_ok for s in processed] == [False, False, True]


async def test_bus_dead_letters_after_exactly_max_attempts(
    rig: Rig, bus_for: Callable[[str], Bus]
) -> None:
    bus = bus_for("consumer")
    await bus.start()
    dead = await rig.dead_letters()
    calls = 0

    async def broken(message: Envelope) -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("a bug that stays")

    await bus.subscribe(rig.queue("bus"), [Binding(rig.topology.events, "test.#")], broken)
    await bus.publish(envelope("test.doomed"))

    letter = await dead.next()
    assert letter.routing_key == "test.doomed"
    assert "failed 3 times" in str(letter.headers[REASON_HEADER])
    assert calls == 3


async def test_requeue_puts_a_message_back_in_its_place_unsettled_and_uncounted(
    rig: Rig,
) -> None:
    # Handed back while another waits behind it: it comes again first (its place, not the
    # tail, unlike RETRY), flagged redelivered, at the same attempt; it is not dead-lettered.
    dead = await rig.dead_letters()
    seen: list[Delivery] = []
    arrived: asyncio.Queue[Delivery] = asyncio.Queue()

    async def hand_back_once(delivery: Delivery) -> Settlement:
        seen.append(delivery)
        arrived.put_nowait(delivery)
        if delivery.body == b"first" and not delivery.redelivered:
            return Settlement(Outcome.REQUEUE, "database down")
        return ACK

    queue = rig.queue("requeue")
    await (await rig.subscribe(queue, ["job.#"], Recorder())).cancel()  # declares the queue
    await rig.publish("job.cpu", b"first")
    await rig.publish("job.cpu", b"second")
    await rig.subscribe(queue, ["job.#"], hand_back_once, prefetch=1)
    for _ in range(3):
        await asyncio.wait_for(arrived.get(), WAIT)

    assert [(d.body, d.redelivered, d.attempt) for d in seen] == [
        (b"first", False, 1),
        (b"first", True, 1),
        (b"second", False, 1),
    ]
    await rig.publish("job.canary", b"canary")
    assert dead.deliveries == []


def paused_bus(rig: Rig, spans: SpanSink, service: str = "consumer") -> Bus:
    return Bus(
        rig.broker,
        topology=rig.topology,
        telemetry=Telemetry.create(Settings(), "test", extra_processor=spans),
        service=service,
        max_attempts=3,
        pause_initial_s=0.02,
        pause_cap_s=0.2,
    )


@pytest.mark.parametrize("error", [StoreUnavailable, BrokerUnavailable, TransientError])
async def test_bus_pauses_on_an_unavailable_dependency_and_resumes_in_order(
    rig: Rig, spans: SpanSink, error: type[TransientError]
) -> None:
    # The "database" is down for a while: the messages are neither dead-lettered nor counted
    # as attempts, the subscription shows as paused, and once the database is back every
    # message is handled once, in publication order, none skipped.
    bus = paused_bus(rig, spans)
    await bus.start()
    dead = await rig.dead_letters()
    down = True
    failures = 0
    stored: list[int] = []
    attempts: list[int] = []
    failed = asyncio.Event()

    async def store(message: Envelope) -> None:
        nonlocal failures
        attempts.append(current_delivery().attempt)
        if down:
            failures += 1
            if failures >= 8:
                failed.set()
            raise error("the database is not answering")
        stored.append(int(str(message.payload["n"])))

    queue = rig.queue("paused")
    try:
        await bus.subscribe(queue, [Binding(rig.topology.events, "test.#")], store, prefetch=4)
        for n in range(10):
            await bus.publish(envelope("test.stored", n=n))
        await asyncio.wait_for(failed.wait(), WAIT)  # several probes failed meanwhile
        assert queue in bus.paused
        assert f"consumer:{queue}" in paused_consumers(rig.broker)
        assert stored == []
        down = False
        async with asyncio.timeout(WAIT):
            while len(stored) < 10:
                await asyncio.sleep(0.01)
        assert stored == list(range(10))
        assert set(attempts) == {1}
        assert bus.paused == {}
        # A message that cannot be read is dead-lettered: once it arrives there, anything the
        # outage had dead-lettered would be ahead of it (no order otherwise tells "none").
        await rig.publish("test.canary", b"{}")
        letter = await dead.next()
        assert letter.routing_key == "test.canary"
    finally:
        await bus.stop()


async def test_bus_hands_held_messages_back_to_the_next_consumer_when_it_stops(
    rig: Rig, spans: SpanSink
) -> None:
    # A service stopped while paused loses nothing: its held messages go back to the queue.
    first = paused_bus(rig, spans, "first")
    await first.start()
    tried = asyncio.Event()

    async def unavailable(message: Envelope) -> None:
        tried.set()
        raise StoreUnavailable("down")

    got: asyncio.Queue[int] = asyncio.Queue()

    async def available(message: Envelope) -> None:
        got.put_nowait(int(str(message.payload["n"])))

    queue = rig.queue("handover")
    await first.subscribe(queue, [Binding(rig.topology.events, "test.#")], unavailable)
    for n in range(3):
        await first.publish(envelope("test.kept", n=n))
    await asyncio.wait_for(tried.wait(), WAIT)
    await first.stop()

    second = paused_bus(rig, spans, "second")
    await second.start()
    try:
        await second.subscribe(queue, [Binding(rig.topology.events, "test.#")], available)
        assert [await asyncio.wait_for(got.get(), WAIT) for _ in range(3)] == [0, 1, 2]
    finally:
        await second.stop()


async def test_bus_counts_a_job_whose_consumer_died_and_gives_up_after_max_attempts(
    rig: Rig, bus_for: Callable[[str], Bus]
) -> None:
    # Each "worker" takes the job and dies with it unsettled (its subscription goes away, as
    # a killed process's channel does); the next one gets it as the next attempt, and once
    # every attempt was interrupted the job is dead-lettered and its owner told why.
    dead = await rig.dead_letters()
    attempts: list[int] = []
    taken = asyncio.Event()
    gave_up: asyncio.Queue[str] = asyncio.Queue()

    async def dies_with_it(message: Envelope) -> None:
        attempts.append(current_delivery().attempt)
        taken.set()
        await asyncio.Event().wait()

    async def told(message: Envelope, reason: str) -> None:
        gave_up.put_nowait(reason)

    queue = rig.queue("jobs")
    publisher = bus_for("publisher")
    for worker in range(1, 4):
        bus = bus_for(f"worker-{worker}")
        await bus.start()
        taken.clear()
        subscription = await bus.subscribe(
            queue,
            [Binding(rig.topology.events, "test.#")],
            dies_with_it,
            on_dead_letter=told,
            count_redeliveries=True,
        )
        if worker == 1:  # once the queue exists
            await publisher.publish(envelope("test.job"))
        await asyncio.wait_for(taken.wait(), WAIT)
        await subscription.cancel()
    last = bus_for("worker-4")
    await last.start()
    await last.subscribe(
        queue,
        [Binding(rig.topology.events, "test.#")],
        dies_with_it,
        on_dead_letter=told,
        count_redeliveries=True,
    )
    reason = await asyncio.wait_for(gave_up.get(), WAIT)
    assert "every one of its 3 attempts was interrupted" in reason
    letter = await dead.next()
    assert letter.routing_key == "test.job"
    assert attempts == [1, 2, 3]


async def test_bus_dead_letters_an_invalid_message_at_once(
    rig: Rig, bus_for: Callable[[str], Bus]
) -> None:
    bus = bus_for("consumer")
    await bus.start()
    dead = await rig.dead_letters()
    calls = 0

    async def strict(message: Envelope) -> None:
        nonlocal calls
        calls += 1
        raise InvalidMessage("field 'model' is missing")

    await bus.subscribe(rig.queue("bus"), [Binding(rig.topology.events, "test.#")], strict)
    await bus.publish(envelope("test.invalid"))

    letter = await dead.next()
    assert "field 'model' is missing" in str(letter.headers[REASON_HEADER])
    assert calls == 1


async def test_bus_request_gets_the_handlers_reply(rig: Rig, bus_for: Callable[[str], Bus]) -> None:
    server, client = bus_for("server"), bus_for("client")
    await server.start()
    await client.start()

    async def echo(request: Envelope) -> Envelope:
        return Envelope(
            type="test.pong",
            stream_id=request.stream_id,
            correlation_id=request.correlation_id,
            causation_id=request.event_id,
            payload={"echo": request.payload["n"]},
        )

    await server.subscribe(rig.queue("rpc"), [Binding(rig.topology.jobs, "rpc.test.ping")], echo)
    request = envelope("test.ping", n=42)
    reply = await client.request("rpc.test.ping", request, timeout=WAIT)

    assert reply.payload == {"echo": 42}
    assert reply.causation_id == request.event_id


async def test_bus_consumer_continues_the_publishers_trace(
    rig: Rig, bus_for: Callable[[str], Bus], spans: SpanSink
) -> None:
    producer, consumer = bus_for("producer"), bus_for("consumer")
    await producer.start()
    await consumer.start()
    seen: asyncio.Queue[int] = asyncio.Queue()

    async def handler(message: Envelope) -> None:
        seen.put_nowait(trace.get_current_span().get_span_context().trace_id)

    await consumer.subscribe(rig.queue("traced"), [Binding(rig.topology.events, "test.#")], handler)
    await producer.publish(envelope("test.traced"))

    handler_trace = await asyncio.wait_for(seen.get(), WAIT)
    [published] = await spans.wait_for(1, SpanKind.PRODUCER)
    [processed] = await spans.wait_for(1, SpanKind.CONSUMER)
    assert published.context is not None
    assert processed.context is not None
    assert handler_trace == processed.context.trace_id == published.context.trace_id
    assert processed.parent is not None
    assert processed.parent.span_id == published.context.span_id


# RabbitMQ only


async def test_rabbitmq_unreachable_broker_is_reported_as_unavailable() -> None:
    broker = AmqpBroker("amqp://guest:secret@127.0.0.1:1/", timeout=5)
    with pytest.raises(BrokerUnavailable, match=r"127\.0\.0\.1") as raised:
        await broker.connect()
    assert "secret" not in str(raised.value)
    assert not broker.is_connected


async def rabbitmqctl(*args: str) -> str:
    process = await asyncio.create_subprocess_exec(
        "rabbitmqctl", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return out.decode()


async def connection_pid(name: str) -> str:
    """The Erlang pid of the connection whose client-provided name is ``name``."""
    listing = await rabbitmqctl(
        "list_connections", "-q", "--no-table-headers", "pid", "client_properties"
    )
    [pid] = [
        line.split("\t", 1)[0]
        for line in listing.splitlines()
        if f'{{"connection_name","{name}"}}' in line
    ]
    return pid


@pytest.mark.rabbitmq
async def test_rabbitmq_connection_recovers_after_the_broker_drops_it(
    namespace: str, rabbitmq_url: str
) -> None:
    async with open_rig("rabbitmq", rabbitmq_url, namespace) as rig:
        assert isinstance(rig.broker, AmqpBroker)
        before = Recorder()
        await rig.subscribe(rig.queue("survivor"), ["job.#"], before)
        await rig.publish("job.before", b"before")
        assert (await before.next()).body == b"before"
        old_pid = await connection_pid(rig.broker.connection_name)

        await rabbitmqctl("close_connection", old_pid, "contract test: simulated outage")

        # A publish may fail while the client notices the loss; retry until one is confirmed.
        async with asyncio.timeout(WAIT):
            while True:
                try:
                    await rig.publish("job.after", b"after")
                    break
                except BrokerUnavailable:
                    await asyncio.sleep(0.05)
        assert rig.broker.is_connected
        assert await connection_pid(rig.broker.connection_name) != old_pid

        # The subscription made before the outage was restored, and new ones work.
        assert (await before.next()).body == b"after"
        fresh = Recorder()
        await rig.subscribe(rig.queue("fresh"), ["job.#"], fresh)
        await rig.publish("job.fresh", b"fresh")
        assert (await fresh.next()).body == b"fresh"


@pytest.mark.rabbitmq
async def test_rabbitmq_publishing_survives_an_exchange_deleted_behind_its_back(
    namespace: str, rabbitmq_url: str
) -> None:
    async with open_rig("rabbitmq", rabbitmq_url, namespace) as rig:
        await rig.publish("job.cpu")  # the exchange is now known to exist
        connection = await aio_pika.connect(rabbitmq_url)
        async with connection:
            await (await connection.channel()).exchange_delete(rig.topology.jobs)

        # The publish channel dies with a 404; the adapter reports it and opens a new one.
        with pytest.raises(ConfigurationError, match=rig.topology.jobs):
            await rig.publish("job.cpu", exchange=rig.topology.jobs)
        await rig.broker.declare_exchanges(
            [rig.topology.events, rig.topology.jobs],
            dead_letter_exchange=rig.topology.dlx,
            dead_letter_queue=rig.topology.dead_letters,
        )
        recorder = Recorder()
        await rig.subscribe(rig.queue("jobs"), ["job.#"], recorder, exchange=rig.topology.jobs)
        await rig.publish("job.cpu", b"again", exchange=rig.topology.jobs)
        assert (await recorder.next()).body == b"again"


@pytest.mark.rabbitmq
async def test_rabbitmq_messages_are_persistent(namespace: str, rabbitmq_url: str) -> None:
    async with open_rig("rabbitmq", rabbitmq_url, namespace) as rig:
        queue = rig.queue("persistent")
        await (await rig.subscribe(queue, ["job.#"], Recorder())).cancel()
        await rig.publish("job.cpu", b"keep me")

        connection = await aio_pika.connect(rabbitmq_url)
        async with connection:
            channel = await connection.channel()
            message = await (await channel.get_queue(queue)).get(no_ack=True)
        assert message.body == b"keep me"
        assert message.delivery_mode == aio_pika.DeliveryMode.PERSISTENT


@pytest.mark.rabbitmq
async def test_rabbitmq_a_message_that_cannot_be_settled_is_not_lost(
    namespace: str, rabbitmq_url: str
) -> None:
    async with open_rig("rabbitmq", rabbitmq_url, namespace) as rig:
        deliveries: asyncio.Queue[Delivery] = asyncio.Queue()
        repaired = asyncio.Event()

        calls = 0

        async def reject(delivery: Delivery) -> Settlement:
            nonlocal calls
            calls += 1
            deliveries.put_nowait(delivery)
            if calls > 1:
                await repaired.wait()
            return Settlement(Outcome.DEAD_LETTER, "poison pill")

        queue = rig.queue("unsettled")
        await (await rig.subscribe(queue, ["job.#"], Recorder())).cancel()  # declares it
        await rig.publish("job.cpu", b"keep me")
        connection = await aio_pika.connect(rabbitmq_url)
        async with connection:
            await (await connection.channel()).exchange_delete(rig.topology.dlx)
        await rig.subscribe(queue, ["job.#"], reject)

        # Dead-lettering fails while the dead-letter exchange is gone: the message comes back.
        for _ in range(2):
            assert (await asyncio.wait_for(deliveries.get(), WAIT)).body == b"keep me"
        await rig.broker.declare_exchanges(
            [rig.topology.events, rig.topology.jobs],
            dead_letter_exchange=rig.topology.dlx,
            dead_letter_queue=rig.topology.dead_letters,
        )
        repaired.set()
        letter = await (await rig.dead_letters()).next()
        assert (letter.body, letter.headers[REASON_HEADER]) == (b"keep me", "poison pill")


async def test_typed_routes_bind_by_type_hand_each_handler_its_payload_and_refuse_the_rest(
    rig: Rig, bus_for: Callable[[str], Bus]
) -> None:
    bus = bus_for("consumer")
    await bus.start()
    dead = await rig.dead_letters()
    heard: asyncio.Queue[tuple[object, Envelope]] = asyncio.Queue()

    async def on_offline(event: AgentOffline, message: Envelope) -> None:
        heard.put_nowait((event, message))

    async def on_discover(event: AgentsDiscover, message: Envelope) -> None:
        heard.put_nowait((event, message))

    async def on_beat(event: AgentHeartbeat, message: Envelope) -> None:
        heard.put_nowait((event, message))

    routes = Routes(rig.topology.events).on(AgentOffline, on_offline)
    routes.on(AgentsDiscover, on_discover)
    # A call's key is its own: the same route, bound under that key on the jobs exchange.
    routes.on(AgentHeartbeat, on_beat, key="rpc.test.beat", exchange=rig.topology.jobs)
    assert routes.bindings == [
        Binding(rig.topology.events, "agent.offline"),
        Binding(rig.topology.events, "agent.discover"),
        Binding(rig.topology.jobs, "rpc.test.beat"),
    ]
    await bus.handle(rig.queue("typed"), routes)

    def wrapped(payload: AgentOffline | AgentsDiscover | AgentOnline) -> Envelope:
        return Envelope.wrap(payload, stream_id="test-1", correlation_id=uuid.uuid4())

    offline = await bus.publish(wrapped(AgentOffline(agent_id="a1", reason="stopped")))
    discover = await bus.publish(wrapped(AgentsDiscover(requested_by="test")))
    event, message = await asyncio.wait_for(heard.get(), WAIT)
    assert event == AgentOffline(agent_id="a1", reason="stopped")
    assert message.event_id == offline.event_id
    event, message = await asyncio.wait_for(heard.get(), WAIT)
    assert event == AgentsDiscover(requested_by="test")
    assert message.event_id == discover.event_id

    # Routed here by its key, but of a type no route names: refused, not misread.
    online = AgentOnline(
        agent_id="a2",
        host="h",
        framework="onnxruntime",
        framework_version="1",
        hardware="cpu",
        heartbeat_interval_s=1.0,
    )
    await bus.publish(wrapped(online), exchange=rig.topology.jobs, routing_key="rpc.test.beat")
    # A routed type whose payload does not fit its class: refused, naming the field.
    await bus.publish(envelope("agent.offline", agent_id="a3"))
    letters = {
        letter.routing_key: str(letter.headers[REASON_HEADER]) for letter in await dead.take(2)
    }
    unrouted = letters["rpc.test.beat"]
    assert "'agent.online' is not handled here" in unrouted
    assert "agent.discover, agent.heartbeat, agent.offline" in unrouted
    assert "invalid 'agent.offline' payload: reason" in letters["agent.offline"]
    assert heard.empty()


# Drained: everything caused so far has happened


async def test_drained_waits_for_what_consumers_were_given_and_what_they_published_in_turn(
    rig: Rig,
) -> None:
    second = Recorder()
    release = asyncio.Event()

    async def relay(delivery: Delivery) -> Settlement:
        await release.wait()
        await rig.publish("job.second", delivery.body)
        return ACK

    await rig.subscribe(rig.queue("second"), ["job.second"], second)
    await rig.subscribe(rig.queue("first"), ["job.first"], relay, prefetch=2)
    for n in range(3):
        await rig.publish("job.first", str(n).encode())
    waiting = asyncio.create_task(rig.broker.drained())
    await asyncio.sleep(0.2)  # several of drained()'s looks: the relay holds everything
    assert not waiting.done()
    release.set()
    await asyncio.wait_for(waiting, WAIT)
    # Nothing awaited after drained(): the relayed messages were all handled by then.
    assert sorted(d.body for d in second.deliveries) == [b"0", b"1", b"2"]


async def test_messages_nobody_consumes_do_not_hold_drained_up(rig: Rig) -> None:
    async def refuse(delivery: Delivery) -> Settlement:
        return Settlement(Outcome.DEAD_LETTER, "refused")

    await rig.subscribe(rig.queue("poisoned"), ["job.#"], refuse, prefetch=1)
    await rig.publish("job.poison", b"poison")
    # The dead letter waits in its queue, which nobody consumes here: that is quiet.
    await asyncio.wait_for(rig.broker.drained(), WAIT)
    assert await rig.broker.queue_depth(rig.topology.dead_letters) == 1


# --- batches: several events in one message ----------------------------------------------


def run_of(type_: str, count: int, *, stream: str = "test-1") -> list[Envelope]:
    correlation = uuid.uuid4()
    return [
        Envelope(type=type_, stream_id=stream, correlation_id=correlation, payload={"n": n})
        for n in range(count)
    ]


async def test_bus_sends_events_produced_together_as_one_message_per_run_of_one_type(
    rig: Rig, bus_for: Callable[[str], Bus]
) -> None:
    recorder = Recorder()
    await rig.subscribe(rig.queue("runs"), ["#"], recorder)
    x, y = run_of("test.x", 3), run_of("test.y", 1)

    sent = await bus_for("producer").publish_batch([x[0], x[1], y[0], x[2]])

    messages = await recorder.take(3)
    # Routed by type, so a subscriber to one type never gets another's events.
    assert [m.routing_key for m in messages] == ["test.x", "test.y", "test.x"]
    assert [e["event_id"] for e in orjson.loads(messages[0].body)] == [
        str(x[0].event_id),
        str(x[1].event_id),
    ]
    assert orjson.loads(messages[1].body)["event_id"] == str(y[0].event_id)  # one goes alone
    assert [e.event_id for e in sent] == [e.event_id for e in (x[0], x[1], y[0], x[2])]
    assert all(e.traceparent and e.producer == "producer" for e in sent)


async def test_a_batch_reaches_a_one_event_handler_event_by_event_in_order(
    rig: Rig, bus_for: Callable[[str], Bus]
) -> None:
    bus = bus_for("consumer")
    await bus.start()
    handled: list[Envelope] = []
    last = asyncio.Event()
    events = run_of("test.thing", 4)

    async def handler(message: Envelope) -> None:
        handled.append(message)
        if message.event_id == events[-1].event_id:
            last.set()

    await bus.subscribe(rig.queue("bus"), [Binding(rig.topology.events, "test.#")], handler)
    await bus_for("producer").publish_batch(events)

    await asyncio.wait_for(last.wait(), WAIT)
    assert [e.event_id for e in handled] == [e.event_id for e in events]


async def test_a_failing_event_of_a_batch_is_retried_alone_and_holds_back_no_other(
    rig: Rig, bus_for: Callable[[str], Bus]
) -> None:
    bus = bus_for("consumer")
    await bus.start()
    handled: asyncio.Queue[tuple[int, int]] = asyncio.Queue()
    events = run_of("test.thing", 3)

    async def flaky(message: Envelope) -> None:
        attempt = current_delivery().attempt
        handled.put_nowait((message.payload["n"], attempt))
        if message.payload["n"] == 1 and attempt == 1:
            raise RuntimeError("a bug that went away")

    await bus.subscribe(rig.queue("bus"), [Binding(rig.topology.events, "test.#")], flaky)
    await bus_for("producer").publish_batch(events)

    seen = [await asyncio.wait_for(handled.get(), WAIT) for _ in range(4)]
    # The failed one comes back alone, as its next attempt (at the queue's tail, so when it
    # runs beside the batch's rest is the broker's business); the others were handled once.
    assert seen[:2] == [(0, 1), (1, 1)]
    assert sorted(seen) == [(0, 1), (1, 1), (1, 2), (2, 1)]


async def test_a_bad_element_of_a_batch_is_dead_lettered_alone_naming_its_place(
    rig: Rig, bus_for: Callable[[str], Bus]
) -> None:
    bus = bus_for("consumer")
    await bus.start()
    dead = await rig.dead_letters()
    handled: asyncio.Queue[Envelope] = asyncio.Queue()

    async def handler(message: Envelope) -> None:
        handled.put_nowait(message)

    queue = rig.queue("bus")
    await bus.subscribe(queue, [Binding(rig.topology.events, "test.#")], handler)
    good = run_of("test.thing", 2)
    bad = {"type": "test.thing", "marker": "bad one"}
    body = orjson.dumps([good[0].model_dump(mode="json"), bad, good[1].model_dump(mode="json")])
    await rig.publish("test.thing", body)

    assert [(await asyncio.wait_for(handled.get(), WAIT)).event_id for _ in range(2)] == [
        e.event_id for e in good
    ]
    (letter,) = await dead.take(1)
    assert orjson.loads(letter.body) == bad
    assert letter.routing_key == "test.thing"
    assert str(letter.headers[REASON_HEADER]).startswith("InvalidMessage: batch element 1:")
    assert letter.headers[DEAD_LETTERED_FROM_HEADER] == queue
    assert handled.empty()


@pytest.mark.parametrize(
    ("body", "reason"),
    [(b"[]", "the batch is empty"), (b"[1, 2", "not JSON")],
)
async def test_a_batch_that_is_not_a_batch_is_dead_lettered_whole(
    rig: Rig, bus_for: Callable[[str], Bus], body: bytes, reason: str
) -> None:
    bus = bus_for("consumer")
    await bus.start()
    dead = await rig.dead_letters()

    async def handler(message: Envelope) -> None:
        raise AssertionError("nothing in it to handle")

    await bus.subscribe(rig.queue("bus"), [Binding(rig.topology.events, "test.#")], handler)
    await rig.publish("test.thing", body)

    (letter,) = await dead.take(1)
    assert letter.body == body
    assert reason in str(letter.headers[REASON_HEADER])


async def test_handling_together_gets_a_whole_batch_in_one_call_and_one_span(
    rig: Rig, bus_for: Callable[[str], Bus], spans: SpanSink
) -> None:
    bus = bus_for("recorder")
    await bus.start()
    dead = await rig.dead_letters()
    calls: asyncio.Queue[list[tuple[str, uuid.UUID]]] = asyncio.Queue()

    async def together(events: Sequence[TypedEnvelope[Payload]]) -> None:
        calls.put_nowait(
            [
                (e.payload.agent_id if isinstance(e.payload, AgentHeartbeat) else "?", e.event_id)
                for e in events
            ]
        )

    await bus.handle_together(
        rig.queue("together"), [Binding(rig.topology.events, "agent.#")], together
    )
    beats = [
        Envelope.wrap(
            AgentHeartbeat(agent_id=f"a{n}", busy=False),
            stream_id="agent-a",
            correlation_id=uuid.uuid4(),
        )
        for n in range(3)
    ]
    refused = beats[1].model_copy(update={"payload": {"agent_id": 7}})  # not a heartbeat's
    await bus_for("producer").publish_batch([beats[0], refused, beats[2]])
    await bus_for("producer").publish(beats[1])

    assert await asyncio.wait_for(calls.get(), WAIT) == [
        ("a0", beats[0].event_id),
        ("a2", beats[2].event_id),
    ]
    assert await asyncio.wait_for(calls.get(), WAIT) == [("a1", beats[1].event_id)]
    (letter,) = await dead.take(1)
    assert orjson.loads(letter.body)["event_id"] == str(refused.event_id)
    assert "batch element 1" not in str(letter.headers[REASON_HEADER])  # readable, refused
    assert "agent_id" in str(letter.headers[REASON_HEADER])
    processed = await spans.wait_for(2, SpanKind.CONSUMER)
    assert [(s.attributes or {}).get("messaging.batch.message_count", 1) for s in processed] == [
        2,
        1,
    ]
