"""A sweep as its page and ``GET /v1/sweeps/{id}`` show it: the evaluations whose requests
carry its id (``dlscope sweep`` labels each load), each load's token figures, verdict and
judgement against the bounds asked, which loads were disturbed, and which are on the Pareto
frontier of system throughput against each user's speed.

A load measured twice (its first run disturbed) counts by its last evaluation, as the sweep
itself decided; the first stays listed, marked as measured again. A goodput search's answer
is read back from the judgements: the highest load that met every bound, the lowest above it
that missed one, and whatever left that uncertain.
"""

from __future__ import annotations

import uuid

from pydantic import BaseModel, ConfigDict, Field

from shared.eventstore import EvaluationView, EventStore
from shared.measurement.goodput import disturbance, disturbing, judge_probe
from shared.measurement.pareto import pareto_frontier, per_user_tokens_per_s
from shared.messages import GenerationSummary, LatencyStatistics, Scenario, SweepPoint

__all__ = [
    "LOAD_UNITS",
    "MAX_SWEEP_LOADS",
    "SweepAnswer",
    "SweepLoad",
    "SweepView",
    "read_sweep",
]

# What a sweep's load is counted in, by what it varies (its page, and each load's page).
LOAD_UNITS = {"streams": "concurrent streams", "rate": "requests/s", "batch": "batch size"}
# The evaluations one sweep's page gathers: a sweep takes at most 64 levels, each measured
# at most twice, and a search fewer.
MAX_SWEEP_LOADS = 256


class SweepLoad(BaseModel):
    """One evaluation of the sweep, at its load."""

    model_config = ConfigDict(frozen=True)

    level: float
    evaluation_id: uuid.UUID
    status: str
    verdict: str | None
    # Why its run was INVALID for anything but its bounds (another process, a late client,
    # failed requests): the sweep measured it once more.
    disturbed: str | None
    disturbed_by: list[str] = Field(default_factory=list, description="its codes")
    # Its judgement against the bounds asked (meets, misses, indeterminate) and why; None
    # where no bound was asked or it has no token figures.
    judgement: str | None
    judged: str
    requests: int | None
    failed: int
    ttft_ms: float | None
    tpot_ms: float | None
    e2e_ms: float | None
    output_tokens_per_s: float | None
    requests_per_s: float | None
    goodput_per_s: float | None
    # One user's speed: 1000 / the mean TPOT (output tokens/s a stream sees while decoding).
    per_user_tokens_per_s: float | None
    error: str | None
    superseded: bool = False  # measured again: the later evaluation of this load counts
    pareto: bool = False  # no other counted load is faster for its users and for the system


class SweepAnswer(BaseModel):
    """A search's answer, read back from its loads' judgements."""

    found: float = Field(description="the highest load meeting every bound (0: none did)")
    below: float | None = Field(description="the lowest load above it missing one")
    uncertain: list[str] = Field(description="loads disturbed or undecided, and why")


class SweepView(BaseModel):
    """A sweep: its loads in the order they ran, and what they say."""

    model_config = ConfigDict(frozen=True)

    sweep_id: uuid.UUID
    model: str | None
    framework: str | None
    hardware: str | None
    over: str
    search: bool
    percentile: float
    bounds: dict[str, float] = Field(description="the bounds asked (ms), each judged")
    loads: list[SweepLoad] = Field(default_factory=list)
    answer: SweepAnswer | None = Field(
        default=None, description="the highest load meeting the bounds; None: none asked"
    )

    @property
    def counted(self) -> list[SweepLoad]:
        """Each load's deciding evaluation, by load."""
        return sorted((load for load in self.loads if not load.superseded), key=_level)

    @property
    def unit(self) -> str:
        return LOAD_UNITS[self.over]


