"""Predictor adapters, one module a framework, each imported only by the framework process
that runs it (``frameworks``), so a worker never pays for another's framework. The port they
implement is ``services.workers.framework.ports``."""

from services.workers.framework.ports import LayerProfiler, Predictor, Profiles, Unavailable

__all__ = ["LayerProfiler", "Predictor", "Profiles", "Unavailable"]
