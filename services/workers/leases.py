"""Device leases: a timed measurement has the device it measures to itself.

A lease is an exclusive ``flock`` on one file per device in a directory every worker of the
host shares (``DLSCOPE_LEASE_DIR``; by default ``<tmp>/dlscope-leases-<host name>``). flock
suits it three ways: two processes on one host exclude each other; two descriptors opened
apart exclude each other inside one process too (the embedded mode's workers share one); and
the kernel drops the lock the moment its holder's descriptor closes, so a worker killed by
``kill -9`` leaves no lease behind. The descriptors are opened close-on-exec, and the
framework process is started with ``close_fds``: it never inherits a lease.

What is leased is a ``Device`` (``services.workers.devices``): a lock per CPU core, taken in
ascending order, so workers pinned to disjoint cores still measure in parallel, overlapping
ones take turns, and two waiters never hold each other up in a circle; or one lock for a GPU
or an OpenCL accelerator.

The holder writes who it is (evaluation, agent, pid, since when) into each file it locks, so
a waiter can say whom it waits for. A waiter polls rather than blocks in the kernel: a wait
must end at its deadline or when cancelled, and a thread blocked in flock can do neither.
Waiters are not queued: the first to find the device free takes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import stat
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from services.workers.devices import Device
from shared.errors import ConfigurationError, DlscopeError
from shared.messages import DeviceLease

__all__ = ["DeviceBusy", "DeviceLeases", "Held", "Holder"]

# How often a waiter looks again: from the first, doubling up to the last.
_FIRST_POLL_S = 0.02
_LAST_POLL_S = 0.25
# What a waiter reads of a lock file: the holder's few fields.
_HOLDER_BYTES = 4096
# Before a waiter has told anyone whom it waits for.
_UNTOLD = object()


@dataclass(frozen=True)
class Holder:
    """Who holds a lease, as it wrote itself into the lock file."""

    evaluation_id: str
    agent_id: str
    pid: int
    since: datetime

    def __str__(self) -> str:
        return (
            f"evaluation {self.evaluation_id} on agent {self.agent_id} "
            f"(pid {self.pid}, since {self.since.astimezone(UTC):%H:%M:%S} UTC)"
        )

    @property
    def short(self) -> str:
        """For a progress line: the evaluation's first characters and the agent."""
        return f"evaluation {self.evaluation_id[:8]} on agent {self.agent_id}"

    def encode(self) -> bytes:
        return json.dumps(
            {
                "evaluation_id": self.evaluation_id,
                "agent_id": self.agent_id,
                "pid": self.pid,
                "since": self.since.isoformat(),
            }
        ).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Holder | None:
        """None for a file with no holder in it (being written, or given back)."""
        try:
            fields = json.loads(raw)
            return cls(
                evaluation_id=str(fields["evaluation_id"]),
                agent_id=str(fields["agent_id"]),
                pid=int(fields["pid"]),
                since=datetime.fromisoformat(fields["since"]),
            )
        except (ValueError, KeyError, TypeError):
            return None


def _seconds(value: float) -> str:
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def _held_by(holder: Holder | None) -> str:
    return f"held by {holder}" if holder is not None else "held by a process that has not said"


class DeviceBusy(DlscopeError):
    """The device was not free before the wait's deadline."""

    def __init__(self, device: Device, waited_s: float, holder: Holder | None) -> None:
        self.device = device
        self.waited_s = waited_s
        self.holder = holder
        super().__init__(
            f"waited {_seconds(waited_s)} s for device {device.name}, {_held_by(holder)}; "
            "another measurement had it the whole time (DLSCOPE_EVALUATION_TIMEOUT_S bounds "
            "the wait; --concurrent measures without waiting, under contention)"
        )


# Told while a job waits: who holds the device now (None: unknown), how long it may wait.
OnWait = Callable[[Holder | None, float | None], Awaitable[None]]


@dataclass
class Held:
    """A lease taken, what and when (``released_at`` once given back); or, not ``leased``,
    the window of a measurement run beside others (``concurrent``)."""

    device: Device
    host: str
    acquired_at: datetime
    waited_s: float
    leased: bool = True
    released_at: datetime | None = None

    def record(self) -> DeviceLease:
        assert self.released_at is not None, "recorded once given back"
        return DeviceLease(
            device=self.device.name,
            locks=list(self.device.locks) if self.leased else [],
            host=self.host,
            held=self.leased,
            acquired_at=self.acquired_at,
            released_at=self.released_at,
            waited_s=self.waited_s,
        )