async def read_sweep(store: EventStore, sweep_id: uuid.UUID) -> SweepView | None:
    """The sweep whose loads carry ``sweep_id``; None while none is stored."""
    views = await store.list_sweep(sweep_id, limit=MAX_SWEEP_LOADS)
    points = [(view, point) for view in views if (point := _point(view)) is not None]
    if not points:
        return None
    first_view, first = points[0]
    scenario = _scenario(first_view)
    percentile = scenario.slo_percentile
    bounds = {
        name: value
        for name, value in (
            ("ttft_ms", scenario.ttft_bound_ms),
            ("tpot_ms", scenario.tpot_bound_ms),
            ("e2e_ms", scenario.e2e_bound_ms),
        )
        if value is not None
    }
    last = {point.level: view.evaluation_id for view, point in points}
    loads = [
        _load(
            view,
            point.level,
            bounds,
            percentile,
            superseded=last[point.level] != view.evaluation_id,
        )
        for view, point in points
    ]
    frontier = pareto_frontier(
        [
            (load.evaluation_id, load.per_user_tokens_per_s, load.output_tokens_per_s)
            for load in loads
            if not load.superseded
        ]
    )
    loads = [
        load.model_copy(update={"pareto": True}) if load.evaluation_id in frontier else load
        for load in loads
    ]
    counted = [load for load in loads if not load.superseded]
    return SweepView(
        answer=_answer(counted, bounds),
        sweep_id=sweep_id,
        model=first_view.model,
        framework=first_view.framework,
        hardware=first_view.hardware,
        over=first.over,
        search=any(point.search for _, point in points),
        percentile=percentile,
        bounds=bounds,
        loads=loads,
    )


def _answer(counted: list[SweepLoad], bounds: dict[str, float]) -> SweepAnswer | None:
    """The highest load meeting every bound asked (0: none did), the lowest above it
    missing one (None: none did), and what makes it uncertain (a load disturbed, or one
    whose figures could not tell); None where no bound was asked."""
    if not bounds:
        return None
    found = max((load.level for load in counted if load.judgement == "meets"), default=0.0)
    missed = [load.level for load in counted if load.judgement == "misses" and load.level > found]
    unsure = [
        f"{load.level:g}: {load.disturbed or load.judged}"
        for load in sorted(counted, key=_level)
        if load.disturbed is not None or load.judgement == "indeterminate"
    ]
    return SweepAnswer(found=found, below=min(missed, default=None), uncertain=unsure)


def _point(view: EvaluationView) -> SweepPoint | None:
    label = (view.request or {}).get("sweep")
    return None if label is None else SweepPoint.model_validate(label)


def _scenario(view: EvaluationView) -> Scenario:
    return Scenario.model_validate((view.request or {}).get("scenario") or {})


def _load(
    view: EvaluationView,
    level: float,
    bounds: dict[str, float],
    percentile: float,
    *,
    superseded: bool,
) -> SweepLoad:
    result = view.result
    generation = None if result is None else result.generation
    verdict = None if result is None else result.verdict
    judgement, judged = None, ""
    if generation is not None and bounds:
        judgement, judged = judge_probe(
            generation,
            ttft_bound_ms=bounds.get("ttft_ms"),
            tpot_bound_ms=bounds.get("tpot_ms"),
            e2e_bound_ms=bounds.get("e2e_ms"),
            percentile=percentile,
        )
    return SweepLoad(
        level=level,
        evaluation_id=view.evaluation_id,
        status=view.status,
        verdict=None if verdict is None else verdict.status,
        disturbed=disturbance(verdict),
        disturbed_by=[str(reason.code) for reason in disturbing(verdict)],
        judgement=judgement,
        judged=judged,
        requests=None if generation is None else generation.requests,
        failed=0 if generation is None else sum(generation.failures.values()),
        ttft_ms=_at(generation, "ttft", percentile),
        tpot_ms=_at(generation, "tpot", percentile),
        e2e_ms=_at(generation, "e2e", percentile),
        output_tokens_per_s=None if generation is None else generation.output_tokens_per_s,
        requests_per_s=None if generation is None else generation.requests_per_s,
        goodput_per_s=None if generation is None else generation.goodput_per_s,
        per_user_tokens_per_s=per_user_tokens_per_s(generation),
        error=view.error,
        superseded=superseded,
    )


def _at(generation: GenerationSummary | None, metric: str, percentile: float) -> float | None:
    statistics: LatencyStatistics | None = (
        None if generation is None else getattr(generation, metric)
    )
    if statistics is None:
        return None
    try:
        return statistics.percentile(percentile).value_ns / 1e6
    except KeyError:  # a percentile the run did not compute: not one to show
        return None


def _level(load: SweepLoad) -> float:
    return load.level
