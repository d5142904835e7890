"""A generative workload's lengths: each request row's prompt or output length drawn from the
scenario's distribution (``shared.messages.lengths``), seeded, the same on every machine and
framework, so two runs of one scenario ask for the same tokens."""

from __future__ import annotations

from typing import Literal

import numpy as np

from shared.messages.lengths import FixedLength, NormalLengths, TokenLengths, UniformLengths

__all__ = ["WORKLOAD_ROWS", "draw_lengths"]

# Synthetic rows where a distribution is asked for: enough that the lengths the requests take
# in turn follow it closely (the field's tools draw per request; dlscope's requests take the
# rows in turn, as they take a data set's), few enough to tokenize in a second or two.
WORKLOAD_ROWS = 512

# Each purpose draws from a generator of its own, so the output lengths do not change when
# the input distribution does.
_STREAMS = {"input": 1, "output": 2}


def draw_lengths(
    lengths: TokenLengths, rows: int, *, seed: int, purpose: Literal["input", "output"]
) -> list[int]:
    """``rows`` lengths drawn from ``lengths``, seeded by ``seed`` and ``purpose``."""
    if isinstance(lengths, FixedLength):
        return [lengths.tokens] * rows
    rng = np.random.default_rng([seed, _STREAMS[purpose]])
    if isinstance(lengths, UniformLengths):
        drawn = rng.integers(lengths.min, lengths.max, size=rows, endpoint=True)
    else:
        assert isinstance(lengths, NormalLengths)
        drawn = np.rint(rng.normal(lengths.mean, lengths.stddev, size=rows))
        drawn = np.clip(drawn, lengths.min, lengths.longest)
    return [int(n) for n in drawn]
