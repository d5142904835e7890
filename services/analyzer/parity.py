"""Output parity: do two evaluations' models compute the same thing on the same inputs?

Pure maths over two ``OutputFingerprint``s. Outputs are matched by name (by position when
the two models name them differently but have as many). For each output:

- ``scale`` is the reference output's largest finite magnitude;
- ``max_abs_error`` is the largest |reference - candidate| over the sampled values where
  both are finite; ``max_rel_error`` is that divided by the scale (by 1 when the reference
  output is all zeros);
- the output is within tolerance when ``max_abs_error <= atol * max(1, scale)`` and both
  have NaN and infinities in the same places.

``min_cosine`` is the smallest cosine similarity between the two outputs of one sample, over
the samples whose values the fingerprints hold whole (an embedding's quality against the
reference framework's).

Top-1 agreement is the fraction of samples, over every output that has a batch dimension,
whose largest value is at the same index. The pair is within tolerance when every output is
and the agreement reaches ``min_top1_agreement``.

A generation's fingerprint is its greedy tokens (an output of ``kind`` "tokens"): token ids
are names, not quantities, so they are compared position by position and nothing else: how
many agree of how many (the longer of the two: a token one side lacks disagrees), and where
they first part. No difference or cosine of ids is computed; the agreement is the top-1
agreement, held to ``min_top1_agreement``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import numpy as np

from shared.messages import OutputFingerprint, OutputSample, PairParity, ParityTolerance

__all__ = ["compare_outputs"]


@dataclass(frozen=True)
class _OutputParity:
    max_abs_error: float
    max_rel_error: float
    min_cosine: float | None
    problem: str | None


def compare_outputs(
    reference_id: uuid.UUID,
    reference: OutputFingerprint,
    candidate_id: uuid.UUID,
    candidate: OutputFingerprint,
    tolerance: ParityTolerance,
) -> PairParity:
    def incomparable(reason: str) -> PairParity:
        return PairParity(
            reference=reference_id,
            candidate=candidate_id,
            comparable=False,
            within_tolerance=False,
            reason=reason,
        )

    if reference.inputs.sha256 != candidate.inputs.sha256:
        return incomparable(
            f"different input sets: {_describe(reference)} and {_describe(candidate)}"
        )
    pairs = _matched(reference.outputs, candidate.outputs)
    if pairs is None:
        return incomparable(
            f"different outputs: {_names(reference.outputs)} and {_names(candidate.outputs)}"
        )
    for ours, theirs in pairs:
        if ours.shape != theirs.shape:
            return incomparable(
                f"output {ours.name!r} has shape {ours.shape} here and {theirs.shape} there"
            )

    if all(_is_tokens(reference, ours) for ours, _ in pairs):
        return _compare_tokens(reference_id, candidate_id, pairs, tolerance)
    outputs = [_compare(ours, theirs, tolerance) for ours, theirs in pairs]
    agree = total = 0
    for ours, theirs in pairs:
        if ours.top1 and len(ours.top1) == len(theirs.top1):
            agree += sum(a == b for a, b in zip(ours.top1, theirs.top1, strict=True))
            total += len(ours.top1)
    agreement = agree / total if total else None

    problems = [o.problem for o in outputs if o.problem is not None]
    cosines = [o.min_cosine for o in outputs if o.min_cosine is not None]
    if agreement is not None and agreement < tolerance.min_top1_agreement:
        problems.append(
            f"top-1 agrees on {agree} of {total} samples "
            f"({agreement:.4g} < {tolerance.min_top1_agreement:g})"
        )
    return PairParity(
        reference=reference_id,
        candidate=candidate_id,
        comparable=True,
        max_abs_error=max(o.max_abs_error for o in outputs),
        max_rel_error=max(o.max_rel_error for o in outputs),
        top1_agreement=agreement,
        min_cosine=min(cosines) if cosines else None,
        bitwise_identical=all(ours.sha256 == theirs.sha256 for ours, theirs in pairs),
        within_tolerance=not problems,
        reason="; ".join(problems) or None,
    )


def _is_tokens(fingerprint: OutputFingerprint, output: OutputSample) -> bool:
    """A generation's greedy tokens: so marked, or (recorded before the mark) its output named
    "tokens" of greedy tokens of a prompt."""
    if output.kind == "tokens":
        return True
    return output.name == "tokens" and fingerprint.inputs.description.endswith("greedy tokens")


def _compare_tokens(
    reference_id: uuid.UUID,
    candidate_id: uuid.UUID,
    pairs: list[tuple[OutputSample, OutputSample]],
    tolerance: ParityTolerance,
) -> PairParity:
    """Greedy tokens, position by position: how many agree, of how many, where they part."""
    agree = compared = 0
    first: int | None = None
    for ours, theirs in pairs:
        length = max(len(ours.top1), len(theirs.top1))
        for position in range(length):
            same = position < min(len(ours.top1), len(theirs.top1)) and (
                ours.top1[position] == theirs.top1[position]
            )
            agree += same
            if not same and first is None:
                first = compared + position + 1
        compared += length
    agreement = agree / compared if compared else None
    said = _agreement(agree, compared, first)
    within = agreement is None or agreement >= tolerance.min_top1_agreement
    return PairParity(
        reference=reference_id,
        candidate=candidate_id,
        comparable=True,
        top1_agreement=agreement,
        bitwise_identical=all(ours.sha256 == theirs.sha256 for ours, theirs in pairs),
        within_tolerance=within,
        reason=None if within else f"{said} (at least {tolerance.min_top1_agreement:.0%} asked)",
        tokens_agreeing=agree,
        tokens_compared=compared,
        first_difference=first,
    )


def _agreement(agree: int, compared: int, first: int | None) -> str:
    said = f"{agree} of {compared} greedy tokens agree"
    if first is None:
        return said
    if first == 1:
        return f"{said} (they part at the first token)"
    return f"{said} (the first {first - 1}, then they part at token {first})"


def _matched(
    ours: list[OutputSample], theirs: list[OutputSample]
) -> list[tuple[OutputSample, OutputSample]] | None:
    by_name = {o.name: o for o in theirs}
    if set(by_name) == {o.name for o in ours}:
        return [(o, by_name[o.name]) for o in ours]
    if len(ours) == len(theirs):
        return list(zip(ours, theirs, strict=True))
    return None


def _compare(ours: OutputSample, theirs: OutputSample, tolerance: ParityTolerance) -> _OutputParity:
    n = min(len(ours.values), len(theirs.values))
    a = np.asarray(ours.values[:n], dtype=np.float64)
    b = np.asarray(theirs.values[:n], dtype=np.float64)
    finite = np.isfinite(a) & np.isfinite(b)
    # Where either is NaN or infinite, both must be the same NaN or infinity.
    same_special = (np.isnan(a) & np.isnan(b)) | (a == b)
    special_mismatches = int(np.count_nonzero(~finite & ~same_special))
    scale = float(np.max(np.abs(a[np.isfinite(a)]), initial=0.0))
    max_abs = float(np.max(np.abs(a[finite] - b[finite]), initial=0.0))
    max_rel = max_abs / (scale or 1.0)
    bound = tolerance.atol * max(1.0, scale)
    problems = []
    if max_abs > bound:
        problems.append(
            f"output {ours.name!r} differs by up to {max_abs:.3g} "
            f"(tolerance {tolerance.atol:g} x scale {max(1.0, scale):.3g})"
        )
    if special_mismatches:
        problems.append(
            f"output {ours.name!r} has NaN or infinities where the other does not "
            f"({special_mismatches} values)"
        )
    return _OutputParity(max_abs, max_rel, _min_cosine(ours, a, b), "; ".join(problems) or None)


def _min_cosine(output: OutputSample, a: np.ndarray, b: np.ndarray) -> float | None:
    """Over the samples (rows of the batch) held whole in both, where neither is all zeros."""
    if len(output.shape) < 2 or output.shape[0] == 0:
        return None
    width = int(np.prod(output.shape[1:]))
    rows = len(a) // width if width else 0
    if rows == 0:
        return None
    x, y = a[: rows * width].reshape(rows, width), b[: rows * width].reshape(rows, width)
    norms = np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1)
    usable = (norms > 0) & np.isfinite(norms)
    if not usable.any():
        return None
    cosines = np.sum(x[usable] * y[usable], axis=1) / norms[usable]
    return float(np.min(cosines))


def _describe(fingerprint: OutputFingerprint) -> str:
    inputs = fingerprint.inputs
    return f"{inputs.description} (batch {inputs.batch_size})"


def _names(outputs: list[OutputSample]) -> str:
    return ", ".join(o.name for o in outputs)
