"""A generation's timed requests as the measured event carries them, and the greedy tokens
two frameworks (or a framework and a server) must agree on."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from services.workers.framework.ports import Generated
from shared.messages import (
    GeneratedRequest,
    GenerationRecord,
    InputSetIdentity,
    OutputFingerprint,
    OutputSample,
)

__all__ = [
    "FINGERPRINT_TOKENS",
    "MAX_RECORDED_TIMES",
    "bounded_record",
    "output_tokens",
    "record",
    "tokens_fingerprint",
]

# The parity gate's generation: this many greedy tokens from the first prompt, end of
# sequence ignored, so every framework is compared on the same number of tokens.
FINGERPRINT_TOKENS = 16
# The most token (or chunk) times one record keeps: about 12 MB of the measured event, well
# inside the bound on a message (DLSCOPE_MAX_MESSAGE_BYTES, 32 MB), whatever the run's length.
MAX_RECORDED_TIMES = 1_000_000


def output_tokens(generated: Generated) -> int:
    """A request's output tokens as its record counts them (``GeneratedRequest``)."""
    return max(1, len(generated.tokens)) if generated.chunks else len(generated.token_ns)


def bounded_record(
    generations: Sequence[Generated],
    lags_ns: Sequence[int],
    *,
    scheduled_ns: Sequence[int] | None,
    duration_ns: int,
    max_new_tokens: int,
    ignore_eos: bool,
    seed: int,
    max_times: int = MAX_RECORDED_TIMES,
) -> tuple[GenerationRecord, list[int]]:
    """The record of the timed requests ``generations`` (``record``) and the lags of those it
    keeps (``lags_ns``: one per generation, or none). Past ``max_times`` token times in all,
    it keeps a uniform sample of the requests (seeded, in their order), as many as hold that
    many times on average, and counts every request and output token apart, so the event
    stays a size every consumer reads and the rates stay exact."""
    total_times = sum(len(g.token_ns) for g in generations)
    kept: Sequence[int]
    if total_times <= max_times:
        kept = range(len(generations))
    else:
        size = max(1, len(generations) * max_times // total_times)
        chosen = np.random.default_rng(seed).choice(len(generations), size=size, replace=False)
        kept = sorted(int(i) for i in chosen)
    recorded = record(
        [generations[i] for i in kept],
        scheduled_ns=None if scheduled_ns is None else [scheduled_ns[i] for i in kept],
        duration_ns=duration_ns,
        max_new_tokens=max_new_tokens,
        ignore_eos=ignore_eos,
        begin_ns=_begin_ns(generations, scheduled_ns),  # every request's, not the sample's
    )
    lags = [lags_ns[i] for i in kept] if lags_ns else []
    if len(kept) == len(generations):
        return recorded, lags
    counted = {
        "timed_requests": len(generations),
        "output_tokens": sum(output_tokens(g) for g in generations),
    }
    return recorded.model_copy(update=counted), lags


def _begin_ns(generations: Sequence[Generated], scheduled_ns: Sequence[int] | None) -> int:
    """When the timed requests began: the first scheduled time, else the first issue."""
    return min(scheduled_ns) if scheduled_ns else min(g.issued_ns for g in generations)


def record(
    generations: Sequence[Generated],
    *,
    scheduled_ns: Sequence[int] | None,
    duration_ns: int,
    max_new_tokens: int,
    ignore_eos: bool,
    begin_ns: int | None = None,
) -> GenerationRecord:
    """The timed requests as the measured event carries them: times from ``begin_ns`` (the
    timed phase's start; by default the first scheduled time); each scheduled when it was
    issued unless ``scheduled_ns`` says."""
    if begin_ns is None:
        begin_ns = _begin_ns(generations, scheduled_ns)
    requests = []
    for i, g in enumerate(generations):
        scheduled = g.issued_ns if scheduled_ns is None else scheduled_ns[i]
        requests.append(
            GeneratedRequest(
                scheduled_ns=max(0, scheduled - begin_ns),
                issued_ns=max(0, g.issued_ns - begin_ns),
                token_ns=[t - begin_ns for t in g.token_ns],
                input_tokens=g.prompt_tokens,
                stopped_by="eos" if g.stopped_by == "eos" else "max_new_tokens",
                counted_tokens=output_tokens(g) if g.chunks else None,
                reported_tokens=g.reported_tokens,
                reported_input_tokens=g.reported_input_tokens,
                finish_reason=None if g.finish_reason is None else g.finish_reason[:64],
            )
        )
    return GenerationRecord(
        max_new_tokens=max_new_tokens,
        ignore_eos=ignore_eos,
        duration_ns=duration_ns,
        requests=requests,
    )


def tokens_fingerprint(
    prompt: np.ndarray, generated: Sequence[int], description: str, kind: str
) -> OutputFingerprint:
    """The fingerprint of ``generated``, the first ``FINGERPRINT_TOKENS`` greedy tokens of
    ``prompt``, wherever they were generated. They are the sample's values and its "top-1"
    (one index per position), so parity's top-1 agreement is the fraction of positions whose
    token agrees."""
    tokens = np.asarray([list(generated[:FINGERPRINT_TOKENS])], dtype=np.int64)
    digest = hashlib.sha256(f"{prompt.dtype.str}{list(prompt.shape)}".encode())
    digest.update(prompt.tobytes())
    identity = InputSetIdentity(
        kind="dataset" if kind == "dataset" else "synthetic",
        description=f"{description}, {FINGERPRINT_TOKENS} greedy tokens",
        batch_size=1,
        sha256=digest.hexdigest(),
    )
    sample = hashlib.sha256(f"{tokens.dtype.str}{list(tokens.shape)}".encode())
    sample.update(tokens.tobytes())
    return OutputFingerprint(
        inputs=identity,
        outputs=[
            OutputSample(
                name="tokens",
                shape=list(tokens.shape),
                dtype=str(tokens.dtype),
                values=tokens.reshape(-1).astype(np.float64).tolist(),
                sha256=sample.hexdigest(),
                top1=tokens.reshape(-1).tolist(),
                kind="tokens",
            )
        ],
    )
