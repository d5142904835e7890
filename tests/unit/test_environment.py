"""What a worker says it runs on: its capabilities when it comes online, and the environment
of every evaluation, which is read at the evaluation's start and so must stay cheap."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from services.workers import environment as env
from services.workers.environment import Gpu, busy_before, capabilities, environment, gpus
from services.workers.framework.build import framework_build

ONNXRUNTIME = {"framework": "onnxruntime", "framework_version": version("onnxruntime")}


@pytest.fixture(autouse=True)
def fresh_readings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test starts as a new worker would: no GPU list read yet, no CPU reading kept."""
    gpus.cache_clear()
    monkeypatch.setattr(env, "_cpu_use", env._CpuUse())
    yield
    gpus.cache_clear()


@pytest.fixture
def no_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError


def fake_nvml() -> SimpleNamespace:
    """pynvml's calls as nvidia-ml-py answers them on a host with two GPUs."""
    names = [b"NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"]  # old pynvml answers bytes
    memory = [85_520_809_984, 42_949_672_960]
    calls: list[str] = []
    return SimpleNamespace(
        calls=calls,
        nvmlInit=lambda: calls.append("init"),
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlSystemGetDriverVersion=lambda: "550.54.15",
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: names[h],
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(total=memory[h], used=0),
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
    )


