"""Whether dlscope's OpenCL kernels build on this machine, asked as a worker's framework
process asks it: in a process of its own, since a device compiler that fails may not leave
cleanly. PoCL's LLVM may not know a CPU newer than itself (LLVM 14 refuses AMD's Zen 5 as
``unknown target CPU``), so a test or a benchmark that runs every framework runs OpenCL only
where this says nothing."""

from __future__ import annotations

import functools
import subprocess
import sys

from shared.config import REPOSITORY_ROOT

__all__ = ["opencl_problem"]


@functools.cache
def opencl_problem(hardware: str = "cpu") -> str | None:
    """Why OpenCL runs no program on this machine's ``hardware`` device (its compiler builds
    no kernel), or None."""
    probe = (
        "from services.workers.framework.opencl.devices import compiler_problem; "
        f"print(compiler_problem({hardware!r}) or '', end='')"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPOSITORY_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if found.returncode != 0:
        return f"the OpenCL probe itself failed: {found.stderr.strip()[-500:]}"
    return found.stdout or None
