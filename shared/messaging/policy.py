"""The one acknowledgement policy of every dlscope consumer.

handler succeeded                        -> ACK
message invalid (InvalidMessage)         -> DEAD_LETTER at once: retrying cannot help
a dependency unavailable (TransientError:
  store or broker down, request timeout) -> REQUEUE: the message is fine, so it is neither
                                            counted as an attempt nor dead-lettered; the bus
                                            pauses the subscription until the dependency is back
anything else failed, attempts remain    -> RETRY (back to the queue, attempt + 1)
anything else failed on the last attempt -> DEAD_LETTER, with the error as the reason

A delivery whose consumer went away without settling it (a worker killed mid-job) counts as
an attempt where its subscription says so (``Bus.subscribe(count_redeliveries=True)``):
RETRY while attempts remain, then DEAD_LETTER (``settlement_for_interruption``).

What the bus does beyond returning the settlement to the adapter (telling the dead-letter
hook, sending one event of a batch on alone) is in ``shared.messaging.settling``.
"""

from __future__ import annotations

from shared.errors import InvalidMessage, TransientError
from shared.messaging.broker import Outcome, Settlement

__all__ = ["settlement_for", "settlement_for_interruption"]


def settlement_for(error: BaseException | None, *, attempt: int, max_attempts: int) -> Settlement:
    """How a delivery is settled whose handler raised ``error`` (None: it succeeded) on its
    ``attempt``-th try of ``max_attempts``."""
    if error is None:
        return Settlement(Outcome.ACK)
    reason = f"{type(error).__name__}: {error}"
    if isinstance(error, InvalidMessage):
        return Settlement(Outcome.DEAD_LETTER, reason)
    if isinstance(error, TransientError):
        return Settlement(Outcome.REQUEUE, reason)
    if attempt < max_attempts:
        return Settlement(Outcome.RETRY, reason)
    return Settlement(Outcome.DEAD_LETTER, f"failed {attempt} times; last error: {reason}")


def settlement_for_interruption(*, attempt: int, max_attempts: int) -> Settlement:
    """How a redelivered message is settled, unread, whose ``attempt``-th try was
    interrupted: its consumer went away without settling it."""
    if attempt < max_attempts:
        return Settlement(
            Outcome.RETRY,
            f"attempt {attempt} was interrupted: whoever was handling it went away without "
            "finishing (killed, or cut off from the broker)",
        )
    return Settlement(
        Outcome.DEAD_LETTER,
        f"every one of its {attempt} attempts was interrupted: each worker that took it went "
        "away without finishing (killed, or cut off from the broker)",
    )
