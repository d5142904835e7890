"""How the kernels are shaped for a device, decided once and told to both sides.

The convolution's register tile is ``channels`` output channels by ``pixels`` output pixels;
``pixels`` is also the float vector width of the accumulators and of the dense kernel's
loads. It is chosen from the device's preferred float vector width, handed to the OpenCL
compiler as ``-D`` defines (kernels/common.cl reads them) and to lowering, which sizes the
launches and packs the weights with the same values: the two cannot disagree.

``channels`` stays 16 on every device: it is the packed weight layout ([G][ceil(M/16)][K][16],
lowering/conv.py), one 64-byte line of weights per k, which a program binary built ahead of
time for a board was also built against; and 16 multiply-adds per panel load hide the load on
every CPU and GPU we know. Only ``pixels`` follows the device.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["VECTOR_WIDTHS", "Tiling"]

# The vector widths the kernels are written for (OpenCL C has float2..float16; 2 would make
# tiles too narrow to pay for their panel).
VECTOR_WIDTHS = (4, 8, 16)


@dataclass(frozen=True)
class Tiling:
    channels: int = 16
    pixels: int = 16

    @classmethod
    def for_vector_width(cls, preferred: int) -> Tiling:
        """The tiling for a device whose preferred float vector width is ``preferred``: the
        widest of VECTOR_WIDTHS not above it (4 for a GPU that prefers scalars)."""
        return cls(pixels=max([w for w in VECTOR_WIDTHS if w <= preferred], default=4))

    def build_options(self) -> list[str]:
        """The defines the kernels are compiled with (kernels/common.cl)."""
        return [f"-DDLSCOPE_TM={self.channels}", f"-DDLSCOPE_TP={self.pixels}"]
