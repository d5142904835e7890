"""What else used the machine during a timed window: two snapshots around the timed loop,
and the arithmetic between them, on synthetic /proc and /sys readings and on this machine."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace

import pytest

from dlscope.cli.machine import machine_rows
from services.workers.framework.sessions.inference import nvml_index
from shared.measurement import (
    BatchSweep,
    MultiStream,
    Offline,
    Server,
    SingleStream,
    WarmupSettings,
    run_scenario,
)
from shared.measurement.cost import MachineReport, run_cost
from shared.measurement.readings import MachineWatch, rapl_counters
from shared.measurement.window import (
    CpuTicks,
    EnergyCounters,
    MachineWindow,
    Snapshot,
    parse_proc_stat,
    window_between,
)

PROC_STAT = """\
cpu  400 10 100 1000 50 5 5 20 30 0
cpu0 200 5 50 500 25 3 2 10 30 0
cpu1 200 5 50 500 25 2 3 10 0 0
cpu2 999 0 0 0 0 0 0 0 0 0
intr 12345 0 0
ctxt 999
"""
TICK_S = 0.01


def snapshot(
    *,
    at_s: float,
    own_s: float,
    busy: Sequence[int],
    steal: Sequence[int] = (0, 0),
    **extra: object,
) -> Snapshot:
    """A snapshot at ``at_s`` of a process that used ``own_s`` of CPU, on CPUs 0 and 1."""
    return Snapshot(
        wall_ns=1_700_000_000_000_000_000 + int(at_s * 1e9),
        perf_ns=int(at_s * 1e9),
        own_cpu_ns=int(own_s * 1e9),
        cpus=(0, 1),
        tick_s=TICK_S,
        ticks={
            cpu: CpuTicks(busy=b, steal=s, total=b + s)
            for cpu, (b, s) in enumerate(zip(busy, steal, strict=True))
        },
        **extra,  # type: ignore[arg-type]
    )


def test_proc_stat_gives_each_allowed_cpus_busy_and_steal_ticks() -> None:
    ticks = parse_proc_stat(PROC_STAT, cpus={0, 1})
    assert set(ticks) == {0, 1}  # cpu2 is not ours to run on; the "cpu" total is not a CPU
    # busy: user + nice + system + irq + softirq; guest time is already counted in user.
    assert ticks[0] == CpuTicks(busy=200 + 5 + 50 + 3 + 2, steal=10, total=260 + 500 + 25 + 10)


def test_other_processes_cpu_is_the_cpus_busy_time_less_our_own() -> None:
    # Over 2 s, CPUs 0 and 1 were busy 3.0 s in all; this process used 1.6 s of it.
    before = snapshot(at_s=10, own_s=5.0, busy=(1000, 1000))
    after = snapshot(at_s=12, own_s=6.6, busy=(1150, 1150))
    window = window_between(before, after)
    assert window.duration_s == pytest.approx(2.0)
    assert window.cpus == 2
    assert window.own_cpu_s == pytest.approx(1.6)
    assert window.busy_cpu_s == pytest.approx(3.0)
    assert window.other_cpu_s == pytest.approx(1.4)
    assert window.other_cores == pytest.approx(0.7)  # cores kept busy, on average
    assert window.resolution_s == pytest.approx(2 * 2 * TICK_S)  # a tick per CPU at each end
    assert window.other_cores_resolution == pytest.approx(0.02)
    # When, on the wall clock, for the stored event.
    assert window.ended_at_ns - window.started_at_ns == 2_000_000_000


def test_coarse_ticks_never_make_other_processes_negative() -> None:
    # Our own time is exact, the ticks are not: over a short window ours may exceed them.
    window = window_between(
        snapshot(at_s=0, own_s=0, busy=(0, 0)), snapshot(at_s=0.05, own_s=0.06, busy=(3, 2))
    )
    assert window.other_cpu_s == 0.0
    assert window.other_cores == 0.0


def test_steal_is_a_share_of_the_cpus_time() -> None:
    window = window_between(
        snapshot(at_s=0, own_s=0, busy=(0, 0), steal=(0, 0)),
        snapshot(at_s=1, own_s=0, busy=(0, 0), steal=(18, 18)),
    )
    assert window.steal_s == pytest.approx(0.36)
    assert window.steal_share == pytest.approx(0.18)


def test_energy_counters_wrap_round_at_their_range() -> None:
    range_uj = 262_143_328_850
    counters = {"intel-rapl:0": range_uj}
    before = snapshot(
        at_s=0,
        own_s=0,
        busy=(0, 0),
        energy=EnergyCounters("RAPL package", {"intel-rapl:0": range_uj - 1_000_000}, counters),
    )
    after = snapshot(
        at_s=1,
        own_s=0,
        busy=(0, 0),
        energy=EnergyCounters("RAPL package", {"intel-rapl:0": 4_000_000}, counters),
    )
    window = window_between(before, after)
    assert window.energy_j == pytest.approx(5.0)  # 1 J to the top, 4 J after it wrapped
    assert window.energy_source == "RAPL package"


def test_energy_without_a_counter_is_not_measured_and_says_why() -> None:
    why = {"energy": "not measured: /sys/class/powercap does not exist (no RAPL here)"}
    window = window_between(
        snapshot(at_s=0, own_s=0, busy=(0, 0), not_exposed=why),
        snapshot(at_s=1, own_s=0, busy=(0, 0), not_exposed=why),
    )
    assert window.energy_j is None
    assert window.not_exposed["energy"] == why["energy"]


def test_throttling_frequency_and_gpu_processes_are_read_at_both_ends() -> None:
    window = window_between(
        snapshot(
            at_s=0,
            own_s=0,
            busy=(0, 0),
            throttle_count=7,
            frequency_mhz={0: 3500.0, 1: 3400.0},
            gpu_processes=frozenset({111}),
        ),
        snapshot(
            at_s=1,
            own_s=0,
            busy=(0, 0),
            throttle_count=9,
            frequency_mhz={0: 2100.0, 1: 3500.0},
            gpu_processes=frozenset({222}),
        ),
    )
    assert window.throttle_events == 2
    assert window.frequency_mhz == (2100.0, 3500.0)
    assert window.gpu_processes == (111, 222)


def fake_machine(root: Path, *, cpus: Sequence[int], powercap: bool = False) -> None:
    (root / "proc").mkdir(parents=True)
    (root / "proc" / "stat").write_text(
        "".join(f"cpu{cpu} 100 0 50 1000 0 0 0 7 0 0\n" for cpu in cpus)
    )
    for cpu in cpus:
        folder = root / "sys/devices/system/cpu" / f"cpu{cpu}"
        (folder / "cpufreq").mkdir(parents=True)
        (folder / "cpufreq" / "scaling_cur_freq").write_text("2400000\n")
        (folder / "thermal_throttle").mkdir()
        (folder / "thermal_throttle" / "core_throttle_count").write_text("3\n")
    if powercap:
        package = root / "sys/class/powercap/intel-rapl:0"
        (package / "intel-rapl:0:0").mkdir(parents=True)  # a subdomain: inside the package
        (package / "energy_uj").write_text("123456789\n")
        (package / "max_energy_range_uj").write_text("262143328850\n")


def test_a_snapshot_reads_what_the_machine_exposes(tmp_path: Path) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    fake_machine(tmp_path, cpus=cpus, powercap=True)
    taken = MachineWatch(root=tmp_path).snapshot()
    assert set(taken.ticks or {}) == set(cpus)
    assert taken.ticks is not None
    assert taken.ticks[cpus[0]] == CpuTicks(busy=150, steal=7, total=1157)
    assert taken.frequency_mhz == dict.fromkeys(cpus, 2400.0)
    assert taken.throttle_count == 3 * len(cpus)
    assert taken.energy is not None
    assert taken.energy.uj == {"intel-rapl:0": 123456789}
    assert taken.not_exposed == {}


def test_what_a_vm_does_not_expose_is_said_not_guessed(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "stat").write_text(PROC_STAT)
    taken = MachineWatch(root=tmp_path).snapshot()
    assert taken.frequency_mhz is None
    assert taken.throttle_count is None
    assert taken.energy is None
    assert "not exposed" in taken.not_exposed["frequency"]
    assert "not exposed" in taken.not_exposed["throttling"]
    assert "no RAPL here" in taken.not_exposed["energy"]


def test_rapl_readable_by_root_only_is_not_measured_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_machine(tmp_path, cpus=[0], powercap=True)
    real = Path.read_text

    def refusing(path: Path, *args: object, **kwargs: object) -> str:
        if path.name == "energy_uj":
            raise PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(Path, "read_text", refusing)
    counters, why = rapl_counters(tmp_path / "sys/class/powercap")
    assert counters is None
    assert "readable by root only" in why


def test_a_window_on_this_machine_counts_our_own_busy_time() -> None:
    watch = MachineWatch()
    end = watch()
    deadline = time.perf_counter() + 0.3
    while time.perf_counter() < deadline:  # one thread, busy
        pass
    window = end()
    assert window.duration_s >= 0.3
    # One busy thread: at most the window's length of CPU (less, on a machine shared now).
    assert 0 < window.own_cpu_s <= window.duration_s * 1.05
    assert window.cpus == len(os.sched_getaffinity(0))
    if window.busy_cpu_s is not None:  # /proc/stat is there on Linux
        assert window.busy_cpu_s >= window.own_cpu_s - window.resolution_s  # type: ignore[operator]
    assert window.started_at_ns <= time.time_ns()


QUICK = WarmupSettings(window_queries=4, max_windows=2)


class CountingWatch:
    """A watch that counts its calls: once before each timed loop, once after it."""

    def __init__(self) -> None:
        self.begun = 0
        self.ended = 0

    def __call__(self) -> Callable[[], MachineWindow]:
        self.begun += 1

        def end() -> MachineWindow:
            self.ended += 1
            return MachineWindow(
                started_at_ns=0, ended_at_ns=1, duration_ns=1, cpus=1, own_cpu_s=0.0
            )

        return end


def nap(samples: Sequence[int]) -> None:
    time.sleep(0.0002)


@pytest.mark.parametrize(
    ("scenario", "phases"),
    [
        (SingleStream(min_query_count=8, min_duration_s=0, warmup=QUICK), 1),
        (MultiStream(samples_per_query=2, min_query_count=8, min_duration_s=0, warmup=QUICK), 1),
        (Server(target_qps=2000, min_query_count=8, min_duration_s=0, warmup=QUICK), 1),
        (Offline(batch_size=2, min_sample_count=8, min_duration_s=0, warmup=QUICK), 1),
        (BatchSweep(batch_sizes=(1, 2, 4), min_query_count=8, min_duration_s=0, warmup=QUICK), 3),
    ],
)
def test_every_scenario_keeps_one_window_per_timed_phase(
    scenario: SingleStream | MultiStream | Server | Offline | BatchSweep, phases: int
) -> None:
    watch = CountingWatch()
    result = run_scenario(scenario, nap, sample_count=8, watch=watch)
    assert (watch.begun, watch.ended) == (phases, phases)  # two snapshots a phase, no more
    assert all(phase.window is not None for phase in result.phases)
    bare = run_scenario(scenario, nap, sample_count=8)
    assert all(phase.window is None for phase in bare.phases)


def test_a_real_window_brackets_the_timed_queries_only() -> None:
    scenario = SingleStream(min_query_count=20, min_duration_s=0.2, warmup=QUICK)
    result = run_scenario(scenario, nap, sample_count=8, watch=MachineWatch())
    phase = result.phases[0]
    window = phase.window
    assert window is not None
    # The window is the timed loop's, give or take the snapshots: not the warm-up's.
    assert window.duration_ns == pytest.approx(phase.duration_ns, rel=0.05, abs=2_000_000)


def fake_nvml(
    energy_mj: list[int],
    processes: list[list[int]],
    memory: list[dict[int, int]] | None = None,
) -> SimpleNamespace:
    """pynvml as nvidia-ml-py answers on a host whose GPU 0 runs ``processes`` in turn, each
    holding ``memory`` bytes (None where the driver does not say, as in some containers)."""
    readings = iter(energy_mj)
    listings = iter(zip(processes, memory or [{} for _ in processes], strict=True))

    def compute(handle: str) -> list[SimpleNamespace]:
        pids, held = next(listings)
        return [SimpleNamespace(pid=pid, usedGpuMemory=held.get(pid)) for pid in pids]

    return SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda index: f"gpu{index}",
        nvmlDeviceGetTotalEnergyConsumption=lambda handle: next(readings),
        nvmlDeviceGetComputeRunningProcesses=compute,
        nvmlDeviceGetGraphicsRunningProcesses=lambda handle: [],
    )


def test_on_a_gpu_nvml_gives_the_energy_and_the_other_processes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    own = os.getpid()
    nvml = fake_nvml([1_000_000, 1_250_000], [[own, 4242], [own, 4343]])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    end = MachineWatch(gpu_index=0)()
    window = end()
    assert window.energy_j == pytest.approx(250.0)  # NVML counts millijoules
    assert window.energy_source == "NVML total energy, GPU 0"
    assert window.gpu_processes == (4242, 4343)  # ours left out, both others named


def test_without_nvml_a_gpu_run_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    window = MachineWatch(gpu_index=0)()()
    assert window.gpu_processes is None
    assert window.not_exposed["gpu"].startswith("NVML not available")
    # A CPU run does not look at GPUs at all.
    assert "gpu" not in MachineWatch()()().not_exposed


def test_on_a_gpu_the_device_memory_the_framework_holds_is_its_cost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    own, gib = os.getpid(), 2**30
    nvml = fake_nvml(
        [1_000_000, 1_250_000],
        [[own, 4242], [own, 4242]],
        [{own: gib, 4242: 8 * gib}, {own: 3 * gib // 2, 4242: 8 * gib}],
    )
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    window = MachineWatch(gpu_index=0)()()
    assert window.device_memory_bytes == 3 * gib // 2  # ours, the larger end; not 4242's
    cost = run_cost(window, 100, 1, None)
    assert cost.device_memory_bytes == 3 * gib // 2
    assert "device_memory" not in cost.not_measured
    rows = dict(machine_rows(MachineReport(cost=cost).model_dump(mode="json")))
    assert rows["device memory (MiB, framework process on the GPU)"] == "1536"


def test_a_gpu_that_does_not_say_what_a_process_holds_is_not_measured_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    own = os.getpid()
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([1, 2], [[own], [own]]))
    cost = run_cost(MachineWatch(gpu_index=0)()(), 100, 1, None)
    assert cost.device_memory_bytes is None  # never a guess
    assert "does not give this process's device memory" in cost.not_measured["device_memory"]
    # A CPU run has no device memory to speak of, so it says nothing of it.
    cpu = run_cost(MachineWatch()()(), 100, 1, None)
    assert "device_memory" not in cpu.not_measured
    assert "device memory" not in str(machine_rows(MachineReport(cost=cpu).model_dump()))


@pytest.mark.parametrize(
    ("visible", "index"), [(None, 0), ("", 0), ("2", 2), ("3,1", 3), ("GPU-8f2e", 0)]
)
def test_the_gpu_watched_is_the_one_cuda_uses_first(visible: str | None, index: int) -> None:
    """NVML ignores CUDA_VISIBLE_DEVICES: without the mapping a worker leasing GPU 2 would
    read GPU 0's energy, processes and memory."""
    assert nvml_index("" if visible is None else visible) == index
