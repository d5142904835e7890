"""Device leases between processes on one host: a measurement has its device to itself.

Another process holds a lease (a subprocess, as another worker would): a waiter is told who
holds it and gives up at its deadline saying so; CPU core sets that overlap exclude each
other, disjoint ones do not; a holder killed by SIGKILL releases at once, even when a child
it started lives on; two holders in one process (the embedded mode's workers) exclude each
other too, and their windows follow one another."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.workers.devices import cpu_device
from services.workers.leases import DeviceBusy, DeviceLeases, Holder
from shared.config import REPOSITORY_ROOT

# Takes the lease on the cores argv[2] names (in the directory argv[1], for evaluation
# argv[3]); with argv[4], starts a child first that outlives it. Prints "held", then waits.
HOLDER = """
import asyncio, subprocess, sys, uuid
from pathlib import Path
from services.workers.devices import cpu_device
from services.workers.leases import DeviceLeases

async def main():
    leases = DeviceLeases(Path(sys.argv[1]), host="here")
    cores = [int(c) for c in sys.argv[2].split(",")]
    async with leases.hold(
        cpu_device(cores), evaluation_id=uuid.UUID(sys.argv[3]), agent_id="agent-holder"
    ):
        if len(sys.argv) > 4:
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
            print(child.pid, flush=True)
        print("held", flush=True)
        await asyncio.sleep(600)

asyncio.run(main())
"""


class Holding:
    """A process holding a lease."""

    def __init__(self, directory: Path, cores: str, *, with_child: bool = False) -> None:
        self.evaluation_id = uuid.uuid4()
        arguments = [str(directory), cores, str(self.evaluation_id)]
        self.process = subprocess.Popen(
            [sys.executable, "-c", HOLDER, *arguments, *(["child"] if with_child else [])],
            cwd=REPOSITORY_ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.child: int | None = int(self.process.stdout.readline()) if with_child else None
        assert self.process.stdout.readline().strip() == "held"

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def end(self) -> None:
        if self.process.poll() is None:
            self.kill()
        if self.child is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.child, signal.SIGKILL)
        assert self.process.stdout is not None
        self.process.stdout.close()


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "leases"


@pytest.fixture
def holders(directory: Path) -> Iterator[list[Holding]]:
    started: list[Holding] = []
    try:
        yield started
    finally:
        for holding in started:
            holding.end()


def hold(directory: Path, holders: list[Holding], cores: str, **kwargs: bool) -> Holding:
    holding = Holding(directory, cores, **kwargs)
    holders.append(holding)
    return holding


async def try_for(
    leases: DeviceLeases, cores: list[int], wait_s: float, told: list[Holder | None] | None = None
) -> float:
    """Take the lease on ``cores`` within ``wait_s`` (DeviceBusy if not); how long it waited."""

    async def on_wait(holder: Holder | None, left_s: float | None) -> None:
        if told is not None:
            told.append(holder)

    async with leases.hold(
        cpu_device(cores),
        evaluation_id=uuid.uuid4(),
        agent_id="agent-waiter",
        wait_s=wait_s,
        on_wait=on_wait,
    ) as held:
        return held.waited_s


async def test_a_lease_held_by_another_process_excludes_and_names_its_holder(
    directory: Path, holders: list[Holding]
) -> None:
    holding = hold(directory, holders, "0,1")
    leases = DeviceLeases(directory, host="here")
    told: list[Holder | None] = []
    with pytest.raises(DeviceBusy) as busy:
        await try_for(leases, [0, 1], wait_s=0.5, told=told)
    # The waiter was told once whom it waits for, and its failure says it.
    assert len(told) == 1
    holder = told[0]
    assert holder is not None
    assert (holder.evaluation_id, holder.agent_id) == (str(holding.evaluation_id), "agent-holder")
    assert holder.pid == holding.process.pid
    message = str(busy.value)
    assert message.startswith("waited 0.5 s for device cpu0-1, held by evaluation ")
    assert f"held by evaluation {holding.evaluation_id} on agent agent-holder" in message
    assert f"(pid {holding.process.pid}, since " in message


async def test_a_holder_killed_by_sigkill_releases_at_once(
    directory: Path, holders: list[Holding]
) -> None:
    holding = hold(directory, holders, "0,1")
    leases = DeviceLeases(directory, host="here")
    with pytest.raises(DeviceBusy):
        await try_for(leases, [0, 1], wait_s=0.2)
    holding.kill()
    # No wait: the kernel dropped the lock with the process.
    waited = await try_for(leases, [0, 1], wait_s=0.0)
    assert waited == pytest.approx(0, abs=0.1)


async def test_a_child_of_the_holder_does_not_keep_the_lease(
    directory: Path, holders: list[Holding]
) -> None:
    # A framework process is the worker's child: started while the lease is held, it must
    # not inherit it, or a worker killed by -9 would leave its device leased.
    holding = hold(directory, holders, "0", with_child=True)
    assert holding.child is not None
    holding.kill()
    os.kill(holding.child, 0)  # alive
    leases = DeviceLeases(directory, host="here")
    assert await try_for(leases, [0], wait_s=0.0) == pytest.approx(0, abs=0.1)


async def test_overlapping_core_sets_exclude_and_disjoint_ones_do_not(
    directory: Path, holders: list[Holding]
) -> None:
    hold(directory, holders, "1,2")
    leases = DeviceLeases(directory, host="here")
    for overlapping in ([0, 1], [2, 3], [1], [0, 1, 2, 3]):
        with pytest.raises(DeviceBusy):
            await try_for(leases, overlapping, wait_s=0.1)
    for disjoint in ([0], [3], [0, 3]):
        assert await try_for(leases, disjoint, wait_s=0.0) == pytest.approx(0, abs=0.1)


async def test_two_holders_in_one_process_take_turns_and_their_windows_follow(
    directory: Path,
) -> None:
    # The embedded mode: every worker in one process, each with its own descriptors.
    leases = DeviceLeases(directory, host="here")
    device = cpu_device([0, 1])
    first_in = asyncio.Event()
    release_first = asyncio.Event()
    told: list[Holder | None] = []

    async def first() -> tuple[object, object]:
        async with leases.hold(device, evaluation_id=uuid.uuid4(), agent_id="first") as held:
            first_in.set()
            await release_first.wait()
        return held.acquired_at, held.released_at

    async def second() -> tuple[object, object, float]:
        await first_in.wait()

        async def on_wait(holder: Holder | None, left_s: float | None) -> None:
            told.append(holder)
            release_first.set()  # the first gives it back once the second waits

        async with leases.hold(
            device, evaluation_id=uuid.uuid4(), agent_id="second", wait_s=10, on_wait=on_wait
        ) as held:
            pass
        return held.acquired_at, held.released_at, held.waited_s

    (a_in, a_out), (b_in, b_out, waited) = await asyncio.gather(first(), second())
    assert [h.agent_id if h else None for h in told] == ["first"]
    assert waited > 0
    assert a_in <= a_out <= b_in <= b_out  # type: ignore[operator]


async def test_a_lease_given_back_leaves_no_holder_named(directory: Path) -> None:
    leases = DeviceLeases(directory, host="here")
    async with leases.hold(cpu_device([0]), evaluation_id=uuid.uuid4(), agent_id="a"):
        assert (directory / "cpu0.lock").read_text()  # who holds it, for waiters
    assert (directory / "cpu0.lock").read_text() == ""
