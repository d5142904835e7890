"""Output parity between two evaluations: the maths of the comparison, on fingerprints."""

from __future__ import annotations

import math
import uuid

import numpy as np
import pytest

from services.analyzer.parity import compare_outputs
from services.workers.framework.sessions.fingerprint import input_identity, output_fingerprint
from services.workers.framework.sessions.tokens import tokens_fingerprint
from shared.manifests import ModelManifest
from shared.messages import (
    Envelope,
    EvaluationCompleted,
    LatencySummary,
    OutputFingerprint,
    OutputSample,
    ParityTolerance,
    decode,
    encode,
)

REFERENCE, CANDIDATE = uuid.uuid4(), uuid.uuid4()
LOGITS = np.array([[0.5, 2.0, -1.0], [3.0, 0.1, 0.2]], dtype=np.float32)

MANIFEST = ModelManifest.model_validate(
    {
        "name": "net",
        "version": "1.0.0",
        "framework": {"name": "onnxruntime"},
        "inputs": [{"name": "x", "shape": [-1, 3]}],
        "outputs": [{"name": "logits", "shape": [-1, 3]}],
        "source": {"uri": "/nonexistent/net.onnx", "sha256": "0" * 64},
    }
)
INPUTS = {"x": np.ones((2, 3), dtype=np.float32)}


def fingerprint(*outputs: np.ndarray, inputs: dict[str, np.ndarray] = INPUTS) -> OutputFingerprint:
    identity = input_identity(MANIFEST, inputs, kind="synthetic", description="ones")
    return output_fingerprint(MANIFEST, identity, list(outputs))


def test_identical_outputs_are_bitwise_identical_and_within_tolerance() -> None:
    parity = compare_outputs(
        REFERENCE, fingerprint(LOGITS), CANDIDATE, fingerprint(LOGITS.copy()), ParityTolerance()
    )
    assert parity.comparable
    assert parity.within_tolerance
    assert parity.bitwise_identical
    assert (parity.max_abs_error, parity.max_rel_error, parity.top1_agreement) == (0.0, 0.0, 1.0)
    assert parity.reason is None


def test_float_noise_below_the_tolerance_passes_but_is_not_bitwise() -> None:
    noisy = LOGITS + np.float32(2e-6)
    parity = compare_outputs(
        REFERENCE, fingerprint(LOGITS), CANDIDATE, fingerprint(noisy), ParityTolerance()
    )
    assert parity.within_tolerance
    assert not parity.bitwise_identical
    assert parity.max_abs_error == pytest.approx(2e-6, rel=0.1)
    # Relative to the output's scale, its largest magnitude (3.0).
    assert parity.max_abs_error is not None
    assert parity.max_rel_error == pytest.approx(parity.max_abs_error / 3.0)


def test_a_difference_above_the_tolerance_fails_naming_the_output() -> None:
    off = LOGITS.copy()
    off[0, 0] += 0.01  # the top-1 of each sample is unchanged
    parity = compare_outputs(
        REFERENCE, fingerprint(LOGITS), CANDIDATE, fingerprint(off), ParityTolerance()
    )
    assert parity.comparable
    assert not parity.within_tolerance
    assert parity.top1_agreement == 1.0
    assert parity.reason is not None
    assert parity.reason.startswith("output 'logits' differs by up to 0.01")


def test_the_tolerance_scales_with_large_outputs() -> None:
    # Logits in the thousands: 1e-4 x 5000 = 0.5 allowed; float32 rounding is 0.0005 there.
    big = LOGITS * np.float32(2500)
    nudged = big + np.float32(0.1)
    within = compare_outputs(
        REFERENCE, fingerprint(big), CANDIDATE, fingerprint(nudged), ParityTolerance()
    )
    assert within.within_tolerance
    strict = compare_outputs(
        REFERENCE, fingerprint(big), CANDIDATE, fingerprint(nudged), ParityTolerance(atol=1e-6)
    )
    assert not strict.within_tolerance


def test_top1_agreement_below_the_minimum_fails() -> None:
    swapped = LOGITS.copy()
    swapped[1] = [0.1, 3.0, 0.2]  # sample 1 now prefers class 1, not 0
    parity = compare_outputs(
        REFERENCE,
        fingerprint(LOGITS),
        CANDIDATE,
        fingerprint(swapped),
        ParityTolerance(atol=10.0),
    )
    assert parity.top1_agreement == 0.5
    assert not parity.within_tolerance
    assert parity.reason == "top-1 agrees on 1 of 2 samples (0.5 < 1)"
    lenient = compare_outputs(
        REFERENCE,
        fingerprint(LOGITS),
        CANDIDATE,
        fingerprint(swapped),
        ParityTolerance(atol=10.0, min_top1_agreement=0.5),
    )
    assert lenient.within_tolerance


