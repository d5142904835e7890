"""A timed trace to replay against a served model: when each request arrives and how many
tokens its prompt and its answer have, as the field's load tools take one (the Mooncake trace
format that AIPerf and vllm bench read: ``{"timestamp": ms, "input_length": n,
"output_length": m}`` a line).

It travels inside the scenario, so the evaluation records the very schedule it ran and a
replay of the evaluation replays the trace. On the wire, three columns of one length rather
than an object a request: a trace of ``MAX_REPLAYED`` requests is about 400 kB of JSON, well
inside a request body's default bound (``DLSCOPE_MAX_BODY_BYTES``, 1 MiB).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from typing import Annotated, Self

from pydantic import BaseModel, Field, StrictFloat, StrictInt, model_validator

from shared.inputs import MAX_NAME, REQUESTED
from shared.messages.lengths import MAX_LENGTH

__all__ = ["MAX_REPLAYED", "MAX_REPLAY_SPAN_MS", "Replay", "read_replay"]

# Requests one replay holds: a long trace for one client on one machine, short enough that its
# schedule and its lengths fit a request body and an event row.
MAX_REPLAYED = 20_000
# The longest trace: a day. A timestamp past it is a unit mistake (microseconds, say).
MAX_REPLAY_SPAN_MS = 86_400_000.0

_Length = Annotated[StrictInt, Field(ge=1, le=MAX_LENGTH)]
_At = Annotated[StrictFloat | StrictInt, Field(ge=0, le=MAX_REPLAY_SPAN_MS)]


class Replay(BaseModel):
    """Request ``i`` arrives ``at_ms[i] - at_ms[0]`` after the schedule starts, with a prompt
    of ``input_tokens[i]`` tokens (synthetic, seeded by the scenario's seed) asking for
    ``output_tokens[i]``; ``source`` names where the trace came from (its file and sha256)."""

    model_config = REQUESTED

    source: str = Field(default="", max_length=MAX_NAME, description="the trace's origin")
    at_ms: tuple[_At, ...] = Field(min_length=1, max_length=MAX_REPLAYED)
    input_tokens: tuple[_Length, ...] = Field(min_length=1, max_length=MAX_REPLAYED)
    output_tokens: tuple[_Length, ...] = Field(min_length=1, max_length=MAX_REPLAYED)

    @model_validator(mode="after")
    def _aligned(self) -> Self:
        counts = {len(self.at_ms), len(self.input_tokens), len(self.output_tokens)}
        if len(counts) != 1:
            raise ValueError(
                f"replay: at_ms, input_tokens and output_tokens must be one length each, "
                f"not {len(self.at_ms)}, {len(self.input_tokens)} and {len(self.output_tokens)}"
            )
        for index in range(1, len(self.at_ms)):
            if self.at_ms[index] < self.at_ms[index - 1]:
                raise ValueError(
                    f"replay: request {index} arrives at {self.at_ms[index]} ms, before "
                    f"request {index - 1} ({self.at_ms[index - 1]} ms): a trace is in time order"
                )
        return self

    @property
    def count(self) -> int:
        return len(self.at_ms)

    @property
    def span_s(self) -> float:
        """From the first arrival to the last."""
        return (self.at_ms[-1] - self.at_ms[0]) / 1e3

    @property
    def rate(self) -> float:
        """The trace's mean arrival rate (requests/s): its requests over its span (a span
        under a millisecond counts as one)."""
        return self.count / max(self.span_s, 1e-3)

    @property
    def longest_output(self) -> int:
        return max(self.output_tokens)

    def offsets_ns(self) -> list[int]:
        """Each request's arrival after the first's, in nanoseconds."""
        first = self.at_ms[0]
        return [round((at - first) * 1e6) for at in self.at_ms]

    def __str__(self) -> str:
        return f"replay of {self.count} requests over {self.span_s:.1f} s" + (
            f" ({self.source})" if self.source else ""
        )


def read_replay(lines: Iterable[str], *, name: str) -> Replay:
    """The trace in ``lines`` (JSON a line: ``timestamp`` in ms, ``input_length``,
    ``output_length``; blank lines skipped); ``ValueError`` naming the line at fault. ``name``
    is the file's, recorded with the sha256 of the lines read."""
    at: list[float] = []
    inputs: list[int] = []
    outputs: list[int] = []
    digest = hashlib.sha256()
    for number, line in enumerate(lines, start=1):
        digest.update(line.encode())
        if not line.strip():
            continue
        if len(at) == MAX_REPLAYED:
            raise ValueError(f"line {number}: a replay holds at most {MAX_REPLAYED} requests")
        at_ms, input_length, output_length = _entry(line, number)
        at.append(at_ms)
        inputs.append(input_length)
        outputs.append(output_length)
    if not at:
        raise ValueError("holds no request (a JSON object a line)")
    source = f"{name[: MAX_NAME - 80]}, sha256 {digest.hexdigest()[:16]}"
    return Replay(
        source=source, at_ms=tuple(at), input_tokens=tuple(inputs), output_tokens=tuple(outputs)
    )


def _entry(line: str, number: int) -> tuple[float, int, int]:
    try:
        entry = json.loads(line)
    except ValueError:
        raise ValueError(f"line {number}: not JSON") from None
    if not isinstance(entry, dict):
        raise ValueError(f"line {number}: a JSON object a line, not {type(entry).__name__}")
    at_ms = entry.get("timestamp")
    if isinstance(at_ms, bool) or not isinstance(at_ms, int | float) or not math.isfinite(at_ms):
        raise ValueError(f"line {number}: 'timestamp' (ms) must be a number, not {at_ms!r}")
    if not 0 <= at_ms <= MAX_REPLAY_SPAN_MS:
        raise ValueError(
            f"line {number}: 'timestamp' {at_ms!r} is not within 0 and "
            f"{MAX_REPLAY_SPAN_MS:.0f} ms (a day): the trace's times are milliseconds"
        )
    lengths = []
    for key in ("input_length", "output_length"):
        value = entry.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LENGTH:
            raise ValueError(
                f"line {number}: {key!r} must be a whole number of tokens from 1 to "
                f"{MAX_LENGTH}, not {value!r}"
            )
        lengths.append(value)
    return float(at_ms), lengths[0], lengths[1]
