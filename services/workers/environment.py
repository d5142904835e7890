"""What a worker runs on: announced as capabilities, and captured at every evaluation's start.

``environment()`` runs at the start of every evaluation, on the worker's event loop, so it
must stay cheap (well under 50 ms): what cannot change while the process lives (CPU model,
GPUs, library versions, torch's build) is read once and kept; what can (load, free memory,
thread counts) is read each time. ``busy_before()``, the look back at which other processes
were busy, runs as the measurement starts: it reads every process's CPU time, which took
2-3 ms of the 15 ms from a request to its worker's start when it was part of the
environment (issue 24), and the run's start, not the job's, is what it speaks of.
"""

from __future__ import annotations

import csv
import functools
import importlib
import logging
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Collection, Iterator
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import psutil

__all__ = [
    "FRAMEWORK_LIBRARIES",
    "HEAVY_CPU_PERCENT",
    "Gpu",
    "busy_before",
    "capabilities",
    "environment",
    "gpus",
    "host_name",
]

log = logging.getLogger(__name__)

# The distributions, besides numpy, whose versions decide what a framework computes and how
# fast: its own package under every name it ships as, and the libraries it runs on. Those
# not installed are left out.
FRAMEWORK_LIBRARIES: dict[str, tuple[str, ...]] = {
    "onnxruntime": ("onnxruntime", "onnxruntime-gpu", "onnx", "protobuf", "flatbuffers"),
    "pytorch": ("torch", "nvidia-cudnn-cu12", "nvidia-cublas-cu12", "triton"),
    "tensorflow": ("tensorflow", "tensorflow-cpu", "keras", "protobuf", "ml-dtypes", "h5py"),
    "tensorrt": ("tensorrt", "tensorrt-cu12", "tensorrt-cu12-libs", "torch", "onnx"),
    "opencl": ("pyopencl", "pocl-binary-distribution", "onnx"),
    "endpoint": ("httpx", "httpcore", "tokenizers"),
}
# A process using this much of one CPU (top's percent) beside the worker is named in the
# environment as heavy: it competes with the measurement.
HEAVY_CPU_PERCENT = 50.0
_HEAVY_LISTED = 5
# How a heavy process that is one of this process's framework processes is labelled.
_OURS = "a dlscope framework process, running as this evaluation started"
# CPU times tick every 10 ms: over a shorter window a rate could be off by 10 points or more.
_SHORTEST_WINDOW_S = 0.1
# One read of /proc/<pid>/stat: its line is a few hundred bytes (52 fields and the name).
_STAT_BYTES = 4096
# Its fields after the name: utime and stime are 11 and 12, the start time 19.
_START_FIELD = 19
# Stat files kept open at most (one descriptor each), of the worker's usual 1 024.
_KEPT_OPEN = 256
_NVIDIA_SMI_QUERY = "index,name,memory.total,driver_version,uuid"


def host_name() -> str:
    return socket.gethostname()


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory_bytes: int
    driver_version: str
    uuid: str


@functools.cache
def gpus() -> tuple[Gpu, ...]:
    """The NVIDIA GPUs here: through NVML (``nvidia-ml-py``) when installed, else
    ``nvidia-smi``; none when neither finds one. Read once: GPUs do not come and go under a
    running worker."""
    found = _nvml_gpus()
    return found if found is not None else _nvidia_smi_gpus()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value  # old pynvml returns bytes


def _nvml_gpus() -> tuple[Gpu, ...] | None:
    """None when NVML cannot answer (no nvidia-ml-py, no driver), so nvidia-smi is asked."""
    try:
        nvml = importlib.import_module("pynvml")
        nvml.nvmlInit()
    except Exception:  # ImportError, or NVMLError: no libnvidia-ml, no driver loaded
        return None
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        found = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            found.append(
                Gpu(
                    index=index,
                    name=_text(nvml.nvmlDeviceGetName(handle)),
                    memory_bytes=int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
                    driver_version=driver,
                    uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                )
            )
        return tuple(found)
    except Exception as exc:  # NVMLError for a GPU fallen off the bus, say
        log.warning("NVML could not describe the GPUs: %s", exc)
        return None
    finally:
        nvml.nvmlShutdown()