def test_outputs_of_different_inputs_are_not_comparable() -> None:
    other_inputs = {"x": np.zeros((2, 3), dtype=np.float32)}
    parity = compare_outputs(
        REFERENCE,
        fingerprint(LOGITS),
        CANDIDATE,
        fingerprint(LOGITS, inputs=other_inputs),
        ParityTolerance(),
    )
    assert not parity.comparable
    assert not parity.within_tolerance
    assert parity.reason is not None
    assert parity.reason.startswith("different input sets")


def test_outputs_of_different_shapes_are_not_comparable() -> None:
    parity = compare_outputs(
        REFERENCE,
        fingerprint(LOGITS),
        CANDIDATE,
        fingerprint(LOGITS.reshape(2, 1, 3)),
        ParityTolerance(),
    )
    assert not parity.comparable
    assert parity.reason == "output 'logits' has shape [2, 3] here and [2, 1, 3] there"


def test_outputs_named_differently_are_matched_by_position() -> None:
    ours = fingerprint(LOGITS)
    renamed = ours.model_copy(
        update={"outputs": [ours.outputs[0].model_copy(update={"name": "output_0"})]}
    )
    parity = compare_outputs(REFERENCE, ours, CANDIDATE, renamed, ParityTolerance())
    assert parity.comparable
    assert parity.within_tolerance


def test_nan_in_one_output_only_is_out_of_tolerance_and_nan_in_both_is_not() -> None:
    with_nan = LOGITS.copy()
    with_nan[0, 2] = np.nan
    one = compare_outputs(
        REFERENCE, fingerprint(LOGITS), CANDIDATE, fingerprint(with_nan), ParityTolerance()
    )
    assert not one.within_tolerance
    assert one.reason is not None
    assert "NaN or infinities where the other does not" in one.reason
    both = compare_outputs(
        REFERENCE, fingerprint(with_nan), CANDIDATE, fingerprint(with_nan), ParityTolerance()
    )
    assert both.within_tolerance
    assert both.max_abs_error is not None
    assert math.isfinite(both.max_abs_error)


def test_the_fingerprint_keeps_a_bounded_sample_the_top1_and_hashes_of_everything() -> None:
    scores = np.arange(3 * 1000, dtype=np.float32).reshape(3, 1000)[:, ::-1].copy()
    sample = fingerprint(scores).outputs[0]
    assert sample.shape == [3, 1000]
    assert sample.dtype == "float32"
    assert len(sample.values) == 1024  # the first 1 024 of 3 000
    assert sample.values[:2] == [999.0, 998.0]
    assert sample.top1 == [0, 0, 0]
    # The same values in another dtype are another tensor.
    assert fingerprint(scores.astype(np.float64)).outputs[0].sha256 != sample.sha256


def test_a_fingerprint_with_nan_and_infinities_survives_the_wire() -> None:
    special = np.array([[np.nan, np.inf, -np.inf, 1.5]], dtype=np.float32)
    summary = LatencySummary(
        count=1,
        batch_size=1,
        mean_ms=1.0,
        std_ms=0.0,
        min_ms=1.0,
        max_ms=1.0,
        p50_ms=1.0,
        p90_ms=1.0,
        p99_ms=1.0,
        throughput_per_s=1000.0,
        first_inference_ms=1.0,
        load_ms=1.0,
        warmup_count=0,
        fingerprint=fingerprint(special),
    )
    evaluation_id = uuid.uuid4()
    envelope = Envelope.wrap(
        EvaluationCompleted(evaluation_id=evaluation_id, result=summary),
        stream_id="evaluation-x",
        correlation_id=evaluation_id,
    )
    received = decode(encode(envelope)).open(EvaluationCompleted).result.fingerprint
    assert received is not None
    values = received.outputs[0].values
    assert math.isnan(values[0])
    assert values[1:] == [math.inf, -math.inf, 1.5]


def test_an_output_without_a_batch_dimension_has_no_top1() -> None:
    sample: OutputSample = fingerprint(np.float32(3.0) * np.ones(3, np.float32)).outputs[0]
    assert sample.top1 == []


