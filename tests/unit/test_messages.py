"""The wire contract: envelopes round-trip, bad messages are refused with the reason, and a
redelivered message's consequences keep their ids."""

from __future__ import annotations

import uuid

import pytest
from pydantic import ValidationError

from shared.errors import InvalidMessage
from shared.measurement import SingleStream
from shared.messages import (
    MAX_BATCH_EVENTS,
    SCENARIOS,
    Envelope,
    EvaluationFailed,
    EvaluationRequested,
    EvaluationStarted,
    Scenario,
    TypedEnvelope,
    Unreadable,
    attempt_key,
    decode,
    decode_batch,
    encode,
    encode_batch,
    evaluation_stream,
    failure_caused_by,
    is_batch,
    job_key,
    read_typed,
)


def requested() -> Envelope:
    evaluation_id = uuid.uuid4()
    return Envelope.wrap(
        EvaluationRequested(
            evaluation_id=evaluation_id, model="squeezenet", framework="onnxruntime"
        ),
        stream_id=evaluation_stream(evaluation_id),
        correlation_id=evaluation_id,
    )


def test_an_envelope_survives_the_wire_unchanged() -> None:
    envelope = requested()
    assert decode(encode(envelope)) == envelope
    assert decode(encode(envelope)).open(EvaluationRequested).scenario.iterations == 1024


def test_a_batch_survives_the_wire_in_order_and_a_bad_element_stays_in_its_place() -> None:
    first, second = requested(), requested()
    body = encode_batch([first, second])
    assert is_batch(body)
    assert not is_batch(encode(first))
    assert decode_batch(body) == [first, second]

    spliced = body[:1] + b'{"type": 7}, ' + body[1:]
    bad, *good = decode_batch(spliced)
    assert good == [first, second]
    assert isinstance(bad, Unreadable)
    assert str(bad.error).startswith("batch element 0: invalid envelope:")


@pytest.mark.parametrize(
    ("body", "names"),
    [
        (b"[]", "the batch is empty"),
        (b'{"not": "an array"}', "must be a JSON array"),
        (b"[" + b"1," * MAX_BATCH_EVENTS + b"1]", f"over the {MAX_BATCH_EVENTS}"),
    ],
)
def test_a_batch_body_that_is_no_batch_is_refused_whole(body: bytes, names: str) -> None:
    with pytest.raises(InvalidMessage, match=names):
        decode_batch(body)


def test_reading_at_once_gives_what_reading_each_envelope_and_its_payload_gives() -> None:
    first = requested()
    second = first.caused(
        EvaluationStarted(
            evaluation_id=first.correlation_id, agent_id="a", host="h", environment={"cores": 2}
        ),
        producer="worker",
    )
    read = read_typed(encode_batch([first, second]))
    assert read is not None
    assert [type(event) for event in read] == [
        TypedEnvelope[EvaluationRequested],
        TypedEnvelope[EvaluationStarted],
    ]
    assert read == [first.read(), second.read()]
    assert [event.payload for event in read] == [first.typed(), second.typed()]
    assert read_typed(encode(second)) == [second.read()]


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        b'{"type": "evaluation.requested"}',
        b"[" + b"1," * MAX_BATCH_EVENTS + b"1]",
    ],
)
def test_what_does_not_read_at_once_is_left_to_the_one_by_one_reading(body: bytes) -> None:
    assert read_typed(body) is None


def test_one_bad_element_or_an_escaped_nul_sends_the_batch_to_the_one_by_one_reading() -> None:
    good = requested()
    unknown = good.model_copy(update={"type": "no.such.type", "event_id": uuid.uuid4()})
    refused = good.model_copy(update={"payload": {"model": 7}, "event_id": uuid.uuid4()})
    nul = good.model_copy(update={"producer": "a\x00b", "event_id": uuid.uuid4()})
    for bad in (unknown, refused, nul):
        assert read_typed(encode_batch([good, bad])) is None
    with pytest.raises(InvalidMessage, match=r"unknown message type 'no\.such\.type'"):
        unknown.read()
    with pytest.raises(InvalidMessage, match=r"invalid 'evaluation\.requested' payload"):
        refused.read()
    with pytest.raises(InvalidMessage, match="NUL"):
        decode(encode(nul))


def test_a_caused_message_continues_the_correlation_and_names_its_cause() -> None:
    cause = requested()
    effect = cause.caused(
        EvaluationFailed(evaluation_id=cause.correlation_id, stage="scheduling", reason="none"),
        producer="scheduler",
    )
    assert (effect.correlation_id, effect.causation_id, effect.stream_id) == (
        cause.correlation_id,
        cause.event_id,
        cause.stream_id,
    )


