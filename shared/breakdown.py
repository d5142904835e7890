"""A profiled evaluation's layers, broken down and lined up with another's.

What ``GET /v1/evaluations/{id}/layers`` answers and ``dlscope layers`` prints, computed
from the stored ``evaluation.profiled`` event alone (never from the trace, which Jaeger
drops after its retention):

- per pass: the top-k layers by their typical time per query (``per_query_ns``), and the
  time per op type by the same measure: the one ordering ``dlscope run``, ``dlscope layers``
  and the web page's chart all show;
- lined up with other evaluations of the same model (on other frameworks): by layer name
  where both name the graph's nodes (ONNX Runtime, OpenCL, TensorRT run the same ONNX graph),
  else by the order of their kinds of operation (a convolution is a ``Conv``, an
  ``aten::_convolution``, a ``_MklNativeFusedConv2D``), as a diff lines up two texts.
"""

from __future__ import annotations

import difflib
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, Protocol

from pydantic import Field

from shared.messages import (
    EvaluationMeasured,
    EvaluationProfiled,
    LayerStat,
    LevelOutcome,
    ProfiledLevel,
    ProfiledPass,
    TraceLevel,
)
from shared.values import Frozen

__all__ = [
    "AlignedRow",
    "ComparedEvaluation",
    "LayerAlignment",
    "LayerBreakdown",
    "LayerReport",
    "OpTypeShare",
    "RankedLayer",
    "align",
    "breakdown",
    "kind_of",
    "per_query_ns",
    "profile_of",
    "ranked",
    "report",
]


def per_query_ns(layer: LayerStat, queries: int) -> float:
    """``layer``'s typical time in one query: its median call times its calls per query.

    What ranks the layers. Not their summed time: a pass profiles a few queries (5 by
    default), and one cold call (a first run that repacks its weights, a cache filled) made
    a layer that sums to 12 ms of which 11 in one call lead a ranking its warm calls never
    would. The median per call ignores such a call while the layer made at least three; it
    is stored with every layer, so events recorded before this ranking rank alike."""
    return layer.p50_ns * layer.calls / max(queries, 1)


def _share(part_ns: float, query_ns: float) -> float:
    return part_ns / query_ns if query_ns > 0 else 0.0


class RankedLayer(LayerStat):
    """A layer with the measure that ranks it."""

    per_query_ns: float = Field(ge=0, description="median per call x calls per query")
    per_query_share: float = Field(ge=0, description="per_query_ns of the pass's query p50")


def ranked(profiled: ProfiledPass) -> list[RankedLayer]:
    """``profiled``'s layers, slowest first by ``per_query_ns`` (ties in graph order)."""
    layers = [
        RankedLayer(
            **layer.model_dump(),
            per_query_ns=(typical := per_query_ns(layer, profiled.queries)),
            per_query_share=_share(typical, profiled.query_p50_ns),
        )
        for layer in profiled.layers
    ]
    return sorted(layers, key=lambda layer: -layer.per_query_ns)


class OpTypeShare(Frozen):
    op_type: str
    layers: int = Field(description="distinct layers of this op type")
    calls: int
    total_ns: int
    share: float = Field(description="summed time over the queries' time")
    per_query_ns: float = Field(default=0.0, description="its layers' per_query_ns, summed")
    per_query_share: float = Field(default=0.0, description="per_query_ns of the query p50")


class LayerBreakdown(Frozen):
    """One profiled pass: its slowest layers and its time per op type."""

    level: ProfiledLevel
    source: str
    queries: int
    batch_size: int
    query_p50_ns: float
    layers_total: int = Field(description="distinct layers the pass recorded")
    top: list[RankedLayer] = Field(description="the slowest layers by per_query_ns, first")
    op_types: list[OpTypeShare] = Field(description="slowest first, by per_query_ns")


def breakdown(profiled: ProfiledPass, top: int) -> LayerBreakdown:
    layers = ranked(profiled)
    by_type: dict[str, list[RankedLayer]] = {}
    for layer in layers:
        by_type.setdefault(layer.op_type, []).append(layer)
    op_types = [
        OpTypeShare(
            op_type=op_type,
            layers=len(kind),
            calls=sum(layer.calls for layer in kind),
            total_ns=sum(layer.total_ns for layer in kind),
            share=sum(layer.share for layer in kind),
            per_query_ns=(typical := sum(layer.per_query_ns for layer in kind)),
            per_query_share=_share(typical, profiled.query_p50_ns),
        )
        for op_type, kind in by_type.items()
    ]
    return LayerBreakdown(
        level=profiled.level,
        source=profiled.source,
        queries=profiled.queries,
        batch_size=profiled.batch_size,
        query_p50_ns=profiled.query_p50_ns,
        layers_total=len(profiled.layers) + profiled.layers_dropped,
        top=layers[:top],
        op_types=sorted(op_types, key=lambda share: -share.per_query_ns),
    )