def _nvidia_smi_gpus() -> tuple[Gpu, ...]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ()
    try:
        answer = subprocess.run(
            [smi, f"--query-gpu={_NVIDIA_SMI_QUERY}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
        return tuple(
            Gpu(
                index=int(index),
                name=name,
                memory_bytes=int(float(memory_mib) * 2**20),
                driver_version=driver,
                uuid=uuid,
            )
            for index, name, memory_mib, driver, uuid in csv.reader(
                answer.splitlines(), skipinitialspace=True
            )
        )
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        # A driver that does not answer (or a version mismatch) means no GPU to offer.
        log.warning("nvidia-smi could not list the GPUs: %s", exc)
        return ()


@functools.cache
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _governor() -> str | None:
    try:
        return Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor").read_text().strip()
    except OSError:
        return None  # containers and VMs often hide it


@functools.cache
def _distribution_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


@functools.cache
def _platform() -> str:
    return platform.platform()  # reads the interpreter's binary for its libc: once is enough


def _libraries(framework: str) -> dict[str, str]:
    return {
        name: found
        for name in FRAMEWORK_LIBRARIES.get(framework, ())
        if (found := _distribution_version(name)) is not None
    }


# Where Linux tells of its processes, and its clock ticks per second (their CPU times' unit).
_PROC = Path("/proc")
_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class _CpuUse:
    """CPU used by each other process since the previous look.

    A rate needs two readings, and sampling for long enough to mean something would cost the
    evaluation's start far more than 50 ms. So every look (the worker's announcement, each
    evaluation's start) keeps the processes' CPU times, and the next one reports the rate over
    the window between them: from the worker's start or the previous evaluation, to now.
    """

    def __init__(self) -> None:
        self._seen_at: float | None = None
        # pid -> (process start time, CPU seconds used): the start time tells a reused pid.
        self._used: dict[int, tuple[float, float]] = {}
        self._files = _StatFiles()

    def look(self, ours: Collection[int] = ()) -> tuple[float | None, list[dict[str, Any]]]:
        """The window in seconds and the processes over ``HEAVY_CPU_PERCENT`` in it, busiest
        first; a window of None when there is none long enough to tell.

        ``ours`` are the framework processes of this process's workers. They are not hidden:
        another worker's framework process measuring now competes like any other program.
        But the window looks back, and one that was busy in it may be done (the previous
        evaluation, the framework's import): such a process counts only if it is running
        at this instant, and is named as dlscope's."""
        now = time.monotonic()
        window = None if self._seen_at is None else now - self._seen_at
        if window is not None and window < _SHORTEST_WINDOW_S:
            return None, []  # the reading kept stays, so the next window is long enough
        own = os.getpid()
        used: dict[int, tuple[float, float]] = {}
        heavy = []
        for pid, name, seconds, started in _processes(files=self._files):
            if pid == own:
                continue
            used[pid] = (started, seconds)
            before = self._used.get(pid)
            if window is not None and before is not None and before[0] == started:
                percent = 100.0 * (seconds - before[1]) / window
                if percent < HEAVY_CPU_PERCENT:
                    continue
                found: dict[str, Any] = {
                    "pid": pid,
                    "name": name,
                    "cpu_percent": round(percent, 1),
                }
                if pid in ours:
                    if not _running_now(pid):
                        continue  # idle now: its busy time was an earlier job, or its start
                    found["dlscope"] = _OURS
                heavy.append(found)
        self._seen_at, self._used = now, used
        heavy.sort(key=lambda p: -float(p["cpu_percent"]))
        return window, heavy[:_HEAVY_LISTED]


class _StatFiles:
    """``/proc/<pid>/stat`` of each process, kept open between looks.

    Every run's start reads every process's: a read of a file kept open costs one system call
    where opening it costs three, and under load (every service busy with a job being
    dispatched) that was a third of the look's 3 ms. A file kept open stays its process's: once
    the process is gone it answers ESRCH, even if its pid was given to another, which is then
    opened afresh. At most ``_KEPT_OPEN`` are kept (a host with thousands of processes must
    not take the worker's descriptors); the others are opened each time, as before.
    """

    def __init__(self, proc: Path = _PROC, *, keep: int = _KEPT_OPEN) -> None:
        self._root = os.fspath(proc)
        self._keep = keep
        self._open: dict[str, int] = {}

    def read(self, pids: list[str]) -> Iterator[tuple[str, bytes]]:
        """Each of ``pids``' stat line that can be read, with its pid; files of processes
        no longer listed are closed."""
        for gone in self._open.keys() - set(pids):
            os.close(self._open.pop(gone))
        for pid in pids:
            kept = self._open.get(pid)
            if kept is not None:
                try:
                    yield pid, os.pread(kept, _STAT_BYTES, 0)
                    continue
                except OSError:  # that process is gone: the pid may be another's now
                    os.close(self._open.pop(pid))
            try:
                descriptor = os.open(f"{self._root}/{pid}/stat", os.O_RDONLY)
            except OSError:
                continue  # gone since the listing, or not ours to read
            try:
                stat = os.read(descriptor, _STAT_BYTES)
            except OSError:
                os.close(descriptor)
                continue
            if len(self._open) < self._keep:
                self._open[pid] = descriptor
            else:
                os.close(descriptor)
            yield pid, stat

    def close(self) -> None:
        for descriptor in self._open.values():
            os.close(descriptor)
        self._open.clear()

    def __del__(self) -> None:
        self.close()


def _processes(
    proc: Path = _PROC, files: _StatFiles | None = None
) -> Iterator[tuple[int, str, float, float]]:
    """Every process we may read: (pid, name, CPU seconds used, start time). From /proc
    directly where there is one (through ``files``, kept open between calls, if given):
    each run's start reads them all, and psutil takes two to four times as long
    (milliseconds)."""
    if not proc.is_dir():
        for process in psutil.process_iter(["name", "cpu_times", "create_time"]):
            times, started = process.info["cpu_times"], process.info["create_time"]
            if times is not None and started is not None:
                yield process.pid, process.info["name"], times.user + times.system, started
        return
    # Plain strings and descriptors, not pathlib: its objects cost more than the reads do.
    pids = [name for name in os.listdir(proc) if name.isdigit()]
    for pid, stat in (files or _StatFiles(proc, keep=0)).read(pids):
        # "pid (comm) state ppid ...": the name may hold spaces and parentheses.
        head, _, rest = stat.rpartition(b")")
        fields = rest.split(maxsplit=_START_FIELD + 1)  # not the 30 fields after it
        try:
            ticks, started = int(fields[11]) + int(fields[12]), float(fields[_START_FIELD])
        except (IndexError, ValueError):
            continue
        name = head.partition(b"(")[2].decode(errors="replace")
        # The start is in ticks since boot: as good as a time to tell a reused pid.
        yield int(pid), name, ticks / _TICKS_PER_S, started


def _running_now(pid: int, proc: Path = _PROC) -> bool:
    """Whether any thread of process ``pid`` is on a CPU or waiting for one at this instant (a
    framework's main thread may be waiting on its pool while the pool computes)."""
    try:
        for task in (proc / str(pid) / "task").iterdir():
            # /proc/<pid>/task/<tid>/stat: "tid (name) S ...", the name may hold spaces.
            if (task / "stat").read_text().rpartition(")")[2].split()[0] == "R":
                return True
    except (OSError, IndexError):
        return False
    return False


# One per process, because the rate is over the window between two looks; it holds no
# resource, only the previous reading.
_cpu_use = _CpuUse()


@functools.cache
def _host() -> dict[str, Any]:
    return {
        "host": host_name(),
        "cpu_model": _cpu_model(),
        "cpu_cores": psutil.cpu_count(logical=False) or os.cpu_count(),
        "cpu_threads": os.cpu_count(),
        "memory_bytes": psutil.virtual_memory().total,
        "os": f"{platform.system()} {platform.release()}",
    }


def _machine() -> dict[str, Any]:
    # Fresh dicts each time: a caller may change what it gets, never the cached reading.
    return {**_host(), "gpus": [asdict(gpu) for gpu in gpus()]}


def capabilities() -> dict[str, Any]:
    """What the worker offers, for the scheduler to route by (and a user to read)."""
    # Announcing also opens the first window of busy processes, which the first
    # evaluation's environment reports on.
    _cpu_use.look()
    return _machine()


def environment(
    framework: dict[str, Any],
    *,
    seed: int,
    build: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Everything needed to reproduce or question a measurement, read at its start.

    ``framework`` is the predictor's description (``framework``, ``framework_version``);
    ``seed`` seeds the evaluation's generated inputs; ``build`` is the framework's build as
    its framework process read it (``services.workers.framework.build``). The processes busy
    before the run are ``busy_before()``'s, read when the run starts.
    """
    load1, load5, load15 = os.getloadavg()
    name = str(framework.get("framework", ""))
    return {
        **_machine(),
        **framework,
        "libraries": _libraries(name),
        **(build or {}),
        "python": sys.version.split()[0],
        "platform": _platform(),
        "cpu_governor": _governor(),
        "load_average": [load1, load5, load15],
        "memory_available_bytes": psutil.virtual_memory().available,
        "dlscope_version": _distribution_version("dlscope") or "unknown",
        "numpy_version": _distribution_version("numpy"),
        "seed": seed,
    }


def busy_before(ours: Collection[int] = ()) -> dict[str, Any]:
    """The processes over ``HEAVY_CPU_PERCENT`` since the previous look (the worker's
    announcement, or the previous run's start), busiest first, and that window in seconds.

    ``ours`` are the framework processes of this process's workers: named among them when
    they are measuring now (another member of an experiment), left out when idle (this
    worker's own, between jobs). Both None when there is no window long enough to tell.
    """
    window, heavy = _cpu_use.look(ours)
    # None when unknown (no earlier look, or one too recent): the load average speaks.
    return {
        "heavy_processes": None if window is None else heavy,
        "heavy_processes_window_s": window,
    }