def test_handling_a_redelivered_message_again_emits_the_same_event_ids() -> None:
    cause = requested()
    payload = EvaluationFailed(evaluation_id=cause.correlation_id, stage="scheduling", reason="x")
    assert (
        cause.caused(payload, producer="a").event_id == cause.caused(payload, producer="a").event_id
    )


def test_each_attempt_at_a_job_emits_events_of_its_own_and_a_redelivery_the_same() -> None:
    job = requested()

    def start(attempt: int) -> Envelope:
        started = EvaluationStarted(
            evaluation_id=job.correlation_id,
            agent_id=f"agent-{attempt}",
            host="h",
            environment={},
            attempt=attempt,
        )
        key = attempt_key(attempt)
        return job.caused(started, producer="worker", key=key)

    # The first attempt keeps the ids messages had before attempts were counted
    plain = job.caused(
        EvaluationStarted(evaluation_id=job.correlation_id, agent_id="a", host="h", environment={}),
        producer="worker",
    )
    assert start(1).event_id == plain.event_id == uuid.uuid5(job.event_id, "evaluation.started")
    # a second attempt is another event, the same again when redelivered
    assert start(2).event_id == uuid.uuid5(job.event_id, "evaluation.started#attempt-2")
    assert len({start(1).event_id, start(2).event_id, start(3).event_id}) == 3
    assert start(2).event_id == start(2).event_id
    # and a failure can be told apart the same way
    failed = failure_caused_by(
        job, EvaluationRequested, stage="agent", reason="x", producer="w", key="attempt-4"
    )
    assert failed is not None
    assert failed.event_id == uuid.uuid5(job.event_id, "evaluation.failed#attempt-4")


@pytest.mark.parametrize(
    ("type_", "payload"),
    [
        ("evaluation.requested", {"framework": "onnxruntime"}),  # no model: invalid
        ("evaluation.requested", {"model": "m", "framework": "nope"}),
        ("job.evaluate", {"framework": "onnxruntime"}),  # not what the queue carries
        ("evaluation.exploded", {"model": "m", "framework": "onnxruntime"}),
    ],
)
def test_a_message_that_is_not_a_valid_request_fails_no_evaluation(
    type_: str, payload: dict[str, str]
) -> None:
    # Given a message naming an evaluation nobody requested, which its contract refuses
    evaluation_id = uuid.uuid4()
    message = Envelope(
        type=type_,
        stream_id=evaluation_stream(evaluation_id),
        correlation_id=evaluation_id,
        payload={"evaluation_id": str(evaluation_id), **payload},
    )
    # Then giving up on it fails nothing: it is dead-lettered, no more
    assert (
        failure_caused_by(
            message, EvaluationRequested, stage="scheduling", reason="x", producer="scheduler"
        )
        is None
    )
    # while a valid request that could not be handled is failed, naming its experiment
    experiment_id = uuid.uuid4()
    valid = Envelope.wrap(
        EvaluationRequested(
            evaluation_id=evaluation_id,
            model="m",
            framework="onnxruntime",
            experiment_id=experiment_id,
        ),
        stream_id=evaluation_stream(evaluation_id),
        correlation_id=evaluation_id,
    )
    failed = failure_caused_by(
        valid, EvaluationRequested, stage="scheduling", reason="x", producer="scheduler"
    )
    assert failed is not None
    outcome = failed.open(EvaluationFailed)
    assert (outcome.evaluation_id, outcome.experiment_id) == (evaluation_id, experiment_id)


def test_a_start_or_measurement_without_an_attempt_is_the_first() -> None:
    started = EvaluationStarted.model_validate(
        {"evaluation_id": str(uuid.uuid4()), "agent_id": "a", "host": "h", "environment": {}}
    )
    assert started.attempt == 1
    with pytest.raises(ValidationError, match="attempt"):
        EvaluationStarted.model_validate({**started.model_dump(mode="json"), "attempt": 0})


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"not json", "message body is not JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"type": "evaluation.requested"}', "invalid envelope: stream_id: Field required"),
    ],
)
def test_an_unreadable_message_is_invalid_with_the_reason(body: bytes, message: str) -> None:
    with pytest.raises(InvalidMessage, match=message):
        decode(body)


def test_a_payload_of_the_wrong_shape_names_the_field() -> None:
    envelope = requested().model_copy(update={"payload": {"evaluation_id": "x", "model": "m"}})
    with pytest.raises(InvalidMessage, match=r"evaluation_id: .*framework: Field required"):
        envelope.typed()


def test_an_unknown_framework_is_refused_naming_the_allowed_ones() -> None:
    envelope = requested()
    bad = envelope.model_copy(update={"payload": {**envelope.payload, "framework": "caffe"}})
    with pytest.raises(InvalidMessage, match=r"framework: Input should be 'onnxruntime'"):
        bad.open(EvaluationRequested)


