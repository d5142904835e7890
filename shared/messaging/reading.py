"""Reading what a delivery carries: its size checked before it is parsed, then one envelope,
a batch of them, or each event of a batch with those that do not read set apart."""

from __future__ import annotations

from shared.errors import InvalidMessage, MessageTooLarge
from shared.messages import (
    Envelope,
    Payload,
    TypedEnvelope,
    Unreadable,
    decode,
    decode_batch,
    encode,
    is_batch,
)
from shared.messaging.broker import Delivery, Settlement
from shared.messaging.policy import settlement_for

__all__ = ["Refused", "check_size", "read_batch", "read_each", "read_one"]

# One event of a batch that does not read: its JSON, its envelope where that much reads, and
# how it is settled (alone, once the rest of its batch is done with).
Refused = tuple[bytes, Envelope | None, Settlement]


def check_size(body: bytes, max_bytes: int) -> None:
    # Measured before parsing: a message far over the bound costs no memory beyond itself.
    if len(body) > max_bytes:
        raise MessageTooLarge(
            f"the message is {len(body)} bytes, over the {max_bytes} this consumer reads "
            "(DLSCOPE_MAX_MESSAGE_BYTES)"
        )


def read_one(body: bytes, max_bytes: int) -> Envelope:
    check_size(body, max_bytes)
    return decode(body)


def read_batch(body: bytes, max_bytes: int) -> list[Envelope | Unreadable]:
    check_size(body, max_bytes)
    return decode_batch(body)


def read_each(delivery: Delivery) -> tuple[list[TypedEnvelope[Payload]], list[Refused]]:
    """A delivery's events read one by one: those that read, and those that do not. A single
    event that does not read is an ``InvalidMessage``, as is a batch that is not one."""
    batched = is_batch(delivery.body)
    items = decode_batch(delivery.body) if batched else [decode(delivery.body)]
    events: list[TypedEnvelope[Payload]] = []
    refused: list[Refused] = []
    for item in items:
        try:
            if isinstance(item, Unreadable):
                raise item.error
            events.append(item.read())
        except InvalidMessage as exc:
            if not batched:
                raise
            envelope = None if isinstance(item, Unreadable) else item
            body = item.body if isinstance(item, Unreadable) else encode(item)
            settlement = settlement_for(exc, attempt=delivery.attempt, max_attempts=1)
            refused.append((body, envelope, settlement))
    return events, refused
