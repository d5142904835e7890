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

It can also be a hostile or faulty server (``misbehave``, one of ``MISBEHAVIOURS``), after
answering its first ``honest`` completions as it should (a benchmark's first requests are its
checks), then on one completion in ``every``: an error body or a model list holding NUL, an
answer that streams forever (of tokens, or of keep-alive comments), one that trickles a byte
a second, one huge chunk, or a million tiny ones.

    python -m harness.openai_stub --port 8000 --ttft-ms 80 --itl-ms 20
    python -m harness.openai_stub --port 8000 --misbehave trickle --honest 3 --every 2
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import uvloop

__all__ = ["MISBEHAVIOURS", "MODEL", "StubTiming", "openai_stub", "stub_stats"]

MODEL = "stub"
_WORD = "tok"
_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    b"transfer-encoding: chunked\r\ncache-control: no-cache\r\n\r\n"
)


MISBEHAVIOURS = (
    "nul-error",  # every completion: HTTP 500 whose body holds a NUL byte
    "nul-models",  # its model list names a model with a NUL in its name, beside its own
    "forever",  # an answer of one token a chunk that never ends
    "keep-alive",  # an answer of keep-alive comments that never ends
    "trickle",  # an answer sent one byte a second
    "huge-chunk",  # an answer of one 50 MB chunk
    "tiny-chunks",  # an answer of a million one-character chunks
)


@dataclass(frozen=True)
class StubTiming:
    ttft_ms: float = 0.0
    itl_ms: float = 0.0
    # How it misbehaves (one of MISBEHAVIOURS) once it has answered ``honest`` completions.
    misbehave: str | None = None
    honest: int = 0
    every: int = 1


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
            models = [{"id": MODEL, "object": "model"}]
            if self.timing.misbehave == "nul-models":
                models.append({"id": "a\x00model", "object": "model"})
            self.transport.write(_json("200 OK", {"data": models}))
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
            misbehave = self.timing.misbehave
            later = len(seen.arrivals_ns) - self.timing.honest
            if misbehave is not None and later > 0 and (later - 1) % self.timing.every == 0:
                if misbehave == "nul-error":
                    body = b"internal\x00error"
                    head = f"HTTP/1.1 500 Internal Server Error\r\ncontent-length: {len(body)}"
                    self.transport.write(head.encode() + b"\r\n\r\n" + body)
                    return
                if misbehave != "nul-models":
                    asyncio.get_running_loop().create_task(self.misbehave(misbehave, chat))
                    return
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

    async def misbehave(self, how: str, chat: bool) -> None:
        """An answer as a hostile or faulty server sends it, until the client goes away."""
        transport = self.transport
        assert transport is not None

        def event(text: str) -> bytes:
            choice = (
                {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
            )
            return b"data: " + orjson.dumps({"id": "x", "model": MODEL, "choices": [choice]})

        transport.write(_HEAD)
        if how == "huge-chunk":
            transport.write(_chunked(event("x" * 50 * 1024**2) + b"\n\n"))
            return
        if how == "trickle":
            answer = event(_WORD) + b"\n\n"
            for index in itertools.cycle(range(len(answer))):
                if transport.is_closing():
                    return
                transport.write(_chunked(answer[index : index + 1]))
                await asyncio.sleep(1.0)
        piece = {"forever": event(_WORD), "keep-alive": b": keep-alive", "tiny-chunks": event("t")}
        for sent in range(1_000_000 if how == "tiny-chunks" else sys.maxsize):
            if transport.is_closing():
                return
            transport.write(_chunked(piece[how] + b"\n\n"))
            if sent % 64 == 63:  # let the loop serve others, and the client read
                await asyncio.sleep(0.001)
        transport.write(_chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n")

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
    if timing.misbehave is not None:
        command += ["--misbehave", timing.misbehave, "--honest", str(timing.honest)]
        command += ["--every", str(timing.every)]
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
    parser.add_argument("--misbehave", choices=MISBEHAVIOURS, help="how to misbehave")
    parser.add_argument("--honest", type=int, default=0, help="completions answered first")
    parser.add_argument("--every", type=int, default=1, help="then misbehave on one in N")
    args = parser.parse_args()
    timing = StubTiming(args.ttft_ms, args.itl_ms, args.misbehave, args.honest, args.every)
    uvloop.run(_serve(args.port, timing, not args.no_gaps))


if __name__ == "__main__":
    main()
