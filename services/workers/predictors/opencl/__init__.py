"""The OpenCL worker's engine: ONNX graphs executed by dlscope's own OpenCL kernels.

graph (load, support check, order) -> folding (constants, batch norms) -> per input shape:
fusion -> lowering (kernel launches) -> planner (one arena, reused bytes) -> executor (bound
kernels, profiling events). devices picks the device and gets the program onto it.
"""

from services.workers.predictors.opencl.predictor import (
    OpenCLPredictor,
    device_capabilities,
    framework_version,
    unusable,
)

__all__ = ["OpenCLPredictor", "device_capabilities", "framework_version", "unusable"]
