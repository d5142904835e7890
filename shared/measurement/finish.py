"""Did a served request end where the run pinned its length? The rule every endpoint client
applies to an answer it read to the end, before the answer can become a latency sample.

A run pins the output's length (``ignore_eos`` with ``max_new_tokens``) so that its requests
compare: every one generates the same number of tokens. A request that comes back shorter
did not do the work the others did, so its times are not a sample of the scenario; it is a
failure of its own kind, ``truncated``, counted beside the others (llama-cpp-python's server,
for one, ends the request in flight when the next arrives: it sends ``[DONE]`` after two or
three tokens, no finish reason and no error).

The rule, strongest evidence first:

1. the server's own count (``usage.completion_tokens``), where it sends one, is exact: fewer
   than ``max_new_tokens`` is truncated;
2. otherwise the model's tokenizer counts the text received; a text re-tokenized may merge
   what the server generated as two tokens, so it is truncated only when it falls short by
   more than ``TOKEN_COUNT_TOLERANCE`` of the length (at least one token of slack);
3. whatever the count, a server that says it ended the answer itself (a finish reason other
   than ``length``: ``stop`` at an end-of-sequence token or a stop string, ``abort``, ...)
   did not run to the pinned length, which is the only way such a request may end. No finish
   reason at all is not evidence either way (some servers send none), so the count decides.

A request whose length was not pinned (``ignore_eos`` off: it stops at its end of sequence)
is never truncated: its length is the model's to choose.
"""

from __future__ import annotations

import math

__all__ = ["FINISHED_AT_LENGTH", "TOKEN_COUNT_TOLERANCE", "TRUNCATED", "truncation"]

# The failure kind of a request that ended before its pinned length.
TRUNCATED = "truncated"
# The finish reason of a request that ran to its max_tokens (the OpenAI API's).
FINISHED_AT_LENGTH = "length"
# The tokenizer's and the server's output token counts may differ by this fraction before
# it is worth a warning (a special token, a chunk's partial character), and a text
# re-tokenized may fall short of the length by as much before it is truncated.
TOKEN_COUNT_TOLERANCE = 0.02


def truncation(
    *,
    pinned: bool,
    max_new_tokens: int,
    finish_reason: str | None,
    reported_tokens: int | None,
    counted_tokens: int,
) -> str | None:
    """Why a request that ended without an error is ``truncated`` (the cause, as a failure's
    cause reads), or None when it ran to its pinned length (or its length was not pinned).
    ``reported_tokens`` is the server's count, ``counted_tokens`` the tokenizer's."""
    if not pinned:
        return None
    said = "no finish reason" if finish_reason is None else f"finish reason {finish_reason!r}"
    if reported_tokens is not None:
        if reported_tokens < max_new_tokens:
            return (
                f"{reported_tokens} of the {max_new_tokens} tokens pinned, by the server's "
                f"usage ({said})"
            )
    else:
        slack = max(1, math.floor(TOKEN_COUNT_TOLERANCE * max_new_tokens))
        if counted_tokens < max_new_tokens - slack:
            return (
                f"{counted_tokens} of the {max_new_tokens} tokens pinned, by the model's "
                f"tokenizer on the text received ({said}; the server sent no usage)"
            )
    if finish_reason is not None and finish_reason != FINISHED_AT_LENGTH:
        return (
            f"the server ended the answer itself ({said}) though its length was pinned at "
            f"{max_new_tokens} tokens"
        )
    return None
