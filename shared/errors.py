"""dlscope's own exceptions.

Adapters translate library errors (aio-pika, asyncpg, SQLAlchemy, framework runtimes) into
these at the boundary with ``raise OurError(...) from exc``, so callers handle one hierarchy
and a user reads what went wrong and what to do about it.

    DlscopeError
    ├── ConfigurationError        settings or a command line that cannot work
    ├── InvalidMessage            a message that can never be processed: dead-lettered, not retried
    │   ├── MessageTooLarge       over DLSCOPE_MAX_MESSAGE_BYTES (refused on sending and receiving)
    │   ├── MessageUnreadable     what its consumers would refuse (text holding NUL): not sent
    │   └── StoreRefused          an event the store's columns cannot hold (a number too big)
    ├── TransientError            a dependency unavailable (broker, database, a timeout): the
    │   │                         message is kept and consumption pauses until it is back
    │   ├── BrokerUnavailable
    │   ├── StoreUnavailable
    │   └── RequestTimeout        no reply to a request/reply call in time
    ├── ManifestError             a manifest that does not validate (names file and field)
    ├── ArtifactError             a model file missing, failing its sha256 or its download
    ├── ProcessingError           data the declared pre/post-processing steps cannot handle
    ├── ModelNotFound             no manifest matches a name and version constraint
    ├── NoMatchingAgent           no worker offers the framework/hardware asked for
    └── PredictorError            the framework failed to load or run the model
"""

from __future__ import annotations

__all__ = [
    "ArtifactError",
    "BrokerUnavailable",
    "ConfigurationError",
    "DlscopeError",
    "InvalidMessage",
    "ManifestError",
    "MessageTooLarge",
    "MessageUnreadable",
    "ModelNotFound",
    "NoMatchingAgent",
    "PredictorError",
    "ProcessingError",
    "RequestTimeout",
    "StoreRefused",
    "StoreUnavailable",
    "TransientError",
]


class DlscopeError(Exception):
    """Base of every error dlscope raises on purpose."""


class ConfigurationError(DlscopeError):
    """Settings or arguments that cannot work together."""


class InvalidMessage(DlscopeError):
    """A message that is malformed or semantically impossible; retrying cannot help."""


class MessageTooLarge(InvalidMessage):
    """A message over the size a consumer accepts: refused before it is parsed."""


class MessageUnreadable(InvalidMessage):
    """A message its own consumers would refuse to read (text holding NUL, which no store
    keeps): refused before it is sent, so its producer can say why instead."""


class StoreRefused(InvalidMessage):
    """The event store refused what it was given as data it cannot hold (a value out of its
    column's range, text it cannot encode): storing it again can never succeed."""


class TransientError(DlscopeError):
    """A dependency is unavailable, not the message at fault: the message is neither counted
    as an attempt nor dead-lettered; its subscription pauses, with backoff, until it passes."""


class BrokerUnavailable(TransientError):
    """The message broker cannot be reached or refused an operation."""


class StoreUnavailable(TransientError):
    """The event store's database cannot be reached."""


class RequestTimeout(TransientError):
    """A request/reply call got no answer in time."""


class ManifestError(DlscopeError):
    """A manifest failed validation."""


class ArtifactError(DlscopeError):
    """A model artifact is missing, unreadable or fails its checksum."""


class ProcessingError(DlscopeError):
    """A sample or an output the steps cannot process (undecodable, too small, wrong shape)."""


class ModelNotFound(DlscopeError):
    """No registered manifest matches the requested name and version constraint."""


class NoMatchingAgent(DlscopeError):
    """No online worker offers what an evaluation asks for."""


class PredictorError(DlscopeError):
    """The framework could not load or run the model."""
