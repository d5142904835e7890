"""What the load shapes of requests (``streams``, ``paced``) issue and get back.

A request is one call that may take many steps (a whole generation) and may fail: a served
model's request ends with a kind of failure and its cause rather than raising. Before the
timed phase a failure fails the run at once, with the cause (the server cannot serve what the
scenario asks); during it, the request is kept apart, never a latency sample, and
``FAILURE_STREAK`` failures in a row end the phase (the server has stopped answering: what was
measured before is kept).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from shared.errors import PredictorError

__all__ = ["FAILURE_STREAK", "R", "Request", "every_request_failed", "untimed_ns"]

# This many timed requests failing one after another end the phase.
FAILURE_STREAK = 8


class Request(Protocol):
    """One request as it went (``time.perf_counter_ns``)."""

    @property
    def issued_ns(self) -> int: ...

    @property
    def ended_ns(self) -> int:
        """When its last part came (a generation's last token)."""
        ...

    @property
    def finished_ns(self) -> int:
        """When it was done with, failed or not (its answer's end read)."""
        ...

    @property
    def failure(self) -> str | None: ...

    @property
    def cause(self) -> str | None: ...


R = TypeVar("R", bound=Request)


def untimed_ns(request: Request) -> int:
    """A request before the timed phase (the cold one, the warm-up): its end-to-end time, or
    the run's failure when it failed, since the server cannot serve what the scenario asks."""
    if request.failure is not None:
        raise PredictorError(
            f"a request before the timed phase failed ({request.failure}): {request.cause}"
        )
    return request.ended_ns - request.issued_ns


def every_request_failed(failed: Sequence[Request]) -> PredictorError:
    """The run's failure when no timed request succeeded, naming the first cause."""
    return PredictorError(
        f"every timed request failed ({len(failed)}); the first: "
        f"{failed[0].failure}: {failed[0].cause}"
    )
