"""Asking the scheduler whether a worker's attempt at a job still stands
(``shared.messages.attempts``): the one call a worker makes before it publishes what a job
came to, or runs a job delivered again."""

from __future__ import annotations

import logging

from shared.errors import BrokerUnavailable, DlscopeError
from shared.messages import ATTEMPT_CALL, AttemptStanding, CheckAttempt, Envelope, rpc_key
from shared.messaging import Bus
from shared.messaging.pause import when_available

__all__ = ["no_longer_stands"]

log = logging.getLogger(__name__)


async def no_longer_stands(
    bus: Bus,
    cause: Envelope,
    check: CheckAttempt,
    *,
    producer: str,
    timeout_s: float,
    patience_s: float,
) -> str | None:
    """Why the scheduler says ``check``'s attempt no longer stands; None when it stands, or
    when no answer came within ``timeout_s`` (the analyzer and the read model still keep the
    evaluation's first outcome). A broker outage is waited out for ``patience_s``, as a
    publish is: the answer decides what is published."""
    call = Envelope.wrap(
        check,
        stream_id="scheduler",
        correlation_id=cause.correlation_id,
        causation_id=cause.event_id,
        producer=producer,
    )
    try:
        answer = await when_available(
            lambda: bus.ask(
                rpc_key("scheduler", ATTEMPT_CALL), call, AttemptStanding, timeout=timeout_s
            ),
            unavailable=BrokerUnavailable,
            what=f"{producer}: asking whether attempt {check.attempt} of "
            f"{check.evaluation_id} stands",
            patience_s=patience_s,
            cap=10.0,
        )
    except DlscopeError as exc:  # no answer in time, or one that makes no sense
        log.warning("%s: going on without the scheduler's word: %s", producer, exc)
        return None
    return None if answer.stands else answer.reason
