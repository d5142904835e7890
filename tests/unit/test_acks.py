"""Coalesced acknowledgements: what is settled together goes in one frame, and a multiple
acknowledgement never covers a delivery still in hand."""

from __future__ import annotations

import asyncio

from shared.messaging.acks import Acknowledgements


class Channel:
    """The acknowledgement frames written, as (tag, multiple)."""

    def __init__(self, *, fail: bool = False) -> None:
        self.frames: list[tuple[int, bool]] = []
        self.fail = fail


class Message:
    def __init__(self, channel: Channel, tag: int) -> None:
        self.channel = channel
        self.delivery_tag = tag

    async def ack(self, multiple: bool = False) -> None:
        await asyncio.sleep(0)  # a write to the socket
        if self.channel.fail:
            raise ConnectionError("channel closed")
        self.channel.frames.append((self.delivery_tag, multiple))


def delivered(acks: Acknowledgements, channel: Channel, count: int) -> list[Message]:
    messages = [Message(channel, tag) for tag in range(1, count + 1)]
    for message in messages:
        acks.delivered(message)
    return messages


async def test_deliveries_settled_together_are_acknowledged_in_one_frame() -> None:
    channel, acks = Channel(), Acknowledgements()
    messages = delivered(acks, channel, 40)
    await asyncio.gather(*(acks.ack(m) for m in messages))
    assert channel.frames == [(40, True)]


async def test_a_delivery_in_hand_is_never_covered_by_a_later_ones_acknowledgement() -> None:
    channel, acks = Channel(), Acknowledgements()
    first, second, third = delivered(acks, channel, 3)
    # The first is still in hand (its transaction has not committed): the others go alone.
    await asyncio.gather(acks.ack(second), acks.ack(third))
    assert sorted(channel.frames) == [(2, False), (3, False)]
    # Settled at last, it is acknowledged alone too: the two after it are no longer owed.
    await acks.ack(first)
    assert channel.frames[-1] == (1, True)  # "up to 1": nothing else
    assert len(channel.frames) == 3


async def test_a_requeued_delivery_does_not_hold_back_the_ones_around_it() -> None:
    channel, acks = Channel(), Acknowledgements()
    first, second, third = delivered(acks, channel, 3)
    # Requeued: its nack is written first, so the broker no longer counts it as outstanding.
    acks.settled(second)
    await asyncio.gather(acks.ack(first), acks.ack(third))
    assert channel.frames == [(3, True)]


async def test_later_deliveries_coalesce_again_once_the_old_one_is_settled() -> None:
    channel, acks = Channel(), Acknowledgements()
    messages = delivered(acks, channel, 6)
    await asyncio.gather(*(acks.ack(m) for m in messages[:3]))
    await asyncio.gather(*(acks.ack(m) for m in messages[3:]))
    assert channel.frames == [(3, True), (6, True)]


async def test_a_failed_write_fails_every_settlement_it_covered() -> None:
    channel, acks = Channel(fail=True), Acknowledgements()
    messages = delivered(acks, channel, 3)
    outcomes = await asyncio.gather(*(acks.ack(m) for m in messages), return_exceptions=True)
    assert all(isinstance(outcome, ConnectionError) for outcome in outcomes)


async def test_a_message_without_a_tag_is_acknowledged_as_it_is() -> None:
    channel, acks = Channel(), Acknowledgements()
    message = Message(channel, 0)
    message.delivery_tag = None  # type: ignore[assignment]
    await acks.ack(message)
    assert channel.frames == [(None, False)]
