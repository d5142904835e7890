"""The OpenCL worker's own settings: the worker reads them once (``DLSCOPE_OPENCL_BINARY``,
``DLSCOPE_OPENCL_PLATFORM``, ``shared.config.Settings``) and its framework process makes its
predictors with them (``frameworks``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

__all__ = ["OpenCLSettings"]


class OpenCLSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    # The precompiled program (.aocx, .xclbin, or any OpenCL program binary) to load instead
    # of building the kernels from source; required on a real FPGA board.
    binary: Path | None = None
    # A substring of the OpenCL platform to use, when several are installed.
    platform: str | None = None
