"""The OpenCL worker's own settings, typed and read once (prefix ``DLSCOPE_OPENCL_``).

The worker builds predictors without arguments, so a predictor that is not handed its
settings reads them here, once, when it is made.
"""

from __future__ import annotations

from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["OpenCLSettings"]


class OpenCLSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DLSCOPE_OPENCL_", frozen=True, extra="ignore")

    # The precompiled program (.aocx, .xclbin, or any OpenCL program binary) to load instead
    # of building the kernels from source; required on a real FPGA board.
    binary: Path | None = None
    # A substring of the OpenCL platform to use, when several are installed.
    platform: str | None = None
