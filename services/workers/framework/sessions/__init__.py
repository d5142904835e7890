"""How a job is measured in the framework process: one session per kind of job, each with
one ``measure(job, inputs) -> Run``, sharing one skeleton (``measuring.opened``).

- ``inference.InferenceSession``: a model in this process, one framework call a query;
- ``generation.GenerationSession``: a generative model, one generation a query, through the
  generation port: the model in this process (``generator``) or a server's (``endpoint``).

``session_for`` is the one place that chooses.
"""

from __future__ import annotations

from services.workers.framework.frameworks import Framework
from services.workers.framework.generator import InProcessBackend
from services.workers.framework.sessions.generation import GenerationSession
from services.workers.framework.sessions.inference import InferenceSession, nvml_index
from services.workers.framework.sessions.measuring import MeasurementSession
from shared.errors import PredictorError
from shared.measurement.progress import OnStep, ignore_steps
from shared.messages import RunEvaluation

__all__ = ["GenerationSession", "InferenceSession", "MeasurementSession", "session_for"]


def session_for(
    framework: Framework, job: RunEvaluation, on_step: OnStep = ignore_steps
) -> MeasurementSession:
    """The session that measures ``job`` on ``framework``: from where the model runs (in
    this process, or in a server the framework reaches) and whether it generates."""
    generates = job.manifest.generation is not None
    if framework.backend is not None:  # the model runs in its server
        if not generates:
            raise PredictorError(
                f"{job.manifest.ref} is not a generative model: an endpoint measures text "
                "generation (a manifest with generation: and a tokenizer)"
            )
        return GenerationSession(framework.backend(), on_step)
    predictor = framework.create()
    if generates:
        return GenerationSession(InProcessBackend(predictor), on_step)
    return InferenceSession(
        predictor, on_step, gpu_index=nvml_index(framework.options.visible_gpus)
    )
