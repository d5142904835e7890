"""The evaluations the scheduler waits on, each with the task that fails it if no outcome
comes in time. By correlation id: the request each deadline fails (a new attempt re-arms it
with the same request)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from shared.messages import Envelope

__all__ = ["Deadlines"]


class _Deadline(NamedTuple):
    request: Envelope
    task: asyncio.Task[None]


class Deadlines:
    def __init__(self) -> None:
        self._armed: dict[uuid.UUID, _Deadline] = {}

    @property
    def watched(self) -> set[uuid.UUID]:
        return set(self._armed)

    def __contains__(self, correlation_id: uuid.UUID) -> bool:
        return correlation_id in self._armed

    def request(self, correlation_id: uuid.UUID) -> Envelope | None:
        """The request whose deadline is armed, if one is."""
        armed = self._armed.get(correlation_id)
        return None if armed is None else armed.request

    def arm(self, request: Envelope, after_s: float, expire: Callable[[], Awaitable[None]]) -> None:
        """Call ``expire`` in ``after_s`` unless disarmed first. A deadline armed before for
        the same request (a redelivered request scheduled again, a new attempt starting the
        clock again) must not outlive it: it is disarmed."""
        self.disarm(request.correlation_id)

        async def wait() -> None:
            await asyncio.sleep(max(0.0, after_s))
            self._armed.pop(request.correlation_id, None)
            await expire()

        self._armed[request.correlation_id] = _Deadline(request, asyncio.create_task(wait()))

    def disarm(self, correlation_id: uuid.UUID) -> None:
        armed = self._armed.pop(correlation_id, None)
        if armed is not None:
            armed.task.cancel()

    def close(self) -> None:
        for armed in self._armed.values():
            armed.task.cancel()
        self._armed.clear()
