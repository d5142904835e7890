"""Leveled tracing, in the framework process: the traced passes after the timed one.

    timed pass (untraced: the headline statistics) ... accuracy, fingerprint, then
    -> model       queries with their pipeline steps timed: input, predict, post-process
    -> framework   \
    -> library      } each its own pass under its profiler, on the same inputs
    -> hardware    /

Before each pass, the same queries run untraced on the same inputs: the reference whose
median the pass's median is divided by, taken in the same conditions (caches, clocks, load).

Each level an evaluation asks for is reported: captured (with its source, the median query
time while traced and its ratio to the untraced median: the level's overhead) or why not
(a level the framework cannot serve here is a reason, never an error). Nothing here talks to
a tracer: the passes come back as records on the wall clock, and the worker turns them into
spans under the job's span (``services.workers.tracing``).
"""

from __future__ import annotations

import bisect
import statistics
import time
from collections.abc import Callable, Sequence

import numpy as np

from services.workers.framework.layer_stats import layer_stats
from services.workers.framework.ports import LayerProfiler, Predictor, Profiles, Unavailable
from services.workers.handover import TracedPass, TracedQuery, TracedStep, Tracing
from shared.measurement.progress import OnStep, Step
from shared.messages import (
    LayerTiming,
    LevelOutcome,
    ProfiledLevel,
    ProfiledPass,
    TraceLevel,
)
from shared.messages.tracing import includes, profiled_levels

__all__ = [
    "MAX_TRACED_LAYERS",
    "PROFILER_WARMUP",
    "trace",
]

Inputs = dict[str, np.ndarray]
Predict = Callable[[Inputs], list[np.ndarray]]

# The untraced reference before each pass runs at least this many queries.
REFERENCE_QUERIES = 10
# Queries a profiler runs before the profiled ones, not counted: a profiling session of its
# own (ONNX Runtime's) starts cold, and its first queries (thread pool, arena) run slow.
PROFILER_WARMUP = 3
# Layer records handed back for spans, over every pass: a deep trace of a large model stays
# a few thousand spans (the statistics use every record, whatever this keeps).
MAX_TRACED_LAYERS = 10_000


def trace(
    predictor: Predictor,
    level: TraceLevel,
    *,
    queries: int,
    inputs: Inputs,
    make_inputs: Callable[[], Inputs],
    postprocess: Callable[[list[np.ndarray]], object],
    on_step: OnStep,
    model_pass: Callable[[int], TracedPass] | None = None,
) -> Tracing:
    """The passes ``level`` asks for, each of ``queries`` queries on ``inputs`` (the model pass
    makes its inputs with ``make_inputs`` each query, as a pipeline would). ``model_pass``
    replaces the model level's pass where a query is more than one call (a generation: its
    prefill and decode steps); its overhead is its first step's against ``inputs``."""
    if level == "none":
        return Tracing(level)
    outcomes = [LevelOutcome(level="application", captured=True, source="dlscope's services")]
    if not includes(level, "model"):
        return Tracing(level, tuple(outcomes))
    reference_queries = max(queries, REFERENCE_QUERIES)
    on_step(Step("tracing", "tracing at the model level"))
    reference = _reference(predictor.predict, inputs, reference_queries)
    if model_pass is None:
        model = _model_pass(predictor.predict, queries, inputs, make_inputs, postprocess)
        predicted = [s for q in model.queries for s in q.steps if s.name == "predict"]
    else:
        model = model_pass(queries)
        predicted = [q.steps[0] for q in model.queries if q.steps]
    predict_p50 = _median([s.end_ns - s.start_ns for s in predicted])
    outcomes.append(_captured("model", model.source, queries, predict_p50, reference))
    passes, profiled = [model], []
    budget = MAX_TRACED_LAYERS
    for deeper in profiled_levels(level):
        profiler = (
            predictor.profiler(deeper)
            if isinstance(predictor, Profiles)
            else Unavailable(f"the {predictor.framework} predictor has no profiler")
        )
        if isinstance(profiler, Unavailable):
            outcomes.append(LevelOutcome(level=deeper, captured=False, reason=profiler.reason))
            continue
        on_step(Step("tracing", f"tracing at the {deeper} level ({profiler.source})"))
        reference = _reference(predictor.predict, inputs, reference_queries)
        try:
            traced, durations = _profiled_pass(profiler, deeper, inputs, queries)
        except Exception as exc:  # a profiler's failure costs its level, not the evaluation
            outcomes.append(
                LevelOutcome(
                    level=deeper,
                    captured=False,
                    source=profiler.source,
                    reason=f"{profiler.source} failed: {type(exc).__name__}: {exc}",
                )
            )
            continue
        if not any(query.layers for query in traced.queries):
            outcomes.append(
                LevelOutcome(
                    level=deeper,
                    captured=False,
                    source=profiler.source,
                    reason=f"{profiler.source} reported nothing for this model (the "
                    "framework ran none of it through what this profiler sees)",
                )
            )
            continue
        traced_p50 = _median(durations)
        layers, dropped = layer_stats(traced.queries)
        profiled.append(
            ProfiledPass(
                level=deeper,
                source=profiler.source,
                queries=queries,
                batch_size=_batch_size(inputs),
                query_p50_ns=traced_p50,
                layers=layers,
                layers_dropped=dropped,
            )
        )
        outcomes.append(_captured(deeper, profiler.source, queries, traced_p50, reference))
        kept = sum(len(query.layers) for query in traced.queries)
        if kept > budget:
            traced = _without_layers(traced)
        else:
            budget -= kept
        passes.append(traced)
    return Tracing(level, tuple(outcomes), tuple(passes), tuple(profiled))


