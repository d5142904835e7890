"""The framework side of a worker: everything that runs in its framework process.

``session`` is the process's entry point (started by ``services.workers.isolation``, never
imported by the worker side: an import contract in pyproject.toml keeps it so); it imports the
framework through ``predictors`` and runs ``measurement`` (inputs, the scenario, ``accuracy``,
``fingerprint``, the traced passes of ``profiling``) for each job. ``opencl`` is dlscope's own
OpenCL engine, made a predictor by ``predictors.opencl``. The worker gets back the records
defined in ``services.workers.handover``.
"""
