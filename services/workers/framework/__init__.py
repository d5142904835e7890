"""The framework side of a worker: everything that runs in its framework process.

Layers, each importing only those below it (an import contract in pyproject.toml keeps it so;
the worker side imports none of them):

    session      the process's entry point, started by ``services.workers.isolation``: it
                 makes its framework and runs each call the worker sends
    sessions     how a job is measured, chosen once by ``sessions.session_for``: inference
                 or generation, one ``measure(job, inputs) -> Run`` each over one skeleton
    frameworks   what the process is: a framework that runs models here, or one that
                 measures a model served elsewhere; what it announces about itself
    predictors | generator | endpoint
                 the ports' adapters: one framework in process; the in-process generation
                 loop over a predictor; a served model over HTTP
    profiling    the traced passes after the timed one (over the predictor port)
    ports        ``Predictor`` and ``GenerationBackend``: what the sessions drive
    shared.measurement
                 the load shapes, drivers and statistics every session uses

``opencl`` is dlscope's own OpenCL engine, made a predictor by ``predictors.opencl``. The
worker gets back the records defined in ``services.workers.handover``.
"""