def _captured(
    level: TraceLevel, source: str, queries: int, traced_p50: float, reference: float
) -> LevelOutcome:
    return LevelOutcome(
        level=level,
        captured=True,
        source=source,
        queries=queries,
        traced_p50_ns=traced_p50,
        untraced_p50_ns=reference,
        overhead=traced_p50 / reference if reference > 0 else None,
    )


def _reference(predict: Predict, inputs: Inputs, queries: int) -> float:
    """The median time of ``queries`` untraced queries on ``inputs``, run just before a traced
    pass (after one not counted): the base of that pass's ratio, in the same conditions."""
    durations = []
    for index in range(queries + 1):
        start = time.perf_counter_ns()
        predict(inputs)
        if index:
            durations.append(time.perf_counter_ns() - start)
    return _median(durations)


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def _batch_size(inputs: Inputs) -> int:
    first = next(iter(inputs.values()))
    return int(first.shape[0]) if first.ndim else 1


def _model_pass(
    predict: Predict,
    queries: int,
    inputs: Inputs,
    make_inputs: Callable[[], Inputs],
    postprocess: Callable[[list[np.ndarray]], object],
) -> TracedPass:
    """Queries as a pipeline runs them, each step timed on the wall clock: the batch made
    (pre-processed from the dataset, or generated), predicted, post-processed.

    The prediction runs on the pass's own inputs, which hold the same values as the batch just
    made: a fresh buffer, cold in the caches, would make the predict step slower than the
    untraced reference for a reason that is not tracing, and its ratio would be wrong."""
    traced = []
    for index in range(queries):
        start = time.time_ns()
        make_inputs()
        made = time.time_ns()
        outputs = predict(inputs)
        predicted = time.time_ns()
        postprocess(outputs)
        end = time.time_ns()
        steps = (
            TracedStep("input", start, made),
            TracedStep("predict", made, predicted),
            TracedStep("post-process", predicted, end),
        )
        traced.append(TracedQuery(index, start, end, steps=steps))
    return TracedPass("model", "dlscope's query pipeline", tuple(traced))


def _profiled_pass(
    profiler: LayerProfiler, level: ProfiledLevel, inputs: Inputs, queries: int
) -> tuple[TracedPass, list[int]]:
    """``queries`` queries under ``profiler``, each with the layers that started within it;
    and each query's duration."""
    windows: list[tuple[int, int]] = []
    durations: list[int] = []
    profiler.start()
    try:
        for _ in range(PROFILER_WARMUP):
            profiler.predict(inputs)
        for _ in range(queries):
            start, began = time.time_ns(), time.perf_counter_ns()
            profiler.predict(inputs)
            durations.append(time.perf_counter_ns() - began)
            windows.append((start, time.time_ns()))
    finally:
        layers = profiler.stop()
    starts = [start for start, _ in windows]
    by_query: list[list[LayerTiming]] = [[] for _ in windows]
    for layer in layers:
        at = bisect.bisect_right(starts, layer.start_ns) - 1
        if at >= 0 and layer.start_ns <= windows[at][1]:  # else: warm-up, or between queries
            by_query[at].append(layer)
    traced = tuple(
        TracedQuery(index, start, end, layers=tuple(found))
        for index, ((start, end), found) in enumerate(zip(windows, by_query, strict=True))
    )
    return TracedPass(level, profiler.source, traced), durations


def _without_layers(traced: TracedPass) -> TracedPass:
    queries = tuple(
        TracedQuery(q.index, q.start_ns, q.end_ns, steps=q.steps) for q in traced.queries
    )
    return TracedPass(traced.level, traced.source, queries, layers_kept=False)
