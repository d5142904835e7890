"""The envelope every dlscope message travels in, and its (de)serialisation.

The ``event_id`` is the idempotency key: a consumer that sees the same id twice does the work
once. ``correlation_id`` ties together every message of one evaluation; ``causation_id`` names
the message that caused this one. The W3C ``traceparent`` lets one evaluation be one trace.
"""

from __future__ import annotations

import builtins
import functools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Generic, Self, TypeVar, Union

import orjson
from pydantic import BaseModel, Discriminator, Field, Tag, TypeAdapter, ValidationError

from shared.errors import InvalidMessage
from shared.inputs import BOUNDED, MAX_NAME, Count, unsafe_text

__all__ = [
    "MAX_BATCH_EVENTS",
    "Envelope",
    "EnvelopeFields",
    "Payload",
    "TypedEnvelope",
    "Unreadable",
    "decode",
    "decode_batch",
    "encode",
    "encode_batch",
    "is_batch",
    "payload_type",
    "read_typed",
]

# The most events one batch message may carry: a bound on what one delivery makes a
# consumer hold, beside the bound on its bytes.
MAX_BATCH_EVENTS = 10_000


class Payload(BaseModel):
    """Base of every typed message body. ``TYPE`` doubles as the event's routing key.

    Every string field is bounded (``shared.inputs``): a message from anyone on the broker is
    refused, naming the field, rather than carried into the store."""

    model_config = BOUNDED

    TYPE: ClassVar[str]
    SCHEMA: ClassVar[int] = 1

    _registry: ClassVar[dict[str, type[Payload]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "TYPE" in cls.__dict__:
            if cls.TYPE in Payload._registry:
                raise TypeError(f"two payload classes claim type {cls.TYPE!r}")
            Payload._registry[cls.TYPE] = cls


def payload_type(type_name: str) -> type[Payload]:
    try:
        return Payload._registry[type_name]
    except KeyError:
        known = ", ".join(sorted(Payload._registry))
        raise InvalidMessage(f"unknown message type {type_name!r}; known types: {known}") from None


P = TypeVar("P", bound=Payload)


class EnvelopeFields(BaseModel):
    """What every message carries beside its payload: an ``Envelope`` or a ``TypedEnvelope``."""

    model_config = BOUNDED

    event_id: uuid.UUID = Field(default_factory=uuid.uuid4)
    type: str = Field(max_length=MAX_NAME)
    schema_version: Count = 1
    stream_id: str = Field(min_length=1, max_length=MAX_NAME)
    occurred_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    correlation_id: uuid.UUID
    causation_id: uuid.UUID | None = None
    traceparent: str | None = None
    tracestate: str | None = None
    producer: str | None = None


class Envelope(EnvelopeFields):
    """Metadata shared by all messages, plus the payload as plain JSON."""

    payload: dict[str, Any]

    @classmethod
    def wrap(
        cls,
        payload: Payload,
        *,
        stream_id: str,
        correlation_id: uuid.UUID,
        causation_id: uuid.UUID | None = None,
        producer: str | None = None,
        event_id: uuid.UUID | None = None,
    ) -> Self:
        """``payload`` in a new envelope; ``event_id`` is fresh unless given (a handler that
        derives it from what it handles emits the same id when it runs twice)."""
        return cls(
            event_id=event_id or uuid.uuid4(),
            type=payload.TYPE,
            schema_version=payload.SCHEMA,
            stream_id=stream_id,
            correlation_id=correlation_id,
            causation_id=causation_id,
            producer=producer,
            payload=payload.model_dump(mode="json"),
        )

    def caused(
        self,
        payload: Payload,
        *,
        stream_id: str | None = None,
        producer: str,
        key: str | None = None,
    ) -> Envelope:
        """A new message caused by this one, in the same correlation (and by default stream).

        Its event id is derived from this message's id and the new type, so a handler that
        runs twice for one message (a redelivery after a crash) emits the same ids, and the
        event store keeps one copy. Where one message rightly causes an event of one type
        more than once, ``key`` names which (the id is derived from ``"<type>#<key>"``):
        a job delivered again after its worker died is a second attempt, not a duplicate,
        so a worker passes ``key=attempt_key(n)`` (``attempt-<n>`` after the first) and the store
        keeps every attempt's events, while a redelivery of one attempt's message still
        gives the same ids.
        """
        name = payload.TYPE if key is None else f"{payload.TYPE}#{key}"
        return Envelope(
            event_id=uuid.uuid5(self.event_id, name),
            type=payload.TYPE,
            schema_version=payload.SCHEMA,
            stream_id=stream_id or self.stream_id,
            correlation_id=self.correlation_id,
            causation_id=self.event_id,
            producer=producer,
            payload=payload.model_dump(mode="json"),
        )

    # ``builtins.type``: inside this class, ``type`` is the envelope's field.
    def open(self, expected: builtins.type[P]) -> P:
        """The payload as ``expected``; an ``InvalidMessage`` names what does not fit."""
        if self.type != expected.TYPE:
            raise InvalidMessage(f"expected a {expected.TYPE!r} message, got {self.type!r}")
        return _validate(expected, self.payload, self.type)

    def typed(self) -> Payload:
        """The payload as the class registered for this envelope's type."""
        return _validate(payload_type(self.type), self.payload, self.type)

    def read(self) -> TypedEnvelope[Payload]:
        """This envelope with its payload read as the class its type names (``typed``)."""
        payload = self.typed()
        fields = {name: getattr(self, name) for name in EnvelopeFields.model_fields}
        # Every field was checked when this envelope was: nothing to validate again.
        return TypedEnvelope[Payload].model_construct(**fields, payload=payload)


class TypedEnvelope(EnvelopeFields, Generic[P]):
    """An envelope whose payload was read as the class its type names, as a consumer that
    takes every type (the recorder) gets it: the envelope's fields, the payload checked."""

    payload: P


def read_typed(body: bytes) -> list[TypedEnvelope[Payload]] | None:
    """Every envelope of a message body (one, or a batch's), each payload read as the class
    its type names, in one pass; None unless all of them read so (``decode``/``decode_batch``
    and ``Envelope.typed`` then say which does not, and why).

    The same JSON parse and the same contracts as those, in one validation call: the
    handler gets one object per event. Not cheaper where it counts: with a backlog's events
    kept alive, making the objects costs what it costs either way (BENCHMARKS.md, issue 24)."""
    if b"\\u0000" in body:  # the NUL check walks the parsed text: the slow path has it
        return None
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    batched = isinstance(data, list)
    if batched and not 0 < len(data) <= MAX_BATCH_EVENTS:
        return None
    readers = _typed_readers(len(Payload._registry))
    try:
        if batched:
            return readers.batch.validate_python(data)
        return [readers.one.validate_python(data)]
    except ValidationError:
        return None


@dataclass(frozen=True, slots=True)
class _TypedReaders:
    one: TypeAdapter[TypedEnvelope[Payload]]
    batch: TypeAdapter[list[TypedEnvelope[Payload]]]


def _type_tag(value: Any) -> str | None:
    tag = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return tag if isinstance(tag, str) else None


@functools.cache
def _typed_readers(types: int) -> _TypedReaders:
    """Envelopes of every registered type, told apart by their ``type`` (``types``: how many
    are registered, so a payload class defined later gets a reader that knows it)."""
    del types
    members = tuple(
        Annotated[TypedEnvelope[cls], Tag(name)]  # type: ignore[valid-type]
        for name, cls in Payload._registry.items()
    )
    typed = Annotated[Union[members], Discriminator(_type_tag)]  # type: ignore[valid-type]  # noqa: UP007
    return _TypedReaders(one=TypeAdapter(typed), batch=TypeAdapter(list[typed]))


def _validate(cls: type[P], data: dict[str, Any], type_name: str) -> P:
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise InvalidMessage(f"invalid {type_name!r} payload: {_describe(exc)}") from exc


def _describe(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}" for err in exc.errors()
    )


def encode(envelope: Envelope) -> bytes:
    return orjson.dumps(envelope.model_dump(mode="json"))


def decode(body: bytes) -> Envelope:
    """Parse a message body; anything that is not a valid envelope is an ``InvalidMessage``."""
    data = _loads(body)
    if not isinstance(data, dict):
        raise InvalidMessage("message body must be a JSON object (the envelope)")
    return _envelope(data, escaped_nul=b"\\u0000" in body)


def encode_batch(envelopes: Sequence[Envelope]) -> bytes:
    """Several envelopes in one message body: a JSON array of them, in order."""
    return orjson.dumps([envelope.model_dump(mode="json") for envelope in envelopes])


def is_batch(body: bytes) -> bool:
    """Whether ``body`` is a batch (a JSON array) rather than one envelope (an object)."""
    return body.lstrip()[:1] == b"["


@dataclass(frozen=True, slots=True)
class Unreadable:
    """One element of a batch that is not a valid envelope: its JSON, and why."""

    body: bytes
    error: InvalidMessage


def decode_batch(body: bytes) -> list[Envelope | Unreadable]:
    """Parse a batch body into its envelopes, in order. An element that is not a valid
    envelope comes back as ``Unreadable`` in its place, so the good ones around it are not
    lost with it; a body that is not a non-empty array of at most ``MAX_BATCH_EVENTS`` is
    an ``InvalidMessage`` as a whole."""
    data = _loads(body)
    if not isinstance(data, list):
        raise InvalidMessage("a batch body must be a JSON array of envelopes")
    if not data:
        raise InvalidMessage("the batch is empty: it must hold at least one envelope")
    if len(data) > MAX_BATCH_EVENTS:
        raise InvalidMessage(
            f"the batch holds {len(data)} envelopes, over the {MAX_BATCH_EVENTS} one may hold"
        )
    escaped_nul = b"\\u0000" in body
    decoded: list[Envelope | Unreadable] = []
    for index, item in enumerate(data):
        try:
            if not isinstance(item, dict):
                raise InvalidMessage("it is not a JSON object (an envelope)")
            decoded.append(_envelope(item, escaped_nul=escaped_nul))
        except InvalidMessage as exc:
            error = InvalidMessage(f"batch element {index}: {exc}")
            decoded.append(Unreadable(orjson.dumps(item), error))
    return decoded


def _loads(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        # orjson also refuses what is not UTF-8 and unpaired surrogates, and says so.
        raise InvalidMessage(f"message body is not JSON: {exc}") from exc


def _envelope(data: dict[str, Any], *, escaped_nul: bool) -> Envelope:
    # A NUL can only arrive escaped; look for the escape before walking the whole message.
    if escaped_nul and (problem := unsafe_text(data)) is not None:
        where = ".".join(str(p) for p in problem[0])
        raise InvalidMessage(f"invalid envelope: {where}: the text holds {problem[1]}")
    try:
        return Envelope.model_validate(data)
    except ValidationError as exc:
        raise InvalidMessage(f"invalid envelope: {_describe(exc)}") from exc
