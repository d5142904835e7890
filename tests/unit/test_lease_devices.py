"""Which device a worker leases: its CPU cores, a GPU by index, an OpenCL device."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.workers.devices import Device, cpu_device, device_for
from shared.config import Settings

POCL = {
    "opencl": {
        "platform": "Portable Computing Language",
        "name": "cpu-haswell-AMD EPYC",
        "device_type": "cpu",
        "emulated": True,
    }
}
BOARD = {
    "opencl": {
        "platform": "Intel(R) FPGA SDK for OpenCL(TM)",
        "name": "p520_max_sg280l : BittWare Stratix 10",
        "device_type": "accelerator",
    }
}


def test_a_cpu_lease_is_one_lock_per_core_in_ascending_order() -> None:
    assert cpu_device([1, 0]) == Device("cpu0-1", ("cpu0", "cpu1"))
    assert cpu_device({5, 0, 2, 3}) == Device("cpu0,2-3,5", ("cpu0", "cpu2", "cpu3", "cpu5"))
    assert cpu_device([7]).name == "cpu7"


@pytest.mark.parametrize("hardware", ["cpu", "gpu", "fpga"])
def test_an_opencl_cpu_device_leases_the_cores(hardware: str) -> None:
    # PoCL, and the FPGA flow emulated on it: the measurement runs on the CPU's cores.
    assert device_for(hardware, POCL, cores=[0, 1], visible_gpus=None) == cpu_device([0, 1])


def test_an_opencl_accelerator_is_leased_by_platform_and_name() -> None:
    device = device_for("fpga", BOARD, cores=[0, 1], visible_gpus=None)
    assert (
        device.name == "opencl-intel-r-fpga-sdk-for-opencl-tm-p520-max-sg280l-bittware-stratix-10"
    )
    assert device.locks == (device.name,)


@pytest.mark.parametrize(
    ("visible", "name"),
    [(None, "gpu0"), ("", "gpu0"), ("2,3", "gpu2"), (" 1 ", "gpu1"), ("GPU-8f3a", "gpu-gpu-8f3a")],
)
def test_a_gpu_is_leased_by_the_first_index_cuda_may_use(visible: str | None, name: str) -> None:
    assert device_for("gpu", {}, cores=[0], visible_gpus=visible) == Device(name, (name,))


def test_a_cpu_worker_leases_its_cores_whatever_gpus_it_sees() -> None:
    assert device_for("cpu", {}, cores=[2, 3], visible_gpus="0") == cpu_device([2, 3])


def test_the_lease_directory_is_per_host_name_unless_set(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("DLSCOPE_LEASE_DIR", raising=False)
    monkeypatch.setattr("socket.gethostname", lambda: "host-a")
    assert Settings().resolved_lease_dir.name == "dlscope-leases-host-a"
    monkeypatch.setenv("DLSCOPE_LEASE_DIR", str(tmp_path))
    assert Settings().resolved_lease_dir == tmp_path
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert Settings().cuda_visible_devices == "3"
