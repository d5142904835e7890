"""The registry's answers to ``resolve`` calls, kept so that dispatch does not ask twice.

An exact version (``===1.0.1``, what a service asks once it knows the version) answers the
same for good: a registered version never changes, and a deprecated one still resolves when
pinned. A constraint (``*``, ``>=1,<2``) answers the newest matching version, which a
registration or a deprecation changes: it is kept ``ttl_s`` at most, and forgotten at once
when the holder learns that an artifact of that name changed (``forget``). Only answers that
found a manifest are kept: a miss is asked again, so a model registered a moment ago is
never refused from memory.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from shared.messages import ResolvedArtifact

__all__ = ["Resolutions", "exactly"]

_Key = tuple[str, str, str]


def exactly(version: str) -> str:
    """The constraint that only ``version`` satisfies (string equality: no local versions)."""
    return f"==={version}"


class Resolutions:
    def __init__(
        self,
        *,
        ttl_s: float,
        size: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ttl_s = ttl_s
        self._size = size
        self._clock = clock
        # key -> (answer, expiry or None for an exact version's)
        self._kept: OrderedDict[_Key, tuple[ResolvedArtifact, float | None]] = OrderedDict()

    def get(self, kind: str, name: str, constraint: str) -> ResolvedArtifact | None:
        key = (kind, name, constraint)
        kept = self._kept.get(key)
        if kept is None:
            return None
        answer, expiry = kept
        if expiry is not None and self._clock() >= expiry:
            del self._kept[key]
            return None
        self._kept.move_to_end(key)
        return answer

    def put(self, kind: str, name: str, constraint: str, answer: ResolvedArtifact) -> None:
        if answer.manifest is None:
            return
        exact = constraint == exactly(answer.manifest.version)
        if not exact and self._ttl_s <= 0:
            return
        expiry = None if exact else self._clock() + self._ttl_s
        self._kept[(kind, name, constraint)] = (answer, expiry)
        self._kept.move_to_end((kind, name, constraint))
        while len(self._kept) > self._size:
            self._kept.popitem(last=False)

    def forget(self, kind: str, name: str) -> None:
        """An artifact ``kind`` ``name`` was registered or deprecated: what a constraint on it
        resolves to may have changed (exact versions have not)."""
        for key, (_, expiry) in list(self._kept.items()):
            if key[:2] == (kind, name) and expiry is not None:
                del self._kept[key]
