"""Trace levels: how deep one evaluation is traced, chosen per request (never per process).

    none         the worker adds no spans of its own (every message still carries the
                 evaluation's trace context, so every stored event keeps its trace id)
    application  the services' spans: the messaging hops, the worker's job
    model        + each traced query's pipeline steps: input, predict, post-process
    framework    + the layers/operators the framework's own profiler reports
    library      + the libraries under the framework (oneDNN primitives on a CPU)
    hardware     + kernels on the device (OpenCL profiling events; CUDA kernels on a GPU)
    full         every level above

Each level includes the ones before it. The headline statistics always come from a pass
traced at most at ``model`` level (in fact untraced: the timed loop never records a span);
``framework``, ``library`` and ``hardware`` each run as a separate, labelled pass after it,
on the same inputs, and report what they cost (XSP's leveled experimentation).
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = [
    "DEFAULT_TRACE_LEVEL",
    "DEFAULT_TRACE_QUERIES",
    "PROFILED_LEVELS",
    "TRACE_LEVELS",
    "ProfiledLevel",
    "TraceLevel",
    "includes",
    "profiled_levels",
]

TraceLevel = Literal["none", "application", "model", "framework", "library", "hardware", "full"]
TRACE_LEVELS: tuple[TraceLevel, ...] = get_args(TraceLevel)
DEFAULT_TRACE_LEVEL: TraceLevel = "model"
# The levels a profiler serves, each in a pass of its own.
ProfiledLevel = Literal["framework", "library", "hardware"]
PROFILED_LEVELS: tuple[ProfiledLevel, ...] = get_args(ProfiledLevel)
# Queries each traced pass runs (and exports as spans): enough for a median per layer, few
# enough that a deep trace of a large model stays a few thousand spans.
DEFAULT_TRACE_QUERIES = 5


def includes(level: TraceLevel, other: TraceLevel) -> bool:
    """Whether an evaluation traced at ``level`` records ``other``'s spans too."""
    return TRACE_LEVELS.index(level) >= TRACE_LEVELS.index(other)


def profiled_levels(level: TraceLevel) -> tuple[ProfiledLevel, ...]:
    """The profiled passes an evaluation at ``level`` runs, shallowest first."""
    return tuple(deeper for deeper in PROFILED_LEVELS if includes(level, deeper))
