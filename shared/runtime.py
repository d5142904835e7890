"""How services run: one runtime (settings, telemetry, broker) and a lifespan around them.

A service is anything with ``start()`` and ``stop()``; ``stop`` undoes ``start`` and services
stop in the reverse of their start order. The same code runs one service per process
(``dlscope serve <name>``) and every service in one process (``dlscope run`` / ``up``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from opentelemetry.sdk.trace import SpanProcessor

from shared.config import Settings
from shared.errors import DlscopeError
from shared.messages import Topology
from shared.messaging import Broker, Bus, create_broker
from shared.telemetry import Telemetry

__all__ = ["Runtime", "Service", "run_process", "running", "stopping"]

log = logging.getLogger(__name__)


class Service(Protocol):
    name: str

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


@dataclass
class Runtime:
    settings: Settings
    telemetry: Telemetry
    broker: Broker

    @classmethod
    def create(
        cls, settings: Settings, telemetry_name: str, *, spans: SpanProcessor | None = None
    ) -> Runtime:
        """``spans``, if given, is told of every span as well (e.g. a ``SpanCounter``)."""
        return cls(
            settings=settings,
            telemetry=Telemetry.create(settings, telemetry_name, extra_processor=spans),
            broker=create_broker(settings.broker_url),
        )

    @property
    def topology(self) -> Topology:
        return Topology(self.settings.namespace)

    def bus(self, service: str, *, prefetch: int | None = None) -> Bus:
        return Bus(
            self.broker,
            topology=self.topology,
            telemetry=self.telemetry,
            service=service,
            max_attempts=self.settings.max_delivery_attempts,
            prefetch=prefetch or self.settings.prefetch,
            event_log_partitions=self.settings.recorder_partitions,
            max_message_bytes=self.settings.max_message_bytes,
        )

    async def close(self) -> None:
        await self.broker.close()
        self.telemetry.shutdown()


@contextlib.asynccontextmanager
async def running(services: Sequence[Service]) -> AsyncIterator[None]:
    """Start ``services`` in order; on exit stop the started ones in reverse order."""
    started: list[Service] = []
    async with stopping(started):
        for service in services:
            await service.start()
            started.append(service)
            log.info("%s started", service.name)
        yield


@contextlib.asynccontextmanager
async def stopping(started: Sequence[Service]) -> AsyncIterator[None]:
    """On exit, stop ``started`` (services already started, or being added to as they
    start) in reverse order; one that does not stop cleanly does not keep the rest running."""
    try:
        yield
    finally:
        for service in reversed(started):
            try:
                await service.stop()
            except Exception:
                log.exception("%s did not stop cleanly", service.name)


def run_process(
    name: str, build: Callable[[Runtime], Sequence[Service]], settings: Settings
) -> None:
    """Run services as this OS process until SIGINT or SIGTERM, on uvloop."""
    import uvloop

    logging.basicConfig(
        level=logging.INFO, format=f"%(asctime)s {name} %(levelname)s %(name)s: %(message)s"
    )
    try:
        uvloop.run(_serve(name, build, settings))
    except DlscopeError as exc:
        # A setting the service cannot run with (a gateway open to the network without a
        # token, a broker's vhost that does not exist) or a dependency it cannot reach: one
        # line that names it, not a traceback, and a failing exit status.
        log.error("%s cannot start: %s", name, exc)
        raise SystemExit(1) from None


# Container allocations between two young-generation collections (CPython's default: 700),
# and young collections between two of the middle generation (10), middle between two full
# ones (10). A service allocates a few dicts and models per message and frees nearly all by
# reference counting; at the defaults the cycle collector runs every few messages, and it cost
# the recorder about a third of its CPU per event. What a busy recorder holds (the events read
# and not yet stored) survives the young collections, and each middle one walked it all again:
# 120 ms each, a tenth of its CPU at 20 000 and 10 (BENCHMARKS.md, issue 24).
_GENERATION_THRESHOLDS = (50_000, 50, 100)


def _settle_garbage_collection() -> None:
    """Once a service is up: what start-up made (modules, classes, the zoo's manifests) lives
    as long as the process, so the cycle collector need never walk it again, and it runs
    less often on what is left."""
    gc.freeze()
    gc.set_threshold(*_GENERATION_THRESHOLDS)


async def _serve(
    name: str, build: Callable[[Runtime], Sequence[Service]], settings: Settings
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    runtime = Runtime.create(settings, name)
    try:
        async with running(build(runtime)):
            log.info("%s ready", name)
            _settle_garbage_collection()
            await stop.wait()
    finally:
        await runtime.close()
