"""Every dlscope service, named once: how a process that runs several builds it (the embedded
mode) and which module runs it alone (``dlscope serve NAME``, ``python -m services.NAME``,
and the test and benchmark harness, which starts each in its own process).

Start order matters where services share a broker: the recorder first, so no event is
published before its queue exists; the gateway last, so no request arrives before everything
that serves it is up. ``CONTROL_PLANE`` and ``SERVICES`` are in that order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from shared.messages import Framework, Hardware
from shared.runtime import Runtime, Service

__all__ = [
    "CONTROL_PLANE",
    "SERVICES",
    "build_control_plane",
    "build_gateway",
    "build_worker",
    "main_module",
    "package",
]

# The services every deployment runs once, in start order (the gateway apart: it goes last).
CONTROL_PLANE: Final = ("recorder", "registry", "analyzer", "scheduler")
# Every service a process can run, in start order; the worker once per framework and device.
SERVICES: Final = (*CONTROL_PLANE, "worker", "gateway")


def package(name: str) -> str:
    """The package of service ``name``: ``python -m <package>`` runs it alone."""
    if name not in SERVICES:
        raise ValueError(f"unknown service {name!r}; choose one of: {', '.join(SERVICES)}")
    return f"services.{'workers' if name == 'worker' else name}"


def main_module(name: str) -> str:
    """The module whose ``main(argv)`` runs service ``name`` alone in a process."""
    return f"{package(name)}.main"


def _recorder(runtime: Runtime) -> Service:
    from services.recorder import RecorderService

    return RecorderService(runtime)


def _registry(runtime: Runtime) -> Service:
    from services.registry import RegistryService

    return RegistryService(runtime)


def _analyzer(runtime: Runtime) -> Service:
    from services.analyzer import AnalyzerService

    return AnalyzerService(runtime)


def _scheduler(runtime: Runtime) -> Service:
    from services.scheduler import SchedulerService

    return SchedulerService(runtime)


# Imported when built: a command that needs the registry alone does not load the scheduler.
_BUILDERS: Final[dict[str, Callable[[Runtime], Service]]] = {
    "recorder": _recorder,
    "registry": _registry,
    "analyzer": _analyzer,
    "scheduler": _scheduler,
}


def build_control_plane(runtime: Runtime, names: tuple[str, ...] = CONTROL_PLANE) -> list[Service]:
    """The control-plane services ``names`` on ``runtime``, in start order."""
    return [_BUILDERS[name](runtime) for name in CONTROL_PLANE if name in names]


def build_worker(runtime: Runtime, framework: Framework, hardware: Hardware) -> Service:
    from services.workers import WorkerService

    return WorkerService(runtime, framework=framework, hardware=hardware)


def build_gateway(runtime: Runtime, host: str, port: int) -> Service:
    from services.gateway import GatewayService

    return GatewayService(runtime, host=host, port=port)