class DeviceLeases:
    """The leases of one host, in ``directory``."""

    def __init__(self, directory: Path, *, host: str) -> None:
        self.directory = directory
        self.host = host
        self._directory_made = False

    @contextlib.asynccontextmanager
    async def beside(self, device: Device) -> AsyncIterator[Held]:
        """No lease: the block runs beside whatever else uses ``device`` (a contention
        study); only its window is kept, to show what it overlapped."""
        window = Held(device, self.host, datetime.now(UTC), waited_s=0.0, leased=False)
        try:
            yield window
        finally:
            window.released_at = datetime.now(UTC)

    @contextlib.asynccontextmanager
    async def hold(
        self,
        device: Device,
        *,
        evaluation_id: uuid.UUID,
        agent_id: str,
        wait_s: float | None = None,
        on_wait: OnWait | None = None,
    ) -> AsyncIterator[Held]:
        """Hold ``device`` for the block: wait for it (at most ``wait_s``, then DeviceBusy;
        ``on_wait`` is told when the wait begins and whenever the holder changes), and give
        it back however the block ends."""
        began = time.monotonic()
        deadline = None if wait_s is None else began + wait_s
        holder = Holder(str(evaluation_id), agent_id, os.getpid(), datetime.now(UTC))
        descriptors: list[int] = []
        try:
            for lock in device.locks:
                descriptors.append(await self._take(device, lock, holder, began, deadline, on_wait))
        except BaseException:
            _give_back(descriptors)
            raise
        held = Held(
            device=device,
            host=self.host,
            acquired_at=datetime.now(UTC),
            waited_s=time.monotonic() - began,
        )
        try:
            yield held
        finally:
            # Stamped while still held: the next holder's window starts after this one ends.
            held.released_at = datetime.now(UTC)
            _give_back(descriptors)

    async def _take(
        self,
        device: Device,
        lock: str,
        holder: Holder,
        began: float,
        deadline: float | None,
        on_wait: OnWait | None,
    ) -> int:
        """The descriptor of ``lock``, locked and with ``holder`` written in it."""
        pause = _FIRST_POLL_S
        told: object = _UNTOLD
        while True:
            descriptor, current = self._try(lock)
            if descriptor is not None:
                with contextlib.suppress(OSError):  # a file we may not write: still ours
                    os.ftruncate(descriptor, 0)
                    os.pwrite(descriptor, holder.encode(), 0)
                return descriptor
            now = time.monotonic()
            left = None if deadline is None else deadline - now
            if left is not None and left <= 0:
                raise DeviceBusy(device, now - began, current)
            if current != told and on_wait is not None:
                await on_wait(current, left)
            told = current
            await asyncio.sleep(pause if left is None else min(pause, left))
            pause = min(2 * pause, _LAST_POLL_S)

    def _try(self, lock: str) -> tuple[int | None, Holder | None]:
        """Locked ``lock``'s descriptor; or None and who holds it."""
        descriptor = self._open(lock)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = Holder.decode(os.pread(descriptor, _HOLDER_BYTES, 0))
            os.close(descriptor)
            return None, holder
        except BaseException:
            os.close(descriptor)
            raise
        return descriptor, None

    def _open(self, lock: str) -> int:
        path = self.directory / f"{lock}.lock"
        try:
            self._ensure_directory()
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o666)
        except PermissionError:
            # Another user's lock file: flock needs no write access, only the holder's note.
            descriptor = self._open_read_only(path)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot take the device lease {path}: {exc.strerror or exc}; "
                "set DLSCOPE_LEASE_DIR to a directory every worker of this host can write"
            ) from exc
        with contextlib.suppress(OSError):  # shared with the host's other users
            if os.fstat(descriptor).st_uid == os.geteuid():
                os.fchmod(descriptor, 0o666)
        return descriptor

    def _open_read_only(self, path: Path) -> int:
        try:
            return os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot take the device lease {path}: {exc.strerror or exc}; "
                "set DLSCOPE_LEASE_DIR to a directory every worker of this host can write"
            ) from exc

    def _ensure_directory(self) -> None:
        if self._directory_made:
            return
        try:
            self.directory.mkdir(parents=True)
        except FileExistsError:
            self._directory_made = True
            return
        # Made here: open to every user of the host, each deleting only their own files (as
        # /tmp), since workers of several users share the devices.
        with contextlib.suppress(OSError):
            self.directory.chmod(0o777 | stat.S_ISVTX)
        self._directory_made = True


def _give_back(descriptors: list[int]) -> None:
    """Clear the holder's note, then unlock (by closing), the last taken first."""
    for descriptor in reversed(descriptors):
        with contextlib.suppress(OSError):
            os.ftruncate(descriptor, 0)
        os.close(descriptor)
    descriptors.clear()
