"""Is a run's result valid? A verdict with machine-readable reasons.

Errors break the scenario's run rules (MLPerf's, where it has them): too few queries, too
short, a server latency bound missed, a load generator that did not apply the requested
load, queries left unfinished, a query that stalled (the process was stopped mid-query: it
timed the stall, not the model); or conditions measured to be unfair: other processes,
hypervisor steal, thermal throttling or other GPU processes during a timed window (two
snapshots around each timed loop: ``window``), or a noise probe that ran at half the speed
or less after the timed queries than before the warm-up, or the other way round (``noise``:
a smaller shift is a warning). Any error makes the run INVALID. Warnings question the
conditions (a CPU governor that scales frequency, other processes busy as the run started
(a look back over the seconds before it, not a measurement of the window), a warm-up that never
settled, high run-to-run variation, a harness that costs a noticeable part of each latency):
the run stays VALID, and the reader decides. The verdict and its reasons travel in results and
are defined with them (shared.messages.verdicts); the rules are here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pydantic import Field

from shared.measurement.noise import NoiseProbe
from shared.measurement.repetitions import RepetitionSummary
from shared.measurement.results import ScenarioResult, TimedPhase, summarize_result
from shared.measurement.scenarios import BatchSweep, Offline, ScenarioPlan, Server
from shared.measurement.statistics import LatencyStatistics
from shared.measurement.window import MachineWindow
from shared.messages.verdicts import Reason, ReasonCode, Severity, Verdict
from shared.values import Frozen

__all__ = ["Reason", "ReasonCode", "Severity", "ValidityThresholds", "Verdict", "judge"]


class ValidityThresholds(Frozen):
    late_issue_fraction_of_bound: float = Field(
        default=0.1,
        gt=0,
        description="a server query is late when issued this share of its latency bound late",
    )
    max_late_share: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="most late queries allowed; default 1 - the target percentile, so late "
        "queries alone cannot decide the headline percentile",
    )
    max_repetition_cv: float = Field(
        default=0.03, gt=0, description="of the repeats' medians (dlscope run --max-spread)"
    )
    max_overhead_share: float = Field(
        default=0.05, gt=0, description="harness time per query, as a share of the median"
    )
    max_load_per_cpu: float = Field(
        default=1.0, gt=0, description="1-minute load average (less our own) per logical CPU"
    )
    # A stalled query is one past both bounds. Both, so that a quiet run never trips it: a
    # fast model's tail (a page fault, a scheduler tick) stays far below a second, and a slow
    # one's (seconds per query) far below a hundred times its median; a worker stopped for
    # seconds (SIGSTOP, a paused VM, a host swapping) is past both.
    stall_min_s: float = Field(default=1.0, gt=0, description="a stalled query takes longer")
    stall_factor: float = Field(
        default=100.0, gt=1, description="and longer than this many times the median"
    )
    # Interference measured in a timed window. Calibrated on a 2-core KVM guest (python -m
    # bench interference): 40 quiet windows showed other processes at 0.01-0.08 cores (the
    # worker's own event loop, the broker) and steal at 0-0.2 %; with one busy loop per CPU
    # started a second into 3 s windows, 0.67-0.70 cores. Where the window is short,
    # /proc/stat's ticks (two per CPU) are allowed for before the share is judged.
    max_other_cpu_share: float = Field(
        default=0.1,
        gt=0,
        description="other processes' CPU time in a timed window, per CPU the measurement "
        "may run on (0.1: 0.2 cores of 2)",
    )
    max_steal_share: float = Field(
        default=0.05, gt=0, description="of the CPUs' time, taken by the hypervisor"
    )
    # The probe itself moves by up to a fifth between two readings seconds apart on a quiet
    # shared VM (its host's other tenants, its clock): beyond a quarter it is said, beyond a
    # half (a throttled or halved machine) the run is not VALID.
    noise_shift_warning: float = Field(
        default=0.25, gt=0, description="noise probe, slower of the two over the faster, - 1"
    )
    max_noise_shift: float = Field(
        default=0.5, gt=0, description="noise probe shift beyond which the run is INVALID"
    )


def judge(
    result: ScenarioResult,
    statistics: Sequence[LatencyStatistics] | None = None,
    *,
    environment: Mapping[str, Any] | None = None,
    repetitions: RepetitionSummary | None = None,
    thresholds: ValidityThresholds | None = None,
    noise: NoiseProbe | None = None,
) -> Verdict:
    """The verdict on one run. ``statistics`` are ``summarize_result(result)`` (computed when
    not given); ``environment`` is the one captured at the run's start (``cpu_governor``,
    ``heavy_processes``, ``load_average``, ``cpu_threads`` are read when present); each
    phase's ``window`` and the job's ``noise`` probe are judged when present."""
    limits = thresholds or ValidityThresholds()
    stats = statistics if statistics is not None else summarize_result(result)
    reasons = [
        reason
        for phase, phase_stats in zip(result.phases, stats, strict=True)
        for reason in _phase_reasons(result, phase, phase_stats, limits)
    ]
    if repetitions is not None and repetitions.median_cv > limits.max_repetition_cv:
        reasons.append(
            Reason(
                code=ReasonCode.HIGH_RUN_TO_RUN_VARIATION,
                severity=Severity.WARNING,
                message=f"the medians of {repetitions.count} repeats vary by "
                f"{repetitions.median_cv:.1%} (coefficient of variation), above "
                f"{limits.max_repetition_cv:.1%}; the farthest is run "
                f"{repetitions.outlier_run} ({repetitions.outlier_deviation:+.1%} from the "
                "others' median)",
                measured=repetitions.median_cv,
                limit=limits.max_repetition_cv,
            )
        )
    if noise is not None and (reason := _noise_reason(noise, limits)) is not None:
        reasons.append(reason)
    reasons.extend(_environment_reasons(environment or {}, limits))
    invalid = any(r.severity is Severity.ERROR for r in reasons)
    return Verdict(status="INVALID" if invalid else "VALID", reasons=tuple(reasons))


def _phase_reasons(
    result: ScenarioResult, phase: TimedPhase, stats: LatencyStatistics, limits: ValidityThresholds
) -> Iterator[Reason]:
    scenario = result.scenario
    point = phase.samples_per_query if isinstance(scenario, BatchSweep) else None
    where = f" at batch size {point}" if point is not None else ""

    def reason(
        code: ReasonCode,
        severity: Severity,
        message: str,
        *,
        measured: float | None = None,
        limit: float | None = None,
    ) -> Reason:
        return Reason(
            code=code,
            severity=severity,
            message=message + where,
            batch_size=point,
            measured=measured,
            limit=limit,
        )

    for code, message, measured, limit in _count_problems(scenario, phase, stats):
        yield reason(code, Severity.ERROR, message, measured=measured, limit=limit)
    min_duration_ns = scenario.min_duration_s * 1e9
    if phase.duration_ns < min_duration_ns:
        yield reason(
            ReasonCode.DURATION_TOO_SHORT,
            Severity.ERROR,
            f"timed for {phase.duration_ns / 1e9:.3f} s; the scenario asks for at least "
            f"{scenario.min_duration_s:g} s",
            measured=phase.duration_ns / 1e9,
            limit=scenario.min_duration_s,
        )
    if phase.unfinished_queries:
        yield reason(
            ReasonCode.QUERIES_UNFINISHED,
            Severity.ERROR,
            f"{phase.unfinished_queries} queries were cut off at max_duration_s "
            f"({scenario.max_duration_s:g} s)",
            measured=phase.unfinished_queries,
            limit=0,
        )
    if (stall := _stall(phase, stats, limits)) is not None:
        stalled, limit_ns = stall
        yield reason(
            ReasonCode.QUERY_STALLED,
            Severity.ERROR,
            f"{len(stalled)} timed {'query' if len(stalled) == 1 else 'queries'} took longer "
            f"than {limit_ns / 1e9:.3f} s (over {limits.stall_factor:g} times the median "
            f"{stats.median.value_ns / 1e6:.3f} ms), the longest {max(stalled) / 1e9:.3f} s: "
            "the process was held up mid-query (stopped, paused or swapped out), and that "
            "time was measured, not the model",
            measured=max(stalled) / 1e9,
            limit=limit_ns / 1e9,
        )
    if phase.window is not None:
        for code, message, measured, limit in _interference(phase.window, limits):
            yield reason(code, Severity.ERROR, message, measured=measured, limit=limit)
    if isinstance(scenario, Server):
        yield from _server_reasons(scenario, phase, stats, limits)
    warmup = phase.warmup
    if not warmup.steady and warmup.decided_by != "disabled":
        medians = ", ".join(f"{m / 1e6:.3f}" for m in warmup.window_medians_ns[-3:])
        yield reason(
            ReasonCode.WARMUP_NOT_STEADY,
            Severity.WARNING,
            f"warm-up stopped at its {warmup.decided_by.replace('_', ' ')} before two window "
            f"medians agreed within {warmup.threshold:.0%} (last medians, ms: {medians})",
            measured=warmup.last_change,
            limit=warmup.threshold,
        )
    harness_ns = phase.overhead.per_query_ns + phase.overhead.timer_floor_ns
    share = harness_ns / stats.median.value_ns if stats.median.value_ns > 0 else 0.0
    if share > limits.max_overhead_share:
        yield reason(
            ReasonCode.HIGH_HARNESS_OVERHEAD,
            Severity.WARNING,
            f"the harness costs {harness_ns / 1e3:.1f} us per query, {share:.1%} of the median "
            f"latency (above {limits.max_overhead_share:.0%})",
            measured=share,
            limit=limits.max_overhead_share,
        )


def _count_problems(
    scenario: ScenarioPlan, phase: TimedPhase, stats: LatencyStatistics
) -> Iterator[tuple[ReasonCode, str, float, float]]:
    """Too few samples (offline) or queries, or too few behind the headline percentile:
    code, message, measured and limit."""
    if isinstance(scenario, Offline):
        samples = stats.count * phase.samples_per_query
        if samples < scenario.min_sample_count:
            yield (
                ReasonCode.TOO_FEW_QUERIES,
                f"{samples} samples processed; the scenario asks for at least "
                f"{scenario.min_sample_count}",
                samples,
                scenario.min_sample_count,
            )
        return
    if stats.count < scenario.min_query_count:
        yield (
            ReasonCode.TOO_FEW_QUERIES,
            f"{stats.count} queries timed; the scenario asks for at least "
            f"{scenario.min_query_count}",
            stats.count,
            scenario.min_query_count,
        )
    if stats.headline.kind == "bound":
        yield (
            ReasonCode.HEADLINE_IS_BOUND,
            f"p{stats.headline.percentile * 100:g} needs at least "
            f"{stats.headline.min_queries} queries (MLPerf early stopping); "
            f"only {stats.count} were timed",
            stats.count,
            stats.headline.min_queries,
        )


def _stall(
    phase: TimedPhase, stats: LatencyStatistics, limits: ValidityThresholds
) -> tuple[list[int], float] | None:
    """The latencies of the queries that stalled and the bound they passed, or None."""
    limit_ns = max(limits.stall_min_s * 1e9, limits.stall_factor * stats.median.value_ns)
    stalled = [latency for latency in phase.latencies_ns if latency > limit_ns]
    return (stalled, limit_ns) if stalled else None


def _interference(
    window: MachineWindow, limits: ValidityThresholds
) -> Iterator[tuple[ReasonCode, str, float, float]]:
    """What else used the machine during a timed window, past the limits: code, message,
    measured and limit."""
    cores = window.other_cores
    if cores is not None:
        allowed = limits.max_other_cpu_share * window.cpus
        margin = window.other_cores_resolution or 0.0
        if cores - margin > allowed:
            yield (
                ReasonCode.OTHER_PROCESSES_USED_CPU,
                f"other processes used {cores:.2f} of {window.cpus} cores during the timed "
                f"window ({cores / window.cpus:.0%} of their time; at most "
                f"{limits.max_other_cpu_share:.0%} allowed)",
                round(cores, 3),
                allowed,
            )
    steal = window.steal_share
    # Steal is counted in the same ticks: the same margin, as a share of the CPUs' time.
    steal_margin = (window.other_cores_resolution or 0.0) / window.cpus
    if steal is not None and steal - steal_margin > limits.max_steal_share:
        yield (
            ReasonCode.CPU_STEAL,
            f"steal {steal:.0%}: the hypervisor gave {steal:.0%} of these CPUs' time to other "
            f"guests during the timed window (at most {limits.max_steal_share:.0%} allowed)",
            round(steal, 4),
            limits.max_steal_share,
        )
    if window.throttle_events:
        yield (
            ReasonCode.CPU_THROTTLED,
            f"the CPU was thermally throttled {window.throttle_events} times during the timed "
            "window",
            window.throttle_events,
            0,
        )
    if window.gpu_processes:
        pids = ", ".join(str(pid) for pid in window.gpu_processes[:5])
        yield (
            ReasonCode.OTHER_GPU_PROCESSES,
            f"{len(window.gpu_processes)} other processes used the GPU during the timed window "
            f"(pid {pids})",
            len(window.gpu_processes),
            0,
        )


def _noise_reason(noise: NoiseProbe, limits: ValidityThresholds) -> Reason | None:
    """Past ``max_noise_shift`` either way (the slower of the two probes over the faster),
    an error; past ``noise_shift_warning``, a warning."""
    spread = max(noise.after_ns, noise.before_ns) / min(noise.after_ns, noise.before_ns) - 1
    if spread > limits.max_noise_shift:
        severity, limit = Severity.ERROR, limits.max_noise_shift
    elif spread > limits.noise_shift_warning:
        severity, limit = Severity.WARNING, limits.noise_shift_warning
    else:
        return None
    return Reason(
        code=ReasonCode.NOISE_PROBE_SHIFTED,
        severity=severity,
        # The limit is on the slower probe over the faster, so that is the figure beside it:
        # "-36%; at most ±50%" read as within the limit when the spread was 56%.
        message=f"the noise probe took {noise.after_ns / 1e6:.3f} ms after the timed queries "
        f"and {noise.before_ns / 1e6:.3f} ms before the warm-up (the slower {spread:.0%} over "
        f"the faster; {'at most' if severity is Severity.ERROR else 'a warning beyond'} "
        f"{limit:.0%}): the machine ran at another speed by the end of the run",
        measured=round(spread, 4),
        limit=limit,
    )


def _server_reasons(
    scenario: Server, phase: TimedPhase, stats: LatencyStatistics, limits: ValidityThresholds
) -> Iterator[Reason]:
    bound_ns = scenario.latency_bound_ms * 1e6
    if stats.headline.value_ns > bound_ns:
        yield Reason(
            code=ReasonCode.LATENCY_BOUND_MISSED,
            severity=Severity.ERROR,
            message=f"p{scenario.target_latency_percentile * 100:g} latency "
            f"{stats.headline.value_ns / 1e6:.3f} ms exceeds the {scenario.latency_bound_ms:g} "
            f"ms bound at {scenario.target_qps:g} QPS",
            measured=stats.headline.value_ns / 1e6,
            limit=scenario.latency_bound_ms,
        )
    if phase.issue_delays_ns:
        late_ns = limits.late_issue_fraction_of_bound * bound_ns
        late = sum(1 for delay in phase.issue_delays_ns if delay > late_ns)
        share = late / len(phase.issue_delays_ns)
        allowed = (
            limits.max_late_share
            if limits.max_late_share is not None
            else 1 - scenario.target_latency_percentile
        )
        if share > allowed:
            yield Reason(
                code=ReasonCode.LOAD_GENERATOR_LATE,
                severity=Severity.ERROR,
                message=f"{share:.2%} of queries were issued more than {late_ns / 1e6:.3f} ms "
                f"after their scheduled arrival (at most {allowed:.2%} allowed): the load "
                "applied was not the Poisson load asked for",
                measured=share,
                limit=allowed,
            )


def _environment_reasons(
    environment: Mapping[str, Any], limits: ValidityThresholds
) -> Iterator[Reason]:
    if environment.get("concurrent"):  # asked for: a contention study
        yield Reason(
            code=ReasonCode.MEASURED_UNDER_CONTENTION,
            severity=Severity.WARNING,
            message="measured with concurrent: no device lease was held, so other "
            "measurements (an experiment's other members) may have shared the device",
        )
    governor = environment.get("cpu_governor")
    if governor is not None and governor != "performance":
        yield Reason(
            code=ReasonCode.CPU_GOVERNOR_NOT_PERFORMANCE,
            severity=Severity.WARNING,
            message=f"the CPU frequency governor is {governor!r}, not 'performance': the clock "
            "may change during the run",
        )
    heavy = environment.get("heavy_processes")
    if heavy is not None:  # a process list was taken: it says more than the load average
        if heavy:
            names = ", ".join(
                f"{p.get('name', '?')} (pid {p.get('pid', '?')}, "
                f"{p.get('cpu_percent', 0):.0f}% CPU"
                + (", dlscope's: another measurement" if p.get("dlscope") else "")
                + ")"
                for p in heavy
            )
            yield Reason(
                code=ReasonCode.OTHER_HEAVY_PROCESSES,
                severity=Severity.WARNING,
                message=f"other processes were busy when the run started: {names}",
                measured=len(heavy),
                limit=0,
            )
        return
    load = environment.get("load_average")
    cpus = environment.get("cpu_threads")
    if load and cpus:
        # The 1-minute load includes this process's own thread; count it out.
        per_cpu = max(float(load[0]) - 1, 0.0) / float(cpus)
        if per_cpu > limits.max_load_per_cpu:
            yield Reason(
                code=ReasonCode.OTHER_HEAVY_PROCESSES,
                severity=Severity.WARNING,
                message=f"the machine was loaded when the run started: load average "
                f"{float(load[0]):.2f} on {cpus} CPUs",
                measured=per_cpu,
                limit=limits.max_load_per_cpu,
            )