# Kinds of operation, tried in order on the lower-cased op type: the first pattern found names
# it. Matrix products before "add" (aten::addmm), pooling kinds before "pool".
_KINDS: tuple[tuple[str, str], ...] = (
    ("conv", "conv"),
    ("matmul|gemm|linear|addmm|dense|inner_product|\\bmm\\b|bmm", "matmul"),
    ("max_?pool", "maxpool"),
    ("avg_?pool|average_?pool|adaptive_avg|mean", "avgpool"),
    ("batch_?norm|fusedbatchnorm", "batchnorm"),
    ("softmax", "softmax"),
    ("relu", "relu"),
    ("sigmoid", "sigmoid"),
    ("concat|\\bcat\\b", "concat"),
    ("reshape|flatten|\\bview\\b|squeeze", "reshape"),
    ("transpose|permute", "transpose"),
    ("\\badd|addv2|biasadd", "add"),
)


def kind_of(op_type: str) -> str:
    """The kind of operation an op type is, named alike on every framework."""
    lowered = op_type.lower()
    for pattern, kind in _KINDS:
        if re.search(pattern, lowered):
            return kind
    return lowered.rpartition("::")[2].lstrip("_")


class ComparedEvaluation(Frozen):
    evaluation_id: uuid.UUID
    framework: str
    source: str
    query_p50_ns: float


class AlignedRow(Frozen):
    kind: str = Field(description="the kind of operation, alike on every framework")
    matched_by: Literal["name", "kind"] | None = Field(
        description="how the layers of the row were matched to the first evaluation's; None "
        "for a layer only one evaluation has (fused away, or a bookkeeping op)"
    )
    layers: list[LayerStat | None] = Field(description="one per evaluation, in their order")


class LayerAlignment(Frozen):
    level: ProfiledLevel
    evaluations: list[ComparedEvaluation]
    rows: list[AlignedRow]


def align(
    level: ProfiledLevel, profiles: Sequence[tuple[EvaluationProfiled, ProfiledPass]]
) -> LayerAlignment:
    """The passes of ``profiles`` (one per evaluation, at ``level``) lined up against the
    first's layers, in the first's order; what the others have that it lacks comes after the
    row it follows."""
    reference = profiles[0][1].layers
    rows: list[list[LayerStat | None]] = [[layer] for layer in reference]
    how: list[Match | None] = [None for _ in reference]
    extra: dict[int, list[list[LayerStat | None]]] = {}
    width = len(profiles)
    for column, (_, other) in enumerate(profiles[1:], start=1):
        for row in [*rows, *(added for added_rows in extra.values() for added in added_rows)]:
            row.append(None)
        for a, b, matched_by in _pairs(reference, other.layers):
            if b is None:
                continue  # only the first has it: its row stays empty in this column
            if a is not None and matched_by is not None:
                rows[a][column] = other.layers[b]
                how[a] = how[a] or matched_by
                continue
            only: list[LayerStat | None] = [None] * (column + 1)
            only[column] = other.layers[b]
            extra.setdefault(-1 if a is None else a, []).append(only)
    ordered: list[AlignedRow] = []
    for row in extra.get(-1, []):
        ordered.append(_row(row, None, width))
    for index, row in enumerate(rows):
        ordered.append(_row(row, how[index], width))
        for added in extra.get(index, []):
            ordered.append(_row(added, None, width))
    return LayerAlignment(
        level=level,
        evaluations=[
            ComparedEvaluation(
                evaluation_id=profiled.evaluation_id,
                framework=profiled.framework,
                source=passed.source,
                query_p50_ns=passed.query_p50_ns,
            )
            for profiled, passed in profiles
        ],
        rows=ordered,
    )


def _row(layers: list[LayerStat | None], matched_by: Match | None, width: int) -> AlignedRow:
    full = layers + [None] * (width - len(layers))
    first = next(layer for layer in full if layer is not None)
    return AlignedRow(kind=kind_of(first.op_type), matched_by=matched_by, layers=full)


Match = Literal["name", "kind"]


