"""Install size and time: the control plane (`pip install .`) against one worker's
(`.[onnxruntime]`) and everything (`.[all]`, what every install was before the extras).

Each configuration gets a fresh virtualenv and `pip install` of a wheel built from a copy of
this tree (as from a fresh clone), with pip's cache as this machine has it (warm: the wheels
were downloaded before; the torch wheel lies on this machine's disk), so the time is
resolving, unpacking and byte-compiling rather than downloading. Size is the virtualenv's
site-packages on disk. Then what the install can import: the control plane's services, and
which frameworks are there.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.deployment import copy_package_sources

__all__ = ["run"]

CONFIGURATIONS = {"control plane": "", "onnxruntime worker": "[onnxruntime]", "all": "[all]"}
FRAMEWORK_MODULES = ("onnxruntime", "onnx", "torch", "tensorflow", "pyopencl", "mlperf_loadgen")
CONTROL_PLANE = (
    "import dlscope.cli, services.gateway.main, services.scheduler.main, "
    "services.registry.main, services.recorder.main, services.analyzer.main"
)


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def _cpu_model() -> str:
    lscpu = shutil.which("lscpu")
    if lscpu is None:
        return "unknown"
    for line in subprocess.run([lscpu], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def _install(source: Path, extras: str, workdir: Path) -> dict[str, Any]:
    venv = workdir / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    started = time.perf_counter()
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", f"{source}{extras}"],
        check=True,
        cwd=workdir,
        capture_output=True,
    )
    seconds = time.perf_counter() - started
    [site] = list((venv / "lib").glob("python3*/site-packages"))
    probe = (
        "import importlib.util, json, sys; print(json.dumps("
        "{m: importlib.util.find_spec(m) is not None for m in sys.argv[1:]}))"
    )
    found = subprocess.run(
        [str(python), "-c", probe, *FRAMEWORK_MODULES],
        check=True,
        capture_output=True,
        text=True,
        cwd=workdir,
    )
    imports = subprocess.run([str(python), "-c", CONTROL_PLANE], capture_output=True, cwd=workdir)
    return {
        "install_s": round(seconds, 1),
        "site_packages_mb": round(_size(site) / 1e6, 1),
        "distributions": len(list(site.glob("*.dist-info"))),
        "frameworks": json.loads(found.stdout),
        "control_plane_imports": imports.returncode == 0,
    }


def _measure(configurations: dict[str, str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="dlscope-install-") as temporary:
        workdir = Path(temporary)
        source = workdir / "source"
        copy_package_sources(source)
        results = {}
        for label, extras in configurations.items():
            target = workdir / label.replace(" ", "-")
            target.mkdir()
            results[label] = _install(source, extras, target)
            shutil.rmtree(target)
            print(f"{label}: {results[label]}", flush=True)
    # Against the largest configuration measured: everything, in a full run.
    everything = results[list(configurations)[-1]]
    return {
        "cpu": _cpu_model(),
        "configurations": results,
        "control_plane_vs_all": {
            "size": round(
                results["control plane"]["site_packages_mb"] / everything["site_packages_mb"], 3
            ),
            "time": round(results["control plane"]["install_s"] / everything["install_s"], 3),
        },
    }


async def run(configurations: tuple[str, ...] = tuple(CONFIGURATIONS)) -> dict[str, Any]:
    """Each of ``configurations`` (names of ``CONFIGURATIONS``; the control plane, which the
    others are compared with, always) installed in turn."""
    chosen = {"control plane": "", **{name: CONFIGURATIONS[name] for name in configurations}}
    return await asyncio.to_thread(_measure, chosen)
