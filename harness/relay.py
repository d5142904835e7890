"""TCP relays: a service that listens on loopback only, reached from another network.

The shared RabbitMQ of a development machine listens on 127.0.0.1; simulated hosts
(``harness.hosts``) reach this machine only over their own links. Rather than reconfigure a
broker other people use, a relay listens on the link's address and copies bytes both ways
to the real listener. It runs on an event loop in a thread of its own, so blocking callers
(pytest fixtures, benchmarks) and async ones alike can use it, and it closes every
connection it carries when it is closed: a client cut off mid-connection (its link set
down) never holds it open.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["Relay", "SeverableLink", "free_port"]

T = TypeVar("T")
_CHUNK = 1 << 16


class Relay:
    """Relays in their own thread; ``forward`` opens one, ``close`` ends them all."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="relay", daemon=True)
        self._thread.start()
        self._servers: list[asyncio.Server] = []
        self._writers: set[asyncio.StreamWriter] = set()

    def forward(self, listen_host: str, target_host: str, target_port: int) -> int:
        """Relay connections to ``listen_host`` (on a free port, returned) to the target."""
        return self._call(self._forward(listen_host, target_host, target_port))

    def close(self) -> None:
        if self._loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):
            self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=30)

    async def _forward(self, listen_host: str, target_host: str, target_port: int) -> int:
        async def carry(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await _carry(reader, writer, (target_host, target_port), self._writers)

        server = await asyncio.start_server(carry, listen_host, 0)
        self._servers.append(server)
        port: int = server.sockets[0].getsockname()[1]
        return port

    async def _close(self) -> None:
        for server in self._servers:
            server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 5)
        self._servers.clear()


class SeverableLink:
    """A relay on this event loop from a loopback port of its own to ``target``, which can
    be severed: every connection through it is reset and new ones are refused, as when the
    server behind it stops, until it is restored. What an outage test puts between the
    services and a shared server (RabbitMQ, PostgreSQL) that other tests on the machine are
    using and that must not be stopped."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url_netloc(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def restore(self) -> None:
        """Accept connections again (and at first), on the same port."""
        if self._server is None:
            self._server = await asyncio.start_server(self._carry, "127.0.0.1", self.port)

    async def sever(self) -> None:
        """Refuse new connections and reset every open one."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def close(self) -> None:
        await self.sever()

    async def _carry(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _carry(reader, writer, self.target, self._writers)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def _carry(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    target: tuple[str, int],
    writers: set[asyncio.StreamWriter],
) -> None:
    """One connection, copied both ways to a new one to ``target``; both ends are kept in
    ``writers`` while open, for a close (or a cut) to reset them."""
    try:
        upstream_reader, upstream = await asyncio.open_connection(*target)
    except OSError:
        writer.close()
        return
    writers.update((writer, upstream))
    try:
        await asyncio.gather(
            _pipe(reader, upstream), _pipe(upstream_reader, writer), return_exceptions=True
        )
    finally:
        for end in (writer, upstream):
            writers.discard(end)
            end.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    # AMQP never half-closes: when one side ends, the other end is closed with it.
    try:
        while chunk := await reader.read(_CHUNK):
            writer.write(chunk)
            await writer.drain()
    finally:
        writer.close()