def _pairs(
    a: Sequence[LayerStat], b: Sequence[LayerStat]
) -> Iterable[tuple[int | None, int | None, Match | None]]:
    """``a`` and ``b`` lined up, in order: ``(i, j, how)`` for a match; ``(i, None, None)``
    for a layer only ``a`` has; ``(i, j, None)`` for a layer only ``b`` has, ``i`` being the
    last of ``a``'s before it (None: before them all). By name where the two share names,
    by kind elsewhere (and within stretches whose names differ)."""
    shared = {layer.node for layer in a} & {layer.node for layer in b}
    if len(shared) * 2 >= min(len(a), len(b)) > 0:
        yield from _lined_up(a, b, 0, 0, lambda layer: layer.node, "name")
    else:
        yield from _lined_up(a, b, 0, 0, lambda layer: kind_of(layer.op_type), "kind")


def _lined_up(
    a: Sequence[LayerStat],
    b: Sequence[LayerStat],
    i0: int,
    j0: int,
    key: Callable[[LayerStat], str],
    how: Match,
) -> Iterable[tuple[int | None, int | None, Match | None]]:
    matcher = difflib.SequenceMatcher(None, [key(x) for x in a], [key(y) for y in b], False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            for offset in range(i2 - i1):
                yield i0 + i1 + offset, j0 + j1 + offset, how
        elif tag == "replace" and how == "name":  # unnamed alike: their kinds may line up
            yield from _lined_up(
                a[i1:i2], b[j1:j2], i0 + i1, j0 + j1, lambda x: kind_of(x.op_type), "kind"
            )
        else:
            for i in range(i1, i2):
                yield i0 + i, None, None
            before = i0 + i2 - 1 if i0 + i2 > 0 else None
            for j in range(j1, j2):
                yield before, j0 + j, None


class _Stored(Protocol):
    @property
    def type(self) -> str: ...
    @property
    def payload(self) -> Mapping[str, Any]: ...


class LayerReport(Frozen):
    """An evaluation's layers: what ``GET /v1/evaluations/{id}/layers`` answers."""

    evaluation_id: uuid.UUID
    framework: str
    trace_level: TraceLevel
    levels: list[LevelOutcome] = Field(
        description="each level asked for: captured or why not, and its overhead"
    )
    passes: list[LayerBreakdown] = Field(description="one per profiled pass, shallowest first")
    comparison: LayerAlignment | None = Field(
        default=None, description="with compare: the layers lined up, this evaluation first"
    )


def report(
    profiled: EvaluationProfiled,
    *,
    top: int,
    level: ProfiledLevel | None = None,
    compared: Sequence[EvaluationProfiled] = (),
) -> LayerReport | str:
    """``profiled``'s layer report (only ``level``'s pass, if given; lined up with
    ``compared`` at the first pass's level, if any); or what is missing for it."""
    passes = [p for p in profiled.passes if level is None or p.level == level]
    if not passes:
        captured = ", ".join(p.level for p in profiled.passes)
        return f"evaluation {profiled.evaluation_id} has no {level} pass; it has: {captured}"
    comparison = None
    if compared:
        at = passes[0].level
        lined_up = [(profiled, passes[0])]
        for other in compared:
            found = [p for p in other.passes if p.level == at]
            if not found:
                has = ", ".join(p.level for p in other.passes)
                return (
                    f"evaluation {other.evaluation_id} has no {at} pass to compare (it has: {has})"
                )
            lined_up.append((other, found[0]))
        comparison = align(at, lined_up)
    return LayerReport(
        evaluation_id=profiled.evaluation_id,
        framework=profiled.framework,
        trace_level=profiled.trace_level,
        levels=profiled.levels,
        passes=[breakdown(p, top) for p in passes],
        comparison=comparison,
    )


def profile_of(events: Sequence[_Stored]) -> EvaluationProfiled | str:
    """The evaluation's layer summary (its latest attempt's) from its stored events; or why
    there is none (not measured yet, traced at a level that profiles no layers, ...)."""
    profiled = [e for e in events if e.type == EvaluationProfiled.TYPE]
    if profiled:
        return EvaluationProfiled.model_validate(profiled[-1].payload)
    if not events:
        return "no such evaluation (yet)"
    measured = [e for e in events if e.type == EvaluationMeasured.TYPE]
    if not measured:
        return "it has not been measured (yet): its layers come with its measurement"
    last = EvaluationMeasured.model_validate(measured[-1].payload)
    missed = [o for o in last.tracing if o.level in ("framework", "library", "hardware")]
    if missed:
        return "no layers were captured: " + "; ".join(
            f"{o.level}: {o.reason}" for o in missed if not o.captured
        )
    return (
        f"it was traced at level {last.trace_level!r}, which profiles no layers: ask for "
        "trace_level 'framework' (or deeper)"
    )
