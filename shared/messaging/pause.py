"""Pausing one subscription while a dependency it needs (database, broker, a service it asks)
is unavailable, without losing, skipping or reordering a message.

A delivery whose handler failed transiently is neither settled nor dead-lettered: it is
*held*, and so is every delivery that arrives after it (the broker's prefetch then stops the
flow: consumption is paused). After a capped, jittered backoff the earliest held delivery
runs its handler again as the probe. When the probe fails transiently again the backoff
doubles; when it gets through, the held deliveries are released one at a time in delivery
order, each starting its handler before the next is let go, so they reach the handler (and,
in the recorder, a batch) in the order the broker delivered them.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["PAUSE_CAP_S", "Backoff", "Pause", "when_available"]

T = TypeVar("T")

log = logging.getLogger(__name__)


# The longest wait between two probes of a dependency that is down. A probe is one connection
# attempt, cheap beside what a late resumption costs: with 30 s, a recorder resumed 23 s after
# PostgreSQL was back, every service's view of the system that much behind (issue 42).
PAUSE_CAP_S = 5.0


class Backoff:
    """Capped exponential backoff with jitter: ``initial``, doubling up to ``cap``, each wait
    drawn from [50 %, 100 %] of it, so paused consumers do not probe in lockstep."""

    def __init__(self, initial: float = 0.5, cap: float = PAUSE_CAP_S) -> None:
        self.initial = initial
        self.cap = cap
        self._current = initial

    def reset(self) -> None:
        self._current = self.initial

    def next(self) -> float:
        wait = self._current * random.uniform(0.5, 1.0)
        self._current = min(self._current * 2, self.cap)
        return wait


async def when_available(
    attempt: Callable[[], Awaitable[T]],
    *,
    unavailable: type[Exception] | tuple[type[Exception], ...],
    what: str,
    patience_s: float | None = None,
    cap: float = PAUSE_CAP_S,
) -> T:
    """``attempt()``, tried again after a capped, jittered backoff for as long as it raises
    ``unavailable`` (a dependency that is down: it is waited out, not turned into a failure);
    for ``patience_s`` at most, then its last error is raised; forever when None."""
    backoff = Backoff(initial=0.5, cap=cap)
    deadline = None if patience_s is None else time.monotonic() + patience_s
    while True:
        try:
            return await attempt()
        except unavailable as exc:
            if deadline is not None and time.monotonic() > deadline:
                raise
            wait = backoff.next()
            log.warning("%s: %s; trying again in %.1f s", what, exc, wait)
            await asyncio.sleep(wait)


class Pause:
    """The pause state of one subscription (``name`` is its queue)."""

    def __init__(
        self,
        name: str,
        *,
        backoff: Backoff | None = None,
        max_hold: float = 20 * 60.0,
        log_every: float = 30.0,
    ) -> None:
        self.name = name
        self.reason: str | None = None
        self.since: float | None = None
        # Past this a held delivery goes back to the broker (Outcome.REQUEUE) and is delivered
        # again, before RabbitMQ's consumer timeout (30 min) closes a channel holding it.
        self.max_hold = max_hold
        self._backoff = backoff or Backoff()
        self._log_every = log_every
        self._logged_at = 0.0
        self._tickets = itertools.count()
        self._held: list[tuple[int, asyncio.Future[None]]] = []
        self._probe: int | None = None
        self._changed = asyncio.Event()
        self._started = asyncio.Event()
        self._pump: asyncio.Task[None] | None = None

    @property
    def paused(self) -> bool:
        return self.reason is not None

    @property
    def blocking(self) -> bool:
        """A delivery arriving now must wait its turn: paused, or earlier ones still held."""
        return self.paused or bool(self._held) or self._pump is not None

    def ticket(self) -> int:
        """A delivery's place in the order (adapters start deliveries in delivery order)."""
        return next(self._tickets)

    def failed(self, reason: str) -> None:
        """A handler failed because a dependency is unavailable: pause (or stay paused)."""
        now = time.monotonic()
        if self.reason is None:
            self.since, self._logged_at = now, now
            self._backoff.reset()
            log.warning("pausing consumption of %r: %s", self.name, reason)
        elif now - self._logged_at >= self._log_every:
            self._logged_at = now
            log.warning(
                "consumption of %r still paused after %.0f s (%d held): %s",
                self.name,
                now - (self.since or now),
                len(self._held),
                reason,
            )
        self.reason = reason
        self._ensure_pump()
        self._changed.set()

    def succeeded(self) -> None:
        """A handler got through (or failed for a reason of its own): the dependency is back."""
        if self.reason is not None:
            log.info(
                "resuming consumption of %r after %.1f s; releasing %d held deliveries in order",
                self.name,
                time.monotonic() - (self.since or time.monotonic()),
                len(self._held),
            )
            self.reason = self.since = None
        self._changed.set()

    def finished(self, ticket: int) -> None:
        """The delivery ``ticket`` is done with the handler, whatever came of it."""
        if self._probe == ticket:
            self._probe = None
            self._changed.set()

    async def hold(self, ticket: int, *, timeout: float) -> bool:
        """Wait until it is ``ticket``'s turn to run the handler; False when ``timeout``
        passed first (the caller hands the delivery back to the broker)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._held, (ticket, future))
        self._ensure_pump()
        self._changed.set()
        try:
            async with asyncio.timeout(timeout):
                await future
            return True
        except TimeoutError:
            return False
        finally:
            self._started.set()

    # internals

    def _ensure_pump(self) -> None:
        if self._pump is None:
            self._pump = asyncio.create_task(self._run(), name=f"pause {self.name}")

    def _next_held(self) -> tuple[int, asyncio.Future[None]] | None:
        while self._held:
            ticket, future = heapq.heappop(self._held)
            if not future.done():  # not timed out or cancelled meanwhile
                return ticket, future
        return None

    async def _run(self) -> None:
        try:
            while self.paused or self._held or self._probe is not None:
                self._changed.clear()
                if self.paused:
                    if self._probe is None and self._held:
                        await asyncio.sleep(self._backoff.next())
                        if self.paused and self._probe is None and (item := self._next_held()):
                            self._probe = item[0]
                            item[1].set_result(None)
                            continue
                    await self._changed.wait()
                elif self._probe is not None:
                    await self._changed.wait()  # a probe still running: its outcome decides
                elif item := self._next_held():
                    self._started.clear()
                    item[1].set_result(None)
                    await self._started.wait()
        finally:
            self._pump = None
            # Cancelled (the subscription stopped): let whoever still waits go.
            for _, future in self._held:
                with contextlib.suppress(asyncio.InvalidStateError):
                    future.cancel()
            self._held.clear()

    async def close(self) -> None:
        if self._pump is not None:
            self._pump.cancel()
            await asyncio.gather(self._pump, return_exceptions=True)
