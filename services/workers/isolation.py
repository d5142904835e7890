"""The worker's framework in a process of its own, supervised.

A worker never imports its framework: ``FrameworkProcess`` starts
``services.workers.framework.session`` as a child process and calls functions there
(``services.workers.handover``). Whatever the framework does natively — a segfault, an
abort in an OpenCL compiler, the OOM killer, a hang — ends that process only: the call
raises ``FrameworkCrashed`` naming the signal (or the exit status), what the process was
doing and its last lines of output, and the next call starts a fresh process. So one
framework can never take down a worker, nor, in the embedded mode, the other frameworks of
a comparison; and importing TensorFlow never slows PyTorch down.

The process is started once and kept between jobs (a framework's import and warm caches
are paid once); its output goes on to this process's standard error, and the last lines are
kept for the failure message.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection
from typing import IO, Any, TypeVar

from services.workers.handover import Described, FrameworkCall, FrameworkOptions
from shared.errors import ArtifactError, ConfigurationError, PredictorError
from shared.measurement.progress import Step

__all__ = ["FrameworkCrashed", "FrameworkProcess"]

log = logging.getLogger(__name__)
# What the framework processes print, apart from the worker's own log.
_output = logging.getLogger(f"{__name__}.output")

# Lines of the process's output kept for a failure message, and how much of them it shows.
_TAIL_LINES = 20
_TAIL_CHARS = 1500
# Importing a framework (TensorFlow: seconds) and looking at its device.
_START_TIMEOUT_S = 300.0
# After the connection closes, how long the process may take to exit and its output to drain.
_EXIT_GRACE_S = 10.0

R = TypeVar("R")


class FrameworkCrashed(PredictorError):
    """The framework process died (a signal, an exit) or hung past its deadline."""


class FrameworkProcess:
    """One framework on one kind of hardware, in a child process; one call at a time."""

    # Every framework process of this process's workers, running now: the environment names
    # one that is busy as dlscope's own (it is still load: only --concurrent members measure
    # side by side, and their results say so).
    running: set[int] = set()  # noqa: RUF012  (shared by every instance, on purpose)

    def __init__(
        self,
        framework: str,
        hardware: str,
        *,
        options: FrameworkOptions,
        deadline_s: float | None = None,
    ) -> None:
        self.framework = framework
        self.hardware = hardware
        # The settings its framework reads, told to each process this one starts.
        self._options = options
        self._deadline_s = deadline_s
        self._process: subprocess.Popen[bytes] | None = None
        self._socket: socket.socket | None = None
        self._connection: Connection | None = None
        self._inbox: asyncio.Queue[tuple[Any, ...]] | None = None
        self._readers: list[threading.Thread] = []
        self._tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
        self._described: Described | None = None
        self._phase = "starting"
        self._doing = self._phase  # the phase and its part ("running the scenario: warming up")
        self._lock = asyncio.Lock()

    @property
    def described(self) -> Described:
        """Version, device and build, as the process reported them when it started."""
        if self._described is None:
            raise RuntimeError("the framework process has not been started")
        return self._described

    @property
    def phase(self) -> str:
        """What the process was last heard doing ("running the scenario", …)."""
        return self._phase

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    async def start(self) -> Described:
        """Start the process (if it is not running) and wait for it to import its framework;
        ConfigurationError when the framework cannot be imported here."""
        async with self._lock:
            return await self._ensure_started()

    async def call(
        self,
        function: FrameworkCall[R],
        *args: Any,
        on_step: Callable[[Step], Awaitable[None]] | None = None,
    ) -> R:
        """``function(session, *args)`` in the framework process (``services.workers.
        handover``); its errors come back as ours (ArtifactError, PredictorError), its death
        as FrameworkCrashed. ``on_step`` is told each step the function reports."""
        async with self._lock:
            await self._ensure_started()
            assert self._connection is not None
            assert self._inbox is not None
            self._phase = self._doing = f"running {function.name}"
            await asyncio.to_thread(self._connection.send, ("call", function.target, args))
            try:
                async with asyncio.timeout(self._deadline_s):
                    answer: R = await self._answer(on_step)
                    return answer
            except TimeoutError:
                phase = self._doing
                await self._kill()
                raise FrameworkCrashed(
                    f"the {self.framework} process did not finish within {self._deadline_s:g} s"
                    f" while {phase}; it was killed{self._last_output()}"
                ) from None

    async def close(self) -> None:
        """Stop the process: the connection closes, it exits; killed if it does not."""
        async with self._lock:
            process = self._process
            if process is None:
                return
            self._hang_up()
            try:
                await asyncio.wait_for(asyncio.to_thread(process.wait), _EXIT_GRACE_S)
            except TimeoutError:
                process.kill()
                await asyncio.to_thread(process.wait)
            self._forget()

    # internals

    async def _ensure_started(self) -> Described:
        if self._process is not None and self._process.poll() is None:
            assert self._described is not None
            return self._described
        self._forget()
        parent, child = socket.socketpair()
        try:
            # Off the event loop: forking a large process takes milliseconds.
            self._process = await asyncio.to_thread(
                subprocess.Popen,
                [
                    sys.executable,
                    # Not "-m": the session's classes must be pickled under their module's
                    # name, not as __main__'s.
                    "-c",
                    "from services.workers.framework.session import main; main()",
                    f"--framework={self.framework}",
                    f"--hardware={self.hardware}",
                    f"--fd={child.fileno()}",
                ],
                pass_fds=(child.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            child.close()
        FrameworkProcess.running.add(self._process.pid)
        self._socket = parent
        self._connection = Connection(os.dup(parent.fileno()))
        self._inbox = asyncio.Queue()
        self._tail.clear()
        self._phase = self._doing = f"importing {self.framework}"
        loop = asyncio.get_running_loop()
        assert self._process.stdout is not None
        self._readers = [
            threading.Thread(
                target=_read_messages,
                args=(self._connection, self._inbox, loop),
                name=f"{self.framework} messages",
                daemon=True,
            ),
            threading.Thread(
                target=_read_output,
                args=(self._process.stdout, self._tail, self.framework),
                name=f"{self.framework} output",
                daemon=True,
            ),
        ]
        for reader in self._readers:
            reader.start()
        # Told first, over the connection: its settings never pass through its environment
        # or its arguments, which other users of the host can read. A process that died
        # before reading them is heard of below, as the connection ends.
        with contextlib.suppress(OSError):
            await asyncio.to_thread(self._connection.send, ("options", self._options))
        try:
            async with asyncio.timeout(_START_TIMEOUT_S):
                kind, *rest = await self._next()
        except TimeoutError:
            await self._kill()
            raise FrameworkCrashed(
                f"the {self.framework} process did not start within {_START_TIMEOUT_S:g} s"
                f"{self._last_output()}"
            ) from None
        if kind == "unavailable":
            await self._kill()
            raise ConfigurationError(f"framework {self.framework!r} cannot run here: {rest[0]}")
        if kind != "hello":
            await self._kill()
            raise FrameworkCrashed(f"the {self.framework} process did not start: {rest}")
        self._described = rest[0]
        log.info(
            "%s process %d started (%s %s)",
            self.framework,
            self._process.pid,
            self.framework,
            self._described.version,
        )
        return self._described

    async def _answer(self, on_step: Callable[[Step], Awaitable[None]] | None) -> Any:
        while True:
            kind, *rest = await self._next()
            if kind == "progress":
                step: Step = rest[0]
                # The phase ("running the scenario") answers `phase`; a crash names the part too.
                self._phase, self._doing = step.phase, str(step)
                if on_step is not None:
                    await on_step(step)
            elif kind == "ok":
                return rest[0]
            elif kind == "error":
                error_kind, message = rest
                raise (ArtifactError if error_kind == "artifact" else PredictorError)(message)

    async def _next(self) -> tuple[Any, ...]:
        """The process's next message; FrameworkCrashed when the connection ended."""
        assert self._inbox is not None
        message = await self._inbox.get()
        if message[0] != "eof":
            return message
        phase = self._doing
        status = await self._exit_status()
        self._forget()
        raise FrameworkCrashed(
            f"the {self.framework} process {status} while {phase}{self._last_output()}"
        )

    async def _exit_status(self) -> str:
        process = self._process
        assert process is not None
        try:
            code = await asyncio.wait_for(asyncio.to_thread(process.wait), _EXIT_GRACE_S)
        except TimeoutError:  # the connection closed, the process lives on: end it
            process.kill()
            code = await asyncio.to_thread(process.wait)
            return "closed its connection and was killed"
        await asyncio.to_thread(self._drain_output)
        if code == -signal.SIGKILL:
            # Nobody in dlscope sends it: a user's kill -9, or the kernel out of memory.
            return "was killed by SIGKILL (kill -9, or the kernel's out-of-memory killer)"
        if code < 0:
            return f"was killed by {_signal_name(-code)}"
        return f"exited with status {code}"

    def _drain_output(self) -> None:
        for reader in self._readers:
            reader.join(_EXIT_GRACE_S)

    def _last_output(self) -> str:
        lines = [line for line in self._tail if line.strip()]
        if not lines:
            return "; it printed nothing"
        text = " | ".join(lines)
        if len(text) > _TAIL_CHARS:
            text = "…" + text[-_TAIL_CHARS:]
        return f"; its last output: {text}"

    async def _kill(self) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()
            await asyncio.to_thread(process.wait)
        await asyncio.to_thread(self._drain_output)
        self._forget()

    def _hang_up(self) -> None:
        """End the conversation both ways: the framework process reads the end and exits,
        and our reader thread, blocked receiving, wakes up (closing a descriptor another
        thread is reading does neither)."""
        if self._socket is not None:
            with contextlib.suppress(OSError):
                self._socket.shutdown(socket.SHUT_RDWR)
            self._socket.close()
            self._socket = None

    def _forget(self) -> None:
        self._hang_up()
        if self._connection is not None:
            with contextlib.suppress(OSError):
                self._connection.close()
        if self._process is not None:
            FrameworkProcess.running.discard(self._process.pid)
            if self._process.stdout is not None:
                with contextlib.suppress(OSError):
                    self._process.stdout.close()
        self._process = None
        self._connection = None
        self._inbox = None


def _read_messages(
    connection: Connection,
    inbox: asyncio.Queue[tuple[Any, ...]],
    loop: asyncio.AbstractEventLoop,
) -> None:
    """Every message from the process onto the event loop's queue, then ("eof",)."""
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):
            message = ("eof",)
        except Exception as exc:  # a reply that cannot be unpickled here
            message = ("error", "predictor", f"the reply could not be read: {exc!r}")
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
            loop.call_soon_threadsafe(inbox.put_nowait, message)
        if message[0] == "eof":
            return


def _read_output(stream: IO[bytes], tail: collections.deque[str], framework: str) -> None:
    """The process's output, line by line: the last lines kept (a crash quotes them), each
    logged at INFO in the framework's name. So TensorFlow's and absl's banners, which no
    environment variable silences in TensorFlow 2.21, show where the services' logs do
    (``dlscope run -v``, ``up``, ``serve``), not under a plain ``dlscope run``'s result."""
    with contextlib.suppress(ValueError, OSError):  # closed under us when forgotten
        for raw in stream:
            line = raw.decode(errors="replace").rstrip()
            tail.append(line)
            with contextlib.suppress(Exception):
                _output.info("%s: %s", framework, line)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
