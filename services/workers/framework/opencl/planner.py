"""Buffer planning: every run-time tensor gets a place in one device buffer (the arena), and
tensors whose lifetimes do not overlap share bytes.

A tensor lives from the step that writes it to the last step that reads it, both included,
so a kernel's output never shares bytes with its own inputs. Graph inputs are written before
the first step; graph outputs are read after the last. An alias (Reshape, Flatten, ...) is
the same bytes as its source: the two share one lifetime, the union of theirs.

Places are chosen greedily, largest tensor first, at the lowest offset that no overlapping
tensor already holds: the usual arena heuristic (TFLite's, for one), within a few percent of
the lower bound (the largest total size alive at any one step) on CNNs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from services.workers.framework.opencl.lowering import Alias, Layer
from shared.errors import PredictorError

__all__ = ["Lifetime", "MemoryPlan", "assign_offsets", "lifetimes", "plan_memory"]


@dataclass(frozen=True)
class Lifetime:
    name: str
    nbytes: int
    first: int  # step that writes it (0: before the first step)
    last: int  # step that last reads it, included


@dataclass(frozen=True)
class MemoryPlan:
    offsets: dict[str, int]  # every run-time tensor, aliases included -> byte offset
    sizes: dict[str, int]  # bytes
    arena_bytes: int
    lifetimes: tuple[Lifetime, ...]  # of the tensors that own bytes (aliases resolved)


def lifetimes(
    steps: Sequence[Layer | Alias],
    inputs: Iterable[str],
    outputs: Iterable[str],
    sizes: dict[str, int],
) -> tuple[list[Lifetime], dict[str, str]]:
    """Each storage's lifetime, and which storage every tensor (alias or not) lives in."""
    root: dict[str, str] = {}
    span: dict[str, list[int]] = {}

    def write(name: str, step: int) -> None:
        root[name] = name
        span[name] = [step, step]

    def read(name: str, step: int, reader: str) -> None:
        if name not in root:
            raise PredictorError(f"{reader} reads {name!r}, which nothing before it produces")
        span[root[name]][1] = max(span[root[name]][1], step)

    for name in inputs:
        write(name, 0)
    for step, item in enumerate(steps, start=1):
        if isinstance(item, Alias):
            read(item.source, step, item.output)
            root[item.output] = root[item.source]
            continue
        for name in item.reads:
            read(name, step, item.node)
        for name in item.writes:
            write(name, step)
        for name, _ in item.scratch:
            write(name, step)
    end = len(steps) + 1
    for name in outputs:
        if name in root:
            read(name, end, "the graph's outputs")
    scratch = {
        name: nbytes for item in steps if isinstance(item, Layer) for name, nbytes in item.scratch
    }
    owned = [
        Lifetime(name, scratch.get(name, sizes.get(name, 0)), first, last)
        for name, (first, last) in span.items()
    ]
    return owned, root


def _aligned(value: int, alignment: int) -> int:
    return max(alignment, -(-value // alignment) * alignment)


def assign_offsets(owned: Sequence[Lifetime], alignment: int) -> tuple[dict[str, int], int]:
    """Offsets such that no two tensors alive at the same step overlap; and the arena size."""
    placed: list[tuple[int, int, Lifetime]] = []  # (offset, end, lifetime)
    offsets: dict[str, int] = {}
    for life in sorted(owned, key=lambda t: (-t.nbytes, t.first, t.name)):
        size = _aligned(life.nbytes, alignment)
        busy = sorted(
            (start, stop)
            for start, stop, other in placed
            if other.first <= life.last and life.first <= other.last
        )
        offset = 0
        for start, stop in busy:
            if offset + size <= start:
                break
            offset = max(offset, stop)
        offsets[life.name] = offset
        placed.append((offset, offset + size, life))
    return offsets, max((stop for _, stop, _ in placed), default=0)


def plan_memory(
    steps: Sequence[Layer | Alias],
    inputs: Iterable[str],
    outputs: Iterable[str],
    sizes: dict[str, int],
    alignment: int,
) -> MemoryPlan:
    owned, root = lifetimes(steps, inputs, outputs, sizes)
    offsets, arena = assign_offsets(owned, alignment)
    by_name = {life.name: life.nbytes for life in owned}
    return MemoryPlan(
        offsets={name: offsets[storage] for name, storage in root.items()},
        sizes={name: by_name[storage] for name, storage in root.items()},
        arena_bytes=arena,
        lifetimes=tuple(owned),
    )
