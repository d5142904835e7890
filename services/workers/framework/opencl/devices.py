"""Which OpenCL device runs a model, and how its program gets there.

``hardware`` is the worker's: "fpga" takes an accelerator-type device (an FPGA board) and
its precompiled program binary, since FPGA flows cannot compile at run time; without such a
board, the CPU device emulates it (``emulated: true`` in every description). "cpu" and
"gpu" take a device of that type. Anything but a real board builds the program from the
kernel sources unless a binary is given.

The kernels are built with the device's tiling (tiling.py) as -D defines. A build that fails,
or that leaves kernels out (PoCL can answer a build with an empty program rather than an
error), is a PredictorError naming the device, the platform's version (PoCL's names its LLVM)
and the first lines of the build log, raised before any model is loaded.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pyopencl as cl

from services.workers.framework.opencl.tiling import Tiling
from shared.errors import PredictorError

__all__ = [
    "KERNEL_FILES",
    "DeviceInfo",
    "OpenCLDevice",
    "build_program",
    "compiler_problem",
    "device_capabilities",
    "kernel_source",
    "open_device",
]

# One program, in this order: common.cl defines what the others use.
KERNEL_FILES = (
    "common.cl",
    "conv.cl",
    "dense.cl",
    "elementwise.cl",
    "pooling.cl",
    "normalization.cl",
    "layout.cl",
)
# -cl-mad-enable lets "a * b + c" become one FMA (more accurate on CPUs, not less).
BUILD_OPTIONS = ["-cl-mad-enable"]
# Build log lines quoted in an error: enough for the first diagnostics, not a wall of them.
_LOG_LINES = 12

_DEVICE_TYPES = {
    "cpu": cl.device_type.CPU,
    "gpu": cl.device_type.GPU,
    "fpga": cl.device_type.ACCELERATOR,
}


def _type_name(device: cl.Device) -> str:
    names = {
        cl.device_type.CPU: "cpu",
        cl.device_type.GPU: "gpu",
        cl.device_type.ACCELERATOR: "accelerator",
    }
    return next((name for bit, name in names.items() if device.type & bit), "custom")


@dataclass(frozen=True)
class DeviceInfo:
    platform: str
    platform_version: str  # PoCL's names its own version and its LLVM's
    name: str
    vendor: str
    version: str
    driver_version: str
    device_type: str  # cpu, gpu, accelerator
    compute_units: int
    global_memory_bytes: int
    max_allocation_bytes: int
    local_memory_bytes: int
    float_vector_width: int  # preferred, as the device reports it
    emulated: bool  # a CPU device standing in for the FPGA board the worker was asked for

    @classmethod
    def of(cls, device: cl.Device, *, emulated: bool) -> DeviceInfo:
        return cls(
            platform=device.platform.name.strip(),
            platform_version=device.platform.version.strip(),
            name=device.name.strip(),
            vendor=device.vendor.strip(),
            version=device.version.strip(),
            driver_version=device.driver_version.strip(),
            device_type=_type_name(device),
            compute_units=int(device.max_compute_units),
            global_memory_bytes=int(device.global_mem_size),
            max_allocation_bytes=int(device.max_mem_alloc_size),
            local_memory_bytes=int(device.local_mem_size),
            float_vector_width=int(device.preferred_vector_width_float),
            emulated=emulated,
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class OpenCLDevice:
    """A device ready to run: its context, an in-order profiling queue and the program."""

    info: DeviceInfo
    context: cl.Context
    queue: cl.CommandQueue
    program: cl.Program
    program_from: str  # "source", or the binary's path
    alignment: int  # bytes: where sub-buffers may start
    tiling: Tiling  # what the program was built with; lowering sizes launches by it

    def check_fits(self, arena_bytes: int, constant_bytes: int, what: str) -> None:
        """Refuse, before anything runs, a plan the device has no room for."""
        mib = 1024**2
        needed = arena_bytes + constant_bytes
        if needed > self.info.global_memory_bytes:
            raise PredictorError(
                f"{what} needs {needed / mib:.1f} MiB of device memory ({arena_bytes / mib:.1f} "
                f"MiB of activations, {constant_bytes / mib:.1f} MiB of weights) but "
                f"{self.info.name} has {self.info.global_memory_bytes / mib:.1f} MiB; use a "
                "smaller batch or a device with more memory"
            )
        if arena_bytes > self.info.max_allocation_bytes:
            raise PredictorError(
                f"{what} needs one {arena_bytes / mib:.1f} MiB buffer for its activations but "
                f"{self.info.name} allocates at most {self.info.max_allocation_bytes / mib:.1f} "
                "MiB at once; use a smaller batch"
            )


def kernel_source() -> str:
    """Every kernel file, concatenated: the program built on devices that compile."""
    folder = resources.files(__package__).joinpath("kernels")
    return "\n".join(folder.joinpath(name).read_text() for name in KERNEL_FILES)


def _devices() -> list[cl.Device]:
    try:
        platforms = cl.get_platforms()
    except cl.Error:  # the ICD loader finds no platform at all
        return []
    return [device for platform in platforms for device in platform.get_devices()]


def _describe_all(devices: list[cl.Device]) -> str:
    if not devices:
        return "no OpenCL device at all"
    return "; ".join(
        f"{d.name.strip()} ({_type_name(d)}, {d.platform.name.strip()})" for d in devices
    )


def select_device(hardware: str, platform: str | None = None) -> tuple[cl.Device, bool]:
    """The device for ``hardware`` and whether it emulates an FPGA board (on the CPU).

    ``platform``: a substring of the platform name that narrows the choice (when several
    OpenCL implementations are installed)."""
    wanted = _DEVICE_TYPES.get(hardware)
    if wanted is None:
        raise PredictorError(f"the opencl worker runs on cpu, gpu or fpga, not {hardware!r}")
    devices = [
        d for d in _devices() if platform is None or platform.lower() in d.platform.name.lower()
    ]
    matching = [d for d in devices if d.type & wanted]
    if hardware == "fpga" and not matching:
        matching = [d for d in devices if d.type & cl.device_type.CUSTOM]
    if matching:
        return matching[0], False
    if hardware == "fpga":
        cpus = [d for d in devices if d.type & cl.device_type.CPU]
        if cpus:
            return cpus[0], True
    raise PredictorError(
        f"no OpenCL {hardware} device here"
        + (f" on a platform matching {platform!r}" if platform else "")
        + f"; found: {_describe_all(_devices())}"
    )


def _where(device: cl.Device) -> str:
    """The device and the OpenCL implementation under it (PoCL's version names its LLVM)."""
    return (
        f"{device.name.strip()} ({device.platform.name.strip()}: {device.platform.version.strip()})"
    )


def _build_log(program: cl.Program, device: cl.Device) -> str:
    try:
        log = program.get_build_info(device, cl.program_build_info.LOG)  # type: ignore[no-untyped-call]
        return str(log).strip()
    except (cl.Error, AttributeError):  # no program object left to ask
        return ""


def _first_lines(log: str) -> str:
    lines = [line[:300] for line in log.splitlines() if line.strip()]
    if not lines:
        return "(the build log is empty)"
    more = len(lines) - _LOG_LINES
    shown = "\n".join(f"  {line}" for line in lines[:_LOG_LINES])
    return shown + (f"\n  ... {more} more line(s)" if more > 0 else "")


def _check_kernels(program: cl.Program, source: str, what: str, device: cl.Device) -> None:
    needed = re.findall(r"__kernel\s+void\s+(\w+)", source)
    missing = sorted(set(needed) - set(program.kernel_names.split(";")))
    if missing:
        raise PredictorError(
            f"the OpenCL program {what} on {_where(device)} lacks kernels the engine needs: "
            f"{', '.join(missing)}; build log:\n{_first_lines(_build_log(program, device))}"
        )


def build_program(
    context: cl.Context, device: cl.Device, source: str, options: list[str]
) -> cl.Program:
    """``source`` built for ``device`` with every ``__kernel`` it defines, or a PredictorError
    that says where and why (never a program that would crash when run)."""
    program = cl.Program(context, source)
    with warnings.catch_warnings():
        # pyopencl turns any non-empty build log into a warning; what matters in it is
        # reported below.
        warnings.simplefilter("ignore", cl.CompilerWarning)
        try:
            program.build(options=options)
        except cl.Error as exc:
            log = _build_log(program, device) or str(exc)
            raise PredictorError(
                f"the OpenCL kernels do not build on {_where(device)}; build log:\n"
                f"{_first_lines(log)}"
            ) from exc
    log = _build_log(program, device)
    if "changes the ABI" in log:
        # A vector passed to a function whose ABI the target's features change: clang warns
        # and goes on, and the kernels would read their arguments from the wrong registers.
        raise PredictorError(
            f"the OpenCL kernels build on {_where(device)} with calls whose vector "
            f"arguments would be passed wrongly; build log:\n{_first_lines(log)}"
        )
    _check_kernels(program, source, "built from source", device)
    return program


def _load_binary(context: cl.Context, device: cl.Device, binary: Path) -> cl.Program:
    try:
        content = binary.read_bytes()
    except OSError as exc:
        raise PredictorError(f"cannot read the OpenCL program binary {binary}: {exc}") from exc
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", cl.CompilerWarning)
            program: cl.Program = cl.Program(context, [device], [content]).build(
                options=BUILD_OPTIONS
            )
    except cl.Error as exc:
        raise PredictorError(
            f"the OpenCL program binary {binary} does not load on {_where(device)}: it was "
            f"built for another device or is not a program binary ({exc}). Build it for this "
            "device from dlscope's kernels (services/workers/framework/opencl/kernels/*.cl)."
        ) from exc
    _check_kernels(program, kernel_source(), str(binary), device)
    return program


def _program_tiling(context: cl.Context, queue: cl.CommandQueue, program: cl.Program) -> Tiling:
    """The tiling a program was built with, as its ``tiling`` kernel reports it: a binary
    built ahead of time may have been built for another vector width than this device's."""
    values = np.zeros(2, np.int32)
    out = cl.Buffer(context, cl.mem_flags.WRITE_ONLY, values.nbytes)
    kernel = cl.Kernel(program, "tiling")
    kernel.set_args(out)
    cl.enqueue_nd_range_kernel(queue, kernel, (1,), (1,))
    cl.enqueue_copy(queue, values, out, is_blocking=True)
    out.release()
    return Tiling(channels=int(values[0]), pixels=int(values[1]))


def open_device(
    hardware: str, *, binary: Path | None = None, platform: str | None = None
) -> OpenCLDevice:
    device, emulated = select_device(hardware, platform)
    if hardware == "fpga" and not emulated and binary is None:
        raise PredictorError(
            f"{device.name.strip()} is an FPGA board: its program cannot be compiled at run "
            "time; name its precompiled binary (.aocx, .xclbin) with DLSCOPE_OPENCL_BINARY"
        )
    try:
        context = cl.Context([device])
        queue = cl.CommandQueue(
            context, device, properties=cl.command_queue_properties.PROFILING_ENABLE
        )
    except cl.Error as exc:
        raise PredictorError(f"cannot open OpenCL device {device.name.strip()}: {exc}") from exc
    if binary is None:
        tiling = Tiling.for_vector_width(int(device.preferred_vector_width_float))
        program = build_program(
            context, device, kernel_source(), BUILD_OPTIONS + tiling.build_options()
        )
    else:
        program = _load_binary(context, device, binary)
        tiling = _program_tiling(context, queue, program)
    return OpenCLDevice(
        info=DeviceInfo.of(device, emulated=emulated),
        context=context,
        queue=queue,
        program=program,
        program_from=str(binary) if binary else "source",
        alignment=max(64, int(device.mem_base_addr_align) // 8),
        tiling=tiling,
    )


def device_capabilities(hardware: str, platform: str | None = None) -> dict[str, Any]:
    """What a worker announces about its OpenCL device (no program is built)."""
    device, emulated = select_device(hardware, platform)
    return {"opencl": DeviceInfo.of(device, emulated=emulated).as_dict()}


# The smallest program an OpenCL C compiler builds. A device that cannot build it compiles
# nothing here: PoCL's LLVM, for one, targets "generic" on a CPU newer than it knows, and
# refuses that target (seen: PyPI's PoCL 3.0 with LLVM 14 on an AMD EPYC of family 26).
_PROBE = "__kernel void probe(__global float *x) { x[get_global_id(0)] += 1.0f; }"


def compiler_problem(hardware: str, platform: str | None = None) -> str | None:
    """Why ``hardware``'s OpenCL device runs no program built here, or None when it builds
    one. An absent device, or an FPGA board (its programs are precompiled), is not this
    question's: None, and opening the device says what is wrong with it."""
    try:
        device, emulated = select_device(hardware, platform)
    except PredictorError:
        return None
    if hardware == "fpga" and not emulated:
        return None
    try:
        build_program(cl.Context([device]), device, _PROBE, [])
    except cl.Error as exc:
        return f"cannot open OpenCL device {_where(device)}: {exc}"
    except PredictorError as exc:
        return f"its compiler builds no kernel, not even a one-line one: {exc}"
    return None
