"""The traced passes of one evaluation as spans, under the worker's span of the job.

    trace pass: model          dlscope.trace_level=model, the pass's overhead
      query 0                  on the wall clock, as the framework process measured it
        input / predict / post-process      (a generation: prefill, then one decode per token)
    trace pass: framework      dlscope.trace_level=framework, the profiler, the overhead
      query 0
        Conv conv1             one span per layer the profiler reported, where it ran
        ...

The framework process measured everything on the wall clock; the spans are made here, with
those times, so the framework process needs no tracer and no exporter. A level that was asked
for and not captured is an event on the job's span, with the reason.
"""

from __future__ import annotations

from collections import Counter

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, Tracer
from opentelemetry.util.types import AttributeValue

from services.workers.handover import TracedPass, TracedQuery, Tracing
from shared.messages import LayerTiming, LevelOutcome, TraceLevel

__all__ = ["record_trace"]

LEVEL = "dlscope.trace_level"


def record_trace(tracer: Tracer, tracing: Tracing) -> list[LevelOutcome]:
    """``tracing``'s passes as spans under the current span; its outcomes, each with the
    number of spans its level added."""
    job = trace.get_current_span()
    spans: Counter[TraceLevel] = Counter()
    outcomes = {outcome.level: outcome for outcome in tracing.outcomes}
    for traced in tracing.passes:
        if traced.queries:
            spans[traced.level] += _record_pass(tracer, traced, outcomes.get(traced.level))
    for outcome in tracing.outcomes:
        if not outcome.captured:
            job.add_event(
                "trace level not captured",
                {LEVEL: outcome.level, "dlscope.trace.reason": outcome.reason or ""},
            )
    return [
        outcome.model_copy(update={"spans": spans[outcome.level]}) for outcome in tracing.outcomes
    ]


def _record_pass(tracer: Tracer, traced: TracedPass, outcome: LevelOutcome | None) -> int:
    attributes: dict[str, AttributeValue] = {
        LEVEL: traced.level,
        "dlscope.trace.source": traced.source,
        "dlscope.trace.queries": len(traced.queries),
    }
    if outcome is not None and outcome.overhead is not None:
        attributes["dlscope.trace.overhead"] = outcome.overhead
    if not traced.layers_kept:
        attributes["dlscope.trace.layers_dropped"] = True  # past the span budget
    pass_span = tracer.start_span(
        f"trace pass: {traced.level}",
        start_time=traced.queries[0].start_ns,
        attributes=attributes,
    )
    context = trace.set_span_in_context(pass_span)
    count = 1
    for query in traced.queries:
        count += _record_query(tracer, traced.level, query, context)
    pass_span.end(end_time=traced.queries[-1].end_ns)
    return count


def _record_query(tracer: Tracer, level: TraceLevel, query: TracedQuery, context: Context) -> int:
    span = tracer.start_span(
        f"query {query.index}",
        context=context,
        start_time=query.start_ns,
        attributes={LEVEL: level, "dlscope.query.index": query.index},
    )
    inside = trace.set_span_in_context(span)
    for step in query.steps:
        tracer.start_span(
            step.name, context=inside, start_time=step.start_ns, attributes={LEVEL: level}
        ).end(end_time=step.end_ns)
    for layer in query.layers:
        _record_layer(tracer, level, layer, inside)
    span.end(end_time=query.end_ns)
    return 1 + len(query.steps) + len(query.layers)


def _record_layer(tracer: Tracer, level: TraceLevel, layer: LayerTiming, context: Context) -> Span:
    attributes: dict[str, AttributeValue] = {
        LEVEL: level,
        "dlscope.layer.node": layer.node,
        "dlscope.layer.op_type": layer.op_type,
        "dlscope.layer.input_shapes": [str(list(shape)) for shape in layer.input_shapes],
        "dlscope.layer.output_shapes": [str(list(shape)) for shape in layer.output_shapes],
    }
    if layer.fused:
        attributes["dlscope.layer.fused"] = list(layer.fused)
    if layer.kernels != 1:
        attributes["dlscope.layer.kernels"] = layer.kernels
    if layer.implementation:
        attributes["dlscope.layer.implementation"] = layer.implementation
    if layer.thread is not None:
        attributes["thread.id"] = layer.thread  # OpenTelemetry's semantic convention
    if layer.queued_ns is not None:
        attributes["opencl.queued_ns"] = layer.queued_ns
    if layer.submit_ns is not None:
        attributes["opencl.submit_ns"] = layer.submit_ns
    span = tracer.start_span(
        f"{layer.op_type} {layer.node}",
        context=context,
        start_time=layer.start_ns,
        attributes=attributes,
    )
    span.end(end_time=max(layer.end_ns, layer.start_ns))
    return span