EMBEDDER = MANIFEST.model_copy(update={"task": "text-embedding"})


def _embeddings(rows: np.ndarray) -> OutputFingerprint:
    identity = input_identity(EMBEDDER, INPUTS, kind="synthetic", description="ones")
    return output_fingerprint(EMBEDDER, identity, [rows])


def test_embeddings_are_compared_by_cosine_similarity_not_by_top1() -> None:
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((2, 3)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    turned = rows.copy()
    turned[1] = rows[1] + np.float32(0.05) * rng.standard_normal(3).astype(np.float32)
    parity = compare_outputs(
        REFERENCE, _embeddings(rows), CANDIDATE, _embeddings(turned), ParityTolerance()
    )
    expected = float(turned[1] @ rows[1]) / float(np.linalg.norm(turned[1]))
    assert parity.min_cosine == pytest.approx(expected, rel=1e-6)
    assert parity.min_cosine is not None
    assert parity.min_cosine < 1.0
    assert parity.top1_agreement is None, "an embedding's largest value names no class"
    assert not parity.within_tolerance  # the difference is far beyond atol


def test_class_scores_get_a_cosine_too_and_zero_rows_are_left_out() -> None:
    zero_row = LOGITS.copy()
    zero_row[0] = 0.0
    parity = compare_outputs(
        REFERENCE, fingerprint(zero_row), CANDIDATE, fingerprint(zero_row), ParityTolerance()
    )
    assert parity.min_cosine == pytest.approx(1.0)


def _greedy(tokens: list[int], *, legacy: bool = False) -> OutputFingerprint:
    """A generation's fingerprint: its greedy tokens of one prompt (``legacy``: as recorded
    before a fingerprint said its kind)."""
    made = tokens_fingerprint(np.asarray([[5, 6, 7]]), tokens, "seeded prompt", "synthetic")
    if legacy:
        (sample,) = made.outputs
        data = sample.model_dump()
        data.pop("kind")
        made = made.model_copy(update={"outputs": [OutputSample.model_validate(data)]})
    return made


# Greedy token ids far apart as numbers (872 and 1) that are simply different tokens.
SERVED_TOKENS = [11, 22, 33, 44, 55, 66, 872, 1, 9, 9, 9, 9, 9, 9, 9, 9]
LOCAL_TOKENS = [11, 22, 33, 44, 55, 66, 77, 88, 9, 9, 9, 9, 9, 9, 9, 9]


@pytest.mark.parametrize("legacy", [False, True], ids=["marked", "recorded before the mark"])
def test_greedy_tokens_are_compared_by_how_many_agree_never_as_numbers(legacy: bool) -> None:
    parity = compare_outputs(
        REFERENCE,
        _greedy(LOCAL_TOKENS),
        CANDIDATE,
        _greedy(SERVED_TOKENS, legacy=legacy),
        ParityTolerance(),
    )
    assert parity.comparable
    assert (parity.tokens_agreeing, parity.tokens_compared) == (14, 16)
    assert parity.first_difference == 7
    assert parity.top1_agreement == pytest.approx(14 / 16)
    # No arithmetic on token ids: no difference, no cosine.
    assert parity.max_abs_error is None
    assert parity.min_cosine is None
    assert not parity.within_tolerance
    assert parity.reason == (
        "14 of 16 greedy tokens agree (the first 6, then they part at token 7) "
        "(at least 100% asked)"
    )
    assert "differs by" not in parity.reason
    assert "cosine" not in parity.reason


def test_identical_greedy_tokens_agree_on_every_position() -> None:
    parity = compare_outputs(
        REFERENCE, _greedy(LOCAL_TOKENS), CANDIDATE, _greedy(list(LOCAL_TOKENS)), ParityTolerance()
    )
    assert parity.within_tolerance
    assert parity.bitwise_identical
    assert (parity.tokens_agreeing, parity.tokens_compared, parity.first_difference) == (
        16,
        16,
        None,
    )
    assert parity.reason is None
    lenient = compare_outputs(
        REFERENCE,
        _greedy(LOCAL_TOKENS),
        CANDIDATE,
        _greedy(SERVED_TOKENS),
        ParityTolerance(min_top1_agreement=0.8),
    )
    assert lenient.within_tolerance, "14 of 16 is within an 80 % agreement"
