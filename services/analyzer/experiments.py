"""An experiment as the analyzer follows it: a fold over its plan and its members' outcomes,
and the comparison made of it.

Pure: events in, state out, no clock. Events arrive in any order (an outcome may overtake the
plan on a busy broker), so the state keeps outcomes until the plan names its members; an
experiment is settled when every member of the plan has an outcome. A member's first outcome
is its outcome, as in the evaluations read model: a later one (a frozen worker's completion
after its failure, an echo) changes nothing.
"""

from __future__ import annotations

import itertools
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from services.analyzer.parity import compare_outputs
from shared.messages import (
    ComparedLatency,
    ComparedTokens,
    EvaluationCompleted,
    EvaluationFailed,
    ExperimentComparison,
    ExperimentGap,
    ExperimentMember,
    ExperimentScheduled,
    GenerationSummary,
    LatencyStatistics,
    MemberResult,
    PairParity,
)

__all__ = ["Experiment", "ExperimentEvent", "Outcome", "compare", "evolve", "member_names"]

Outcome = EvaluationCompleted | EvaluationFailed
ExperimentEvent = ExperimentScheduled | EvaluationCompleted | EvaluationFailed


@dataclass(frozen=True)
class Experiment:
    experiment_id: uuid.UUID
    plan: ExperimentScheduled | None = None
    outcomes: Mapping[uuid.UUID, Outcome] = field(default_factory=dict)
    # Set once the comparison is published: later events change nothing.
    compared: bool = False

    @property
    def settled(self) -> bool:
        return self.plan is not None and all(
            member.evaluation_id in self.outcomes for member in self.plan.members
        )


def evolve(current: Experiment | None, event: ExperimentEvent) -> Experiment:
    """The experiment after ``event``, which must name it (``experiment_id``)."""
    if event.experiment_id is None:
        raise ValueError(f"evaluation {event.evaluation_id} is in no experiment")
    state = current or Experiment(event.experiment_id)
    if state.compared:
        return state
    if isinstance(event, ExperimentScheduled):
        return state if state.plan is not None else replace(state, plan=event)
    if event.evaluation_id in state.outcomes:
        return state
    return replace(state, outcomes={**state.outcomes, event.evaluation_id: event})


def compare(state: Experiment) -> ExperimentComparison:
    """The comparison of what ``state`` holds; members without an outcome are missing."""
    plan = state.plan
    if plan is None:
        raise ValueError(f"experiment {state.experiment_id} has no plan yet: nothing to compare")
    results = [_result(m, state.outcomes.get(m.evaluation_id), plan) for m in plan.members]
    completed = [
        (member.evaluation_id, outcome)
        for member in plan.members
        if isinstance(outcome := state.outcomes.get(member.evaluation_id), EvaluationCompleted)
    ]
    names = member_names(plan.members)
    parity = [
        _parity(reference, candidate, plan, names)
        for reference, candidate in itertools.combinations(completed, 2)
    ]
    failures = list(plan.skipped) + [
        ExperimentGap(
            reason=result.error or result.status,
            model=result.model,
            framework=result.framework,
            agent_id=result.agent_id,
            evaluation_id=result.evaluation_id,
        )
        for result in results
        if result.status != "completed"
    ]
    return ExperimentComparison(
        complete=state.settled,
        reference=completed[0][0] if completed else None,
        tolerance=plan.tolerance,
        evaluations=results,
        parity=parity,
        parity_ok=all(p.within_tolerance for p in parity) if len(completed) > 1 else None,
        failures=failures,
    )


def _result(
    member: ExperimentMember, outcome: Outcome | None, plan: ExperimentScheduled
) -> MemberResult:
    common = member.model_dump(include=set(MemberResult.model_fields))
    if isinstance(outcome, EvaluationCompleted):
        summary = outcome.result
        return MemberResult(
            **common,
            status="completed",
            latency=ComparedLatency.model_validate(
                summary.model_dump(include=set(ComparedLatency.model_fields))
            ),
            tokens=_tokens(summary.generation),
            accuracy=summary.accuracy,
            verdict=summary.verdict,
            cost=None if summary.machine is None else summary.machine.cost,
        )
    if isinstance(outcome, EvaluationFailed):
        return MemberResult(**common, status="failed", error=f"{outcome.stage}: {outcome.reason}")
    return MemberResult(
        **common,
        status="missing",
        error=f"timeout: no outcome within {plan.deadline_s:g} s of the experiment being scheduled",
    )


def _tokens(generation: GenerationSummary | None) -> ComparedTokens | None:
    if generation is None:
        return None

    def ms(statistics: LatencyStatistics | None, p: float) -> float | None:
        return None if statistics is None else statistics.percentile(p).value_ns / 1e6

    ttft = ms(generation.ttft, 0.5)
    assert ttft is not None
    return ComparedTokens(
        ttft_p50_ms=ttft,
        tpot_p50_ms=ms(generation.tpot, 0.5),
        itl_p99_ms=ms(generation.itl, 0.99),
        output_tokens_per_s=generation.output_tokens_per_s,
    )


def member_names(members: list[ExperimentMember]) -> dict[uuid.UUID, str]:
    """Each member as a reader knows it: its framework, with its agent where two members
    share a framework (two servers behind endpoint workers), and its model where two share
    both."""
    frameworks = Counter(m.framework for m in members)
    agents = Counter((m.framework, m.agent_id) for m in members)
    names = {}
    for m in members:
        name = m.framework if frameworks[m.framework] == 1 else f"{m.framework} ({m.agent_id})"
        if agents[(m.framework, m.agent_id)] > 1:
            name = f"{name} {m.model}"
        names[m.evaluation_id] = name
    return names


def _parity(
    reference: tuple[uuid.UUID, EvaluationCompleted],
    candidate: tuple[uuid.UUID, EvaluationCompleted],
    plan: ExperimentScheduled,
    names: Mapping[uuid.UUID, str],
) -> PairParity:
    (reference_id, ours), (candidate_id, theirs) = reference, candidate
    mine, other = ours.result.fingerprint, theirs.result.fingerprint
    named = {
        "reference_name": names.get(reference_id, str(reference_id)),
        "candidate_name": names.get(candidate_id, str(candidate_id)),
    }
    if mine is None or other is None:
        missing = named["reference_name" if mine is None else "candidate_name"]
        return PairParity(
            reference=reference_id,
            candidate=candidate_id,
            comparable=False,
            within_tolerance=False,
            reason=f"{missing} recorded no output fingerprint",
            **named,
        )
    compared = compare_outputs(reference_id, mine, candidate_id, other, plan.tolerance)
    return compared.model_copy(update=named)