def nvidia_smi(folder: Path, script: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An ``nvidia-smi`` on the PATH that runs ``script`` (shell)."""
    folder.mkdir(exist_ok=True)
    smi = folder / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + textwrap.dedent(script))
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")


def test_capabilities_describe_the_machine() -> None:
    announced = capabilities()
    assert announced["cpu_threads"] >= 1
    assert announced["memory_bytes"] > 0
    assert announced["cpu_model"]
    assert isinstance(announced["gpus"], list)


def test_gpus_come_from_nvml_when_it_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = fake_nvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert gpus() == (
        Gpu(0, "NVIDIA H100 80GB HBM3", 85_520_809_984, "550.54.15", "GPU-0"),
        Gpu(1, "NVIDIA A100-SXM4-40GB", 42_949_672_960, "550.54.15", "GPU-1"),
    )
    assert nvml.calls == ["init", "shutdown"]  # NVML is not left initialised
    # Both where the scheduler routes and in every evaluation's environment.
    h100 = {
        "index": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "memory_bytes": 85_520_809_984,
        "driver_version": "550.54.15",
        "uuid": "GPU-0",
    }
    assert capabilities()["gpus"][0] == h100
    assert environment(ONNXRUNTIME, seed=0)["gpus"][0] == h100


def test_gpus_come_from_nvidia_smi_without_nvml(
    no_nvml: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nvidia_smi(
        tmp_path,
        """\
        [ "$1" = "--query-gpu=index,name,memory.total,driver_version,uuid" ] || exit 2
        echo "0, NVIDIA L4, 23034, 535.104.05, GPU-5f2e"
        """,
        monkeypatch,
    )
    assert gpus() == (Gpu(0, "NVIDIA L4", 23034 * 2**20, "535.104.05", "GPU-5f2e"),)
    assert environment(ONNXRUNTIME, seed=0)["gpus"][0]["name"] == "NVIDIA L4"


def test_no_gpu_tools_means_no_gpus_and_no_error(
    no_nvml: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi on it
    assert gpus() == ()
    assert capabilities()["gpus"] == []
    assert caplog.records == []


def test_a_broken_driver_means_no_gpus_and_a_warning(
    no_nvml: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    nvidia_smi(
        tmp_path,
        """\
        echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
        exit 9
        """,
        monkeypatch,
    )
    with caplog.at_level(logging.WARNING):
        assert gpus() == ()
    assert "nvidia-smi could not list the GPUs" in caplog.text


def test_the_environment_names_the_frameworks_own_libraries() -> None:
    described = environment(ONNXRUNTIME, seed=7)
    assert described["framework"] == "onnxruntime"
    assert described["libraries"]["onnxruntime"] == version("onnxruntime")
    assert described["libraries"]["onnx"] == version("onnx")
    assert described["libraries"]["protobuf"] == version("protobuf")
    assert "torch" not in described["libraries"]  # another framework's, not this one's
    assert described["seed"] == 7
    assert described["numpy_version"] == version("numpy")
    for key in ("cpu_governor", "load_average", "memory_available_bytes", "platform"):
        assert key in described


def test_a_pytorch_environment_has_torchs_build_and_threads() -> None:
    torch = pytest.importorskip("torch")
    build = framework_build("pytorch")  # as the framework process reads it
    described = environment({"framework": "pytorch", "framework_version": "x"}, seed=0, build=build)
    assert described["libraries"]["torch"] == version("torch")
    build = described["torch_build"]
    assert build["mkldnn"] == torch.backends.mkldnn.is_available()
    assert build["intra_op_threads"] == torch.get_num_threads()
    assert build["cuda"] == torch.version.cuda
    assert build["blas"]  # "mkl" or "open" on the usual builds


def test_reading_an_environment_imports_no_framework() -> None:
    # An onnxruntime worker must not pay for torch (seconds, hundreds of MB) to describe itself.
    probe = (
        "import sys\n"
        "from services.workers.environment import capabilities, environment\n"
        "capabilities(); environment({'framework': 'pytorch'}, seed=0)\n"
        "print(sorted({'torch', 'tensorflow', 'onnxruntime'} & set(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_a_busy_process_is_named_in_the_next_look(monkeypatch: pytest.MonkeyPatch) -> None:
    # The machine may be shared: a spinning process gets at least a fifth of a CPU.
    monkeypatch.setattr(env, "HEAVY_CPU_PERCENT", 20.0)
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        assert busy_before()["heavy_processes"] is None  # nothing to compare
        time.sleep(1.0)
        described = busy_before()
    finally:
        spinner.kill()
        spinner.wait()
    assert described["heavy_processes_window_s"] >= 1.0
    busy = {p["pid"]: p for p in described["heavy_processes"]}
    assert spinner.pid in busy
    assert busy[spinner.pid]["name"].startswith("python")
    assert 20.0 <= busy[spinner.pid]["cpu_percent"] <= 110.0


def test_a_window_too_short_to_tell_is_reported_unknown() -> None:
    capabilities()  # the worker's announcement opens the window
    described = busy_before()  # a few milliseconds later
    assert described["heavy_processes"] is None
    assert described["heavy_processes_window_s"] is None


def test_the_announcement_opens_the_first_window() -> None:
    capabilities()
    time.sleep(0.2)
    described = busy_before()
    assert described["heavy_processes_window_s"] >= 0.2
    assert isinstance(described["heavy_processes"], list)


def test_reading_the_environment_and_the_look_back_takes_under_50_ms() -> None:
    capabilities()
    environment(ONNXRUNTIME, seed=0)  # the first reading fills the caches
    times = []
    for _ in range(5):
        time.sleep(0.1)  # every reading a real one, each with a window to measure
        start = time.perf_counter()
        environment(ONNXRUNTIME, seed=0)
        busy_before()
        times.append(time.perf_counter() - start)
    # The best of five: the machine is shared, and one reading may wait for a CPU.
    assert min(times) < 0.05


# Busy until told (SIGUSR1), then idle: a framework process whose job has ended.
SPIN_UNTIL_TOLD = (
    "import signal, time\n"
    "told = []\n"
    "signal.signal(signal.SIGUSR1, lambda *_: told.append(1))\n"
    "while not told: pass\n"
    "time.sleep(60)\n"
)


def idle(process: subprocess.Popen[bytes]) -> bool:
    return bool(psutil.Process(process.pid).status() == psutil.STATUS_SLEEPING)


# By itself: it reads which processes were busy over a second, and beside another test
# worker (a vLLM server's engine, three spinning processes of its own) on two cores, the one
# it starts to measure may not get the tenth of a core it is judged by.
@pytest.mark.alone
def test_a_framework_process_measuring_now_is_named_and_one_idle_now_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Another worker's framework process, measuring: it competes like any other program.
    # This worker's own, busy earlier in the window (its previous job) and idle now: not.
    monkeypatch.setattr(env, "HEAVY_CPU_PERCENT", 10.0)
    monkeypatch.setattr(env, "_HEAVY_LISTED", 100)  # the machine may be shared: list them all
    measuring = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    finished = subprocess.Popen([sys.executable, "-c", SPIN_UNTIL_TOLD])
    stranger = subprocess.Popen([sys.executable, "-c", SPIN_UNTIL_TOLD])
    try:
        time.sleep(0.3)  # each has installed its handler and spins
        busy_before()  # opens the window
        time.sleep(1.0)
        for process in (finished, stranger):
            process.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 5
        while not (idle(finished) and idle(stranger)) and time.monotonic() < deadline:
            time.sleep(0.02)
        described = busy_before(ours={measuring.pid, finished.pid})
    finally:
        for process in (measuring, finished, stranger):
            process.kill()
            process.wait()
    busy = {p["pid"]: p for p in described["heavy_processes"]}
    assert busy[measuring.pid]["dlscope"].startswith("a dlscope framework process")
    assert finished.pid not in busy
    assert stranger.pid in busy  # busy in the window too, and not ours: named
    assert "dlscope" not in busy[stranger.pid]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="no /proc on this system")
def test_the_processes_read_from_proc_are_those_psutil_reads() -> None:
    """The start of every evaluation reads /proc itself (psutil costs milliseconds there);
    both readings must agree on who runs and what it used."""
    direct = {pid: (name, used) for pid, name, used, _ in env._processes()}
    portable = {pid: (name, used) for pid, name, used, _ in env._processes(Path("/no/proc"))}
    me = os.getpid()
    assert direct[me][0] == portable[me][0]
    assert abs(direct[me][1] - portable[me][1]) < 1.0  # CPU seconds, read a moment apart
    assert len(direct.keys() & portable.keys()) >= 0.9 * len(portable)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="no /proc on this system")
def test_stat_files_kept_open_read_fresh_and_are_closed_when_their_process_ends() -> None:
    files = env._StatFiles()
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    # Started here, so no other reader in this process has its stat file open.
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        first = {pid: used for pid, _, used, _ in env._processes(files=files)}
        assert spinner.pid in first
        deadline = time.monotonic() + 10
        while True:  # the file kept open reads the CPU time used since, not the first reading
            later = {pid: used for pid, _, used, _ in env._processes(files=files)}
            if later[spinner.pid] > first[spinner.pid] or time.monotonic() > deadline:
                break
        assert later[spinner.pid] > first[spinner.pid]
        assert f"/proc/{spinner.pid}/stat" in open_files()
        spinner.kill()
        spinner.wait()
        after = {pid for pid, _, _, _ in env._processes(files=files)}
        assert spinner.pid not in after
        assert f"/proc/{spinner.pid}/stat" not in open_files()
        assert f"/proc/{sleeper.pid}/stat" in open_files()  # the living are kept open
        files.close()
        assert f"/proc/{sleeper.pid}/stat" not in open_files()
    finally:
        for process in (spinner, sleeper):
            process.kill()
            process.wait()


def open_files() -> set[str]:
    found = set()
    for descriptor in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed by now
            found.add(os.readlink(f"/proc/self/fd/{descriptor}"))
    return found
