"""The in-process broker's drained(): the embedded mode's way to wait until everything a
message caused has happened (the contract suite covers the rest, against RabbitMQ too)."""

from __future__ import annotations

import asyncio

from shared.messaging import Binding, Delivery, MemoryBroker, Outcome, OutgoingMessage, Settlement


async def broker_with_queue() -> MemoryBroker:
    broker = MemoryBroker()
    await broker.connect()
    await broker.declare_exchanges(["ex"], dead_letter_exchange="dlx", dead_letter_queue="dead")
    return broker


def message(body: bytes) -> OutgoingMessage:
    return OutgoingMessage(body=body, message_id=body.decode())


async def test_drained_waits_for_consumers_to_finish_what_they_were_given() -> None:
    broker = await broker_with_queue()
    release = asyncio.Event()
    handled: list[bytes] = []

    async def slow(delivery: Delivery) -> Settlement:
        await release.wait()
        handled.append(delivery.body)
        return Settlement(Outcome.ACK)

    await broker.consume("q", [Binding("ex", "#")], slow, prefetch=4, dead_letter_exchange="dlx")
    await broker.publish("ex", "a", message(b"1"))
    await broker.publish("ex", "a", message(b"2"))
    waiting = asyncio.create_task(broker.drained())
    await asyncio.sleep(0)  # drained() is now waiting
    assert not waiting.done()
    release.set()
    await asyncio.wait_for(waiting, 5)
    assert handled == [b"1", b"2"]


async def test_messages_nobody_consumes_do_not_hold_drained_up() -> None:
    broker = await broker_with_queue()

    async def dead_letter(delivery: Delivery) -> Settlement:
        return Settlement(Outcome.DEAD_LETTER, "refused")

    await broker.consume(
        "q", [Binding("ex", "#")], dead_letter, prefetch=1, dead_letter_exchange="dlx"
    )
    await broker.publish("ex", "a", message(b"poison"))
    # The dead letter waits in its queue, which nobody consumes; that is quiet.
    await asyncio.wait_for(broker.drained(), 5)
    assert await broker.queue_depth("dead") == 1
