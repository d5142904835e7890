"""The one acknowledgement policy of every dlscope consumer.

handler succeeded                        -> ACK
message invalid (InvalidMessage)         -> DEAD_LETTER at once: retrying cannot help
a dependency unavailable (TransientError:
  store or broker down, request timeout) -> REQUEUE: the message is fine, so it is neither
                                            counted as an attempt nor dead-lettered; the bus
                                            pauses the subscription until the dependency is back
anything else failed, attempts remain    -> RETRY (back to the queue, attempt + 1)
anything else failed on the last attempt -> DEAD_LETTER, with the error as the reason
"""

from __future__ import annotations

from shared.errors import InvalidMessage, TransientError
from shared.messaging.broker import Outcome, Settlement

__all__ = ["settlement_for"]


def settlement_for(error: BaseException | None, *, attempt: int, max_attempts: int) -> Settlement:
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
