"""A ground-truth OpenAI-compatible server: it streams every answer on a timing it is told
(the first chunk ``ttft_ms`` after the request's body is read, then a chunk of one token
every ``itl_ms``, ``max_tokens`` of them) and records what it did, so a client's figures can
be checked against what was sent, and a load generator's rate counted where it lands.

It is as cheap as an HTTP server in Python gets (uvloop, one ``asyncio.Protocol`` a
connection, keep-alive, no framework), so at the rates the benchmarks drive the client, not
this, is the limit; it runs in a process of its own (``openai_stub``), never in the client's.

``GET /stats`` answers what it saw: how many requests arrived and when (``perf_counter_ns``,
the same clock as the client's on Linux), and the time to first chunk and the gaps it kept
(the ground truth). ``POST /stats/reset`` forgets it.

    python -m harness.openai_stub --port 8000 --ttft-ms 80 --itl-ms 20
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import uvloop

__all__ = ["MODEL", "StubTiming", "openai_stub", "stub_stats"]

MODEL = "stub"
_WORD = "tok"
_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    b"transfer-encoding: chunked\r\ncache-control: no-cache\r\n\r\n"
)


@dataclass(frozen=True)
class StubTiming:
    ttft_ms: float = 0.0
    itl_ms: float = 0.0


@dataclass
class _Seen:
    arrivals_ns: list[int] = field(default_factory=list)
    ttft_ns: list[int] = field(default_factory=list)
    gaps_ns: list[int] = field(default_factory=list)
    completed: int = 0
    open_streams: int = 0
    most_open: int = 0


def _chunked(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _json(status: str, body: object) -> bytes:
    data = orjson.dumps(body)
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(data)}\r\n\r\n"
    ).encode() + data


class _Connection(asyncio.Protocol):
    def __init__(self, timing: StubTiming, seen: _Seen, record_gaps: bool) -> None:
        self.timing, self.seen, self.record_gaps = timing, seen, record_gaps
        self.buffer = b""
        self.received_ns = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's: not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.received_ns = time.perf_counter_ns()  # a request's arrival: its last bytes read
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            method, path, _ = head.split(" ", 2)
            self.answer(method, path, body)

    def answer(self, method: str, path: str, body: bytes) -> None:
        assert self.transport is not None
        seen = self.seen
        if method == "GET" and path == "/v1/models":
            self.transport.write(_json("200 OK", {"data": [{"id": MODEL, "object": "model"}]}))
        elif method == "GET" and path == "/stats":
            self.transport.write(
                _json(
                    "200 OK",
                    {
                        "arrivals_ns": seen.arrivals_ns,
                        "ttft_ns": seen.ttft_ns,
                        "gaps_ns": seen.gaps_ns,
                        "completed": seen.completed,
                        "most_open": seen.most_open,
                    },
                )
            )
        elif method == "POST" and path == "/stats/reset":
            self.seen.__init__()  # type: ignore[misc]
            self.transport.write(_json("200 OK", {}))
        elif method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            seen.arrivals_ns.append(self.received_ns)
            request = orjson.loads(body)
            chat = path == "/v1/chat/completions"
            asyncio.get_running_loop().create_task(
                self.stream(self.received_ns, int(request.get("max_tokens") or 16), chat)
            )
        else:
            self.transport.write(_json("404 Not Found", {"error": f"no {method} {path}"}))

    async def stream(self, arrived: int, tokens: int, chat: bool) -> None:
        transport, timing, seen = self.transport, self.timing, self.seen
        assert transport is not None
        seen.open_streams += 1
        seen.most_open = max(seen.most_open, seen.open_streams)
        try:
            transport.write(_HEAD)
            previous = 0
            for index in range(tokens):
                # Each chunk at its time from the arrival (the first ``ttft_ms`` after it, then
                # one every ``itl_ms``), so a late wake-up does not shift every later chunk.
                due = arrived + int((timing.ttft_ms + index * timing.itl_ms) * 1e6)
                if (left := due - time.perf_counter_ns()) > 0:
                    await asyncio.sleep(left / 1e9)
                if transport.is_closing():
                    return
                last = index == tokens - 1
                reason = "length" if last else None
                choice = (
                    {"index": 0, "delta": {"content": _WORD}, "finish_reason": reason}
                    if chat
                    else {"index": 0, "text": _WORD, "finish_reason": reason}
                )
                event = {"id": "x", "model": MODEL, "choices": [choice]}
                transport.write(_chunked(b"data: " + orjson.dumps(event) + b"\n\n"))
                now = time.perf_counter_ns()
                if index == 0:
                    seen.ttft_ns.append(now - arrived)
                elif self.record_gaps:
                    seen.gaps_ns.append(now - previous)
                previous = now
            usage = {"prompt_tokens": 4, "completion_tokens": tokens, "total_tokens": tokens + 4}
            closing = b"data: " + orjson.dumps({"choices": [], "usage": usage}) + b"\n\n"
            transport.write(_chunked(closing) + _chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            seen.completed += 1
        finally:
            seen.open_streams -= 1

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None if exc else self.transport


async def _serve(port: int, timing: StubTiming, record_gaps: bool) -> None:
    seen = _Seen()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: _Connection(timing, seen, record_gaps), "127.0.0.1", port, backlog=8192
    )
    print(f"serving on {port}", flush=True)
    async with server:
        await server.serve_forever()


@contextlib.contextmanager
def openai_stub(
    timing: StubTiming = StubTiming(), *, record_gaps: bool = True
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The stub in a process of its own on a free port: its API root and its process."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    command = [sys.executable, "-m", "harness.openai_stub", "--port", str(port)]
    command += ["--ttft-ms", str(timing.ttft_ms), "--itl-ms", str(timing.itl_ms)]
    if not record_gaps:
        command.append("--no-gaps")
    process = subprocess.Popen(command, stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None
        if not process.stdout.readline().startswith(b"serving"):
            raise RuntimeError(f"the stub did not start (exit {process.wait()})")
        yield f"http://127.0.0.1:{port}/v1", process
    finally:
        process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


def stub_stats(url: str, *, reset: bool = False) -> dict[str, Any]:
    """What the stub at ``url`` (its API root) saw; forgotten after, with ``reset``."""
    import httpx

    root = url.removesuffix("/v1")
    stats: dict[str, Any] = httpx.get(f"{root}/stats", timeout=30).json()
    if reset:
        httpx.post(f"{root}/stats/reset", timeout=30)
    return stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ttft-ms", type=float, default=0.0)
    parser.add_argument("--itl-ms", type=float, default=0.0)
    parser.add_argument("--no-gaps", action="store_true", help="keep no per-chunk gaps")
    args = parser.parse_args()
    timing = StubTiming(args.ttft_ms, args.itl_ms)
    uvloop.run(_serve(args.port, timing, not args.no_gaps))


if __name__ == "__main__":
    main()