def test_an_unknown_message_type_lists_the_known_ones() -> None:
    with pytest.raises(InvalidMessage, match=r"unknown message type 'evaluation.exploded'"):
        requested().model_copy(update={"type": "evaluation.exploded"}).typed()


def test_job_keys_route_to_any_matching_agent_or_to_one() -> None:
    assert job_key("onnxruntime", "cpu") == "job.onnxruntime.cpu"
    assert job_key("onnxruntime", "cpu", "host-a") == "job.onnxruntime.cpu.host-a"


@pytest.mark.parametrize(
    ("scenario", "named"),
    [
        ({"name": "server", "target_qps": 0}, "target_qps"),
        ({"name": "server", "target_qps": -5}, "target_qps"),
        ({"name": "server", "latency_bound_ms": 0}, "latency_bound_ms"),
        ({"name": "batch-sweep", "batch_sizes": [1, 1]}, "batch sizes repeat"),
        ({"name": "closed-loop"}, "name"),
        ({"min_duration_s": 10, "max_duration_s": 1}, "exceeds max_duration_s"),
    ],
)
def test_an_impossible_scenario_is_refused_with_the_field_named(
    scenario: dict[str, object], named: str
) -> None:
    with pytest.raises(ValidationError, match=named):
        Scenario.model_validate(scenario)


@pytest.mark.parametrize("name", ["single-stream", "multi-stream", "server", "offline"])
def test_every_scenario_maps_to_the_drivers_typed_settings(name: str) -> None:
    scenario = Scenario.model_validate({"name": name, "iterations": 100, "target_qps": 50})
    typed = scenario.measurement()
    assert typed.name == name
    assert typed.seed == scenario.seed


# Each field's values at, inside and just past the bounds either side might hold.
_SCENARIO_EDGES: dict[str, list[object]] = {
    "iterations": [1, 100_000_000, 0, 100_000_001],
    "min_duration_s": [0.0, 60.0, -0.5],
    "max_duration_s": [0.001, 60.0, 0.0, -1.0],
    "warmup": [0, 1, 100_000, -1, 100_001],
    "batch_size": [1, 65_536, 0, 65_537],
    "samples_per_query": [1, 65_536, 0, 65_537],
    "target_qps": [0.001, 10_000_000.0, 0.0, -5.0, 10_000_001.0],
    "latency_bound_ms": [0.001, 1e6, 0.0, -1.0],
    "batch_sizes": [[1], [65_536], [0], [-1], [65_537], [2, 1], [1, 1], []],
    "seed": [0, 2**40, -1],
    "adaptive_half_width": [0.01, 0.0, 1.0],
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_scenario_a_request_accepts_is_one_the_drivers_can_run(name: str) -> None:
    """Validation does not build the plan, so the wire's bounds must be the drivers':
    whatever value of any field validates must turn into a typed scenario."""
    accepted = 0
    for field, values in _SCENARIO_EDGES.items():
        for value in values:
            try:
                scenario = Scenario.model_validate({"name": name, field: value})
            except ValidationError:
                continue
            scenario.measurement()
            accepted += 1
    assert accepted >= len(_SCENARIO_EDGES)  # the valid edges of every field were tried


def test_an_adaptive_run_is_asked_for_by_the_width_of_its_interval() -> None:
    typed = Scenario(adaptive_half_width=0.02).measurement()
    assert isinstance(typed, SingleStream)
    assert typed.adaptive is not None
    assert typed.adaptive.relative_half_width == 0.02
    assert Scenario().measurement().adaptive is None  # fixed minimums unless asked


@pytest.mark.parametrize(
    ("scenario", "named"),
    [
        ({"batch_size": 4}, "cannot be honoured at batch_size 4"),
        ({"name": "batch-sweep"}, "batch-sweep stops at its minimums"),
        ({"name": "server"}, "server stops at its minimums"),
        ({"name": "offline"}, "offline stops at its minimums"),
        ({"driver": "loadgen"}, "LoadGen applies its own early stopping"),
    ],
)
def test_an_adaptive_stop_a_scenario_cannot_honour_is_refused(
    scenario: dict[str, object], named: str
) -> None:
    """Accepted and ignored, it would silently turn the headline into fixed-count figures."""
    with pytest.raises(ValidationError, match=named):
        Scenario.model_validate({**scenario, "adaptive_half_width": 0.05})
    assert Scenario.model_validate({"name": "multi-stream", "adaptive_half_width": 0.05})


def test_the_largest_seed_a_signed_64_bit_column_holds_is_taken_and_no_larger() -> None:
    assert Scenario(seed=2**63 - 1).seed == 2**63 - 1
    with pytest.raises(ValidationError, match="seed"):
        Scenario(seed=2**63)
