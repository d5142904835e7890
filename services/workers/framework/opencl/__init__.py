"""dlscope's OpenCL engine: ONNX graphs executed by its own OpenCL kernels.

graph (load, support check, order) -> folding (constants, batch norms) -> per input shape:
fusion -> lowering (kernel launches) -> planner (one arena, reused bytes) -> executor (bound
kernels, profiling events). devices picks the device and gets the program onto it.

The engine knows nothing of dlscope's predictors: ``services.workers.framework.predictors.
opencl`` is the thin adapter that makes it one (load, predict, profile, describe the device).
"""
