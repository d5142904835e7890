"""The framework's own build, read in the framework process (where it is loaded) and sent
to the worker with ``Described``, for every evaluation's environment."""

from __future__ import annotations

import functools
import re
import sys
from typing import Any

__all__ = ["framework_build"]


@functools.cache
def _torch_build() -> dict[str, Any]:
    torch: Any = sys.modules["torch"]
    blas = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    return {
        "blas": blas.group(1) if blas else None,
        "mkl": torch.backends.mkl.is_available(),
        "mkldnn": torch.backends.mkldnn.is_available(),
        "openmp": torch.backends.openmp.is_available(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.version.cuda else None,
    }


def framework_build(framework: str) -> dict[str, Any]:
    """torch's build and threads, when this process has torch loaded (never imported here):
    read in the framework process, which sends it to the worker."""
    torch: Any = sys.modules.get("torch")
    if framework != "pytorch" or torch is None:
        return {}
    return {
        "torch_build": {
            **_torch_build(),
            "intra_op_threads": torch.get_num_threads(),
            "inter_op_threads": torch.get_num_interop_threads(),
        }
    }
