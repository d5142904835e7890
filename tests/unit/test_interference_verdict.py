"""The verdict on what else used the machine: a run is not VALID when other processes, the
hypervisor or a hot CPU took part of its timed window, or when the noise probe ran at
another speed after the queries than before them; the reason says what was seen, in words
and in numbers."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from shared.measurement import (
    BatchSweep,
    ReasonCode,
    ScenarioResult,
    SingleStream,
    TimedPhase,
    ValidityThresholds,
    judge,
)
from shared.measurement.noise import NoiseProbe
from shared.measurement.overhead import HarnessOverhead
from shared.measurement.scenarios import ScenarioPlan
from shared.measurement.validity import Severity
from shared.measurement.window import MachineWindow
from tests.unit.test_validity import QUIET, STEADY


def window(
    *,
    seconds: float = 2.0,
    cpus: int = 2,
    own_cores: float = 1.9,
    other_cores: float = 0.03,
    steal: float = 0.0,
    tick_s: float = 0.01,
    **extra: Any,
) -> MachineWindow:
    """A timed window of ``seconds`` in which other processes kept ``other_cores`` busy."""
    return MachineWindow(
        started_at_ns=1_700_000_000_000_000_000,
        ended_at_ns=1_700_000_000_000_000_000 + int(seconds * 1e9),
        duration_ns=int(seconds * 1e9),
        cpus=cpus,
        own_cpu_s=own_cores * seconds,
        busy_cpu_s=(own_cores + other_cores) * seconds,
        steal_s=steal * cpus * seconds,
        resolution_s=2 * cpus * tick_s,
        **extra,
    )


def phase(seen: MachineWindow | None, *, samples_per_query: int = 1) -> TimedPhase:
    latencies = tuple(int(v) for v in np.random.default_rng(0).normal(1e6, 2e4, 2000))
    return TimedPhase(
        samples_per_query=samples_per_query,
        first_query_ns=20_000_000,
        warmup=STEADY,
        latencies_ns=latencies,
        duration_ns=sum(latencies),
        overhead=HarnessOverhead(per_query_ns=300.0, timer_floor_ns=100.0, method="test"),
        stopped_by="minimums",
        window=seen,
    )


def result(scenario: ScenarioPlan, *phases: TimedPhase) -> ScenarioResult:
    return ScenarioResult(scenario=scenario, sample_count=1, phases=phases)


def test_a_quiet_window_and_a_steady_probe_leave_the_run_valid_without_reasons() -> None:
    probe = NoiseProbe(before_ns=2_400_000, after_ns=2_430_000)
    verdict = judge(result(SingleStream(), phase(window())), environment=QUIET, noise=probe)
    assert verdict.status == "VALID"
    assert verdict.reasons == ()


def test_other_processes_using_a_share_of_the_cores_make_the_run_invalid() -> None:
    verdict = judge(result(SingleStream(), phase(window(other_cores=1.4))), environment=QUIET)
    assert verdict.status == "INVALID"
    (reason,) = verdict.reasons
    assert reason.code is ReasonCode.OTHER_PROCESSES_USED_CPU
    assert reason.severity is Severity.ERROR
    assert "other processes used 1.40 of 2 cores during the timed window" in reason.message
    assert reason.measured == pytest.approx(1.4)
    assert reason.limit == pytest.approx(0.2)  # 10 % of 2 cores


def test_the_limit_is_a_share_of_the_cores_the_measurement_may_run_on() -> None:
    # 0.5 cores busy elsewhere is a quarter of 2 cores, but 3 % of 16.
    assert judge(result(SingleStream(), phase(window(other_cores=0.5))), environment=QUIET).codes
    wide = window(other_cores=0.5, cpus=16, own_cores=4.0)
    assert not judge(result(SingleStream(), phase(wide)), environment=QUIET).codes


def test_a_short_window_is_judged_beyond_the_ticks_uncertainty() -> None:
    # 50 ms: two ticks per CPU are 0.8 cores of uncertainty, so 0.5 cores tells nothing...
    short = window(seconds=0.05, other_cores=0.5, steal=0.2)
    assert short.other_cores_resolution == pytest.approx(0.8)
    assert not judge(result(SingleStream(), phase(short)), environment=QUIET).codes  # nor steal
    # ... but a hog's full core and more does.
    hogged = window(seconds=0.05, other_cores=1.2, own_cores=0.8)
    assert (
        ReasonCode.OTHER_PROCESSES_USED_CPU
        in judge(result(SingleStream(), phase(hogged)), environment=QUIET).codes
    )


def test_steal_over_the_limit_is_named_with_its_share() -> None:
    verdict = judge(result(SingleStream(), phase(window(steal=0.18))), environment=QUIET)
    assert verdict.status == "INVALID"
    (reason,) = verdict.reasons
    assert reason.code is ReasonCode.CPU_STEAL
    assert reason.message.startswith("steal 18%")
    assert reason.measured == pytest.approx(0.18)
    assert reason.limit == 0.05


def test_throttling_and_other_gpu_processes_in_the_window_are_errors() -> None:
    seen = window(throttle_events=4, gpu_processes=(4242, 4343))
    verdict = judge(result(SingleStream(), phase(seen)), environment=QUIET)
    assert verdict.status == "INVALID"
    assert verdict.codes == {ReasonCode.CPU_THROTTLED, ReasonCode.OTHER_GPU_PROCESSES}
    gpu = next(r for r in verdict.reasons if r.code is ReasonCode.OTHER_GPU_PROCESSES)
    assert "pid 4242, 4343" in gpu.message


def test_a_sweep_names_the_batch_size_whose_window_was_disturbed() -> None:
    sweep = BatchSweep(batch_sizes=(1, 8))
    verdict = judge(
        result(
            sweep,
            phase(window(), samples_per_query=1),
            phase(window(other_cores=1.0), samples_per_query=8),
        ),
        environment=QUIET,
    )
    (reason,) = verdict.errors
    assert reason.batch_size == 8
    assert reason.message.endswith("at batch size 8")


@pytest.mark.parametrize(
    ("before_ns", "after_ns", "severity"),
    [
        (2_400_000, 2_880_000, None),  # +20 %: what a quiet shared VM moves by on its own
        (2_880_000, 2_400_000, None),  # the same, the other way
        (2_400_000, 3_120_000, Severity.WARNING),  # 1.3 times slower after the queries
        (3_120_000, 2_400_000, Severity.WARNING),  # 1.3 times faster: it changed too
        (2_400_000, 3_840_000, Severity.ERROR),  # 1.6 times: another machine by the end
        (3_840_000, 2_400_000, Severity.ERROR),
    ],
)
def test_the_noise_probe_is_said_past_a_quarter_and_invalid_past_a_half(
    before_ns: int, after_ns: int, severity: Severity | None
) -> None:
    probe = NoiseProbe(before_ns=before_ns, after_ns=after_ns)
    verdict = judge(result(SingleStream(), phase(window())), environment=QUIET, noise=probe)
    found = [r for r in verdict.reasons if r.code is ReasonCode.NOISE_PROBE_SHIFTED]
    assert [r.severity for r in found] == ([] if severity is None else [severity])
    assert verdict.status == ("INVALID" if severity is Severity.ERROR else "VALID")
    if found:
        assert found[0].measured == pytest.approx(
            max(before_ns, after_ns) / min(before_ns, after_ns) - 1, abs=1e-4
        )


def test_the_noise_probe_reason_says_both_times() -> None:
    probe = NoiseProbe(before_ns=2_400_000, after_ns=3_840_000)
    (reason,) = judge(result(SingleStream(), phase(window())), noise=probe).errors
    assert reason.message.startswith(
        "the noise probe took 3.840 ms after the timed queries and 2.400 ms before the warm-up "
        "(the slower 60% over the faster; at most 50%)"
    )


def test_a_probe_faster_after_the_run_states_the_spread_the_limit_is_on() -> None:
    # 0.380 ms before, 0.244 ms after: the slower is 56% over the faster, past the half.
    probe = NoiseProbe(before_ns=380_000, after_ns=244_000)
    (reason,) = judge(result(SingleStream(), phase(window())), noise=probe).errors
    assert "(the slower 56% over the faster; at most 50%)" in reason.message


def test_the_thresholds_can_be_set() -> None:
    strict = ValidityThresholds(max_other_cpu_share=0.01, max_steal_share=0.01)
    verdict = judge(
        result(SingleStream(), phase(window(other_cores=0.1, steal=0.03))),
        environment=QUIET,
        thresholds=strict,
    )
    assert verdict.codes == {ReasonCode.OTHER_PROCESSES_USED_CPU, ReasonCode.CPU_STEAL}


def test_a_run_recorded_before_windows_were_is_judged_as_before() -> None:
    verdict = judge(result(SingleStream(), phase(None)), environment=QUIET)
    assert verdict.status == "VALID"


def test_another_measurement_busy_as_the_run_started_is_named_as_dlscopes() -> None:
    busy = {
        **QUIET,
        "heavy_processes": [
            {"pid": 31, "name": "python3", "cpu_percent": 97.0, "dlscope": "a framework process"}
        ],
    }
    verdict = judge(result(SingleStream(), phase(window())), environment=busy)
    (reason,) = verdict.warnings
    assert reason.code is ReasonCode.OTHER_HEAVY_PROCESSES
    assert "python3 (pid 31, 97% CPU, dlscope's: another measurement)" in reason.message
