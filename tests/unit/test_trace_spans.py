"""The traced passes become spans under the job's span: a span per pass, per query and per
layer, at the times the framework process measured, each carrying its trace level; a level
that was not captured is an event on the job's span, with its reason."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.workers.handover import TracedPass, TracedQuery, TracedStep, Tracing
from services.workers.tracing import record_trace
from shared.messages import LayerTiming, LevelOutcome

T0 = 1_800_000_000_000_000_000  # ns since the epoch


def test_passes_queries_and_layers_become_nested_spans_on_the_wall_clock() -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    tracer = provider.get_tracer("test")
    conv = LayerTiming(
        node="conv1",
        op_type="Conv",
        input_shapes=((1, 3, 8, 8),),
        start_ns=T0 + 100,
        end_ns=T0 + 600,
        thread=12,
    )
    tracing = Tracing(
        level="full",
        outcomes=(
            LevelOutcome(level="model", captured=True, overhead=1.0),
            LevelOutcome(level="framework", captured=True, source="a profiler", overhead=2.5),
            LevelOutcome(level="hardware", captured=False, reason="no device here"),
        ),
        passes=(
            TracedPass(
                "model",
                "pipeline",
                (
                    TracedQuery(
                        0,
                        T0 - 5000,
                        T0 - 1000,
                        steps=(
                            TracedStep("input", T0 - 5000, T0 - 4000),
                            TracedStep("predict", T0 - 4000, T0 - 1500),
                            TracedStep("post-process", T0 - 1500, T0 - 1000),
                        ),
                    ),
                ),
            ),
            TracedPass("framework", "a profiler", (TracedQuery(0, T0, T0 + 1000, layers=(conv,)),)),
        ),
    )

    with tracer.start_as_current_span("job") as job:
        outcomes = record_trace(tracer, tracing)

    finished = {span.name: span for span in spans.get_finished_spans()}
    framework_pass = finished["trace pass: framework"]
    layer = finished["Conv conv1"]
    assert layer.parent is not None
    query = next(s for s in spans.get_finished_spans() if s.context.span_id == layer.parent.span_id)
    assert query.name == "query 0"
    assert query.parent is not None
    assert query.parent.span_id == framework_pass.context.span_id
    assert framework_pass.parent is not None
    assert framework_pass.parent.span_id == job.get_span_context().span_id
    assert (layer.start_time, layer.end_time) == (T0 + 100, T0 + 600)
    assert layer.attributes is not None
    assert layer.attributes["dlscope.trace_level"] == "framework"
    assert layer.attributes["dlscope.layer.op_type"] == "Conv"
    assert layer.attributes["dlscope.layer.input_shapes"] == ("[1, 3, 8, 8]",)
    assert layer.attributes["thread.id"] == 12
    assert framework_pass.attributes is not None
    assert framework_pass.attributes["dlscope.trace.overhead"] == 2.5
    predict = finished["predict"]
    assert predict.attributes is not None
    assert predict.attributes["dlscope.trace_level"] == "model"
    assert (predict.start_time, predict.end_time) == (T0 - 4000, T0 - 1500)

    (event,) = finished["job"].events
    assert event.attributes == {
        "dlscope.trace_level": "hardware",
        "dlscope.trace.reason": "no device here",
    }
    assert {o.level: o.spans for o in outcomes} == {"model": 5, "framework": 3, "hardware": 0}
