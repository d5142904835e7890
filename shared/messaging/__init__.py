"""Messaging: the broker port, its adapters, and the bus services use."""

from shared.messaging.broker import (
    STREAM_HEADER,
    Binding,
    Broker,
    Delivery,
    Outcome,
    OutgoingMessage,
    Settlement,
)
from shared.messaging.bus import Bus, Handler, current_delivery, paused_consumers
from shared.messaging.connect import create_broker
from shared.messaging.memory import MemoryBroker
from shared.messaging.routes import Routes, TypedHandler
from shared.messaging.topics import topic_matches

__all__ = [
    "STREAM_HEADER",
    "Binding",
    "Broker",
    "Bus",
    "Delivery",
    "Handler",
    "MemoryBroker",
    "Outcome",
    "OutgoingMessage",
    "Routes",
    "Settlement",
    "TypedHandler",
    "create_broker",
    "current_delivery",
    "paused_consumers",
    "topic_matches",
]
