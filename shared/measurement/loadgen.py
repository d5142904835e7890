"""The same scenarios driven through MLCommons LoadGen (``--driver loadgen``).

LoadGen decides when queries are issued and times them itself; dlscope supplies the system
under test. Its issue callback runs on LoadGen's thread holding the GIL, so it only hands the
samples to a worker thread, which makes the framework call and reports completion. The run
writes LoadGen's own ``mlperf_log_summary.txt`` and ``mlperf_log_detail.txt`` to the output
directory, and the summary's verdict is parsed back.

Warm-up happens before LoadGen starts (LoadGen has none), with the same steady-state rule as
dlscope's drivers. dlscope's adaptive stop has no LoadGen counterpart and is not mapped;
LoadGen applies its own early-stopping rules. A batch sweep, not a LoadGen scenario, runs as
one single-stream test per batch size, each LoadGen sample standing for a batch.

A generative model's queries are whole generations (``run_loadgen_generation``): LoadGen
runs with its token latencies on, told of each request's first token as it comes
(``FirstTokenComplete``) and of its output tokens at the end, and judges the server scenario
against its TTFT and TPOT bounds (MLPerf's LLM rule) instead of one latency bound.

What a LoadGen run records (``LoadgenResult``, ``LoadgenPhase``) travels in the measured event
and is defined with the other results (shared.messages.results).
"""

from __future__ import annotations

import queue
import re
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from shared.errors import ConfigurationError
from shared.measurement.progress import (
    OnStep,
    ignore_steps,
    sweep_label,
    timed_queries,
    typical_ns,
    warming_up,
)
from shared.measurement.queries import RunQuery, SampleOrder, timed
from shared.measurement.scenarios import (
    BatchSweep,
    MultiStream,
    Offline,
    ScenarioPlan,
    Server,
    SingleStream,
    check_sample_count,
)
from shared.measurement.warmup import warm_up
from shared.measurement.window import WindowWatch
from shared.messages.results import LoadgenPhase, LoadgenResult

__all__ = [
    "LoadgenPhase",
    "LoadgenResult",
    "TokenBounds",
    "TokenQuery",
    "parse_summary",
    "run_loadgen",
    "run_loadgen_generation",
]

SUMMARY_FILE = "mlperf_log_summary.txt"
DETAIL_FILE = "mlperf_log_detail.txt"

# One generation as LoadGen issues it: (sample index, the time LoadGen issued it, in
# perf_counter_ns, a callback to call as the first token is out) -> the output tokens.
TokenQuery = Callable[[int, int, Callable[[], None]], int]


class TokenBounds(NamedTuple):
    """What LoadGen's server scenario judges a generation by: TTFT and TPOT at a percentile.
    A bound left out (None) is not judged: LoadGen is given the test's maximum duration."""

    ttft_ms: float | None
    tpot_ms: float | None
    percentile: float


def run_loadgen(
    scenario: ScenarioPlan,
    run_query: RunQuery,
    *,
    output_dir: Path,
    sample_count: int = 1,
    load_ns: int | None = None,
    on_step: OnStep = ignore_steps,
    watch: WindowWatch | None = None,
) -> LoadgenResult:
    """Run ``scenario`` under LoadGen; its logs go to ``output_dir`` (one subdirectory per
    batch size for a sweep). ``on_step`` is told as each warm-up and LoadGen run begins;
    ``watch`` (see ``drivers.run_scenario``) brackets each LoadGen test."""
    check_sample_count(scenario, sample_count)
    # Each phase: where its logs go, its samples per query, and how its steps are labelled.
    if isinstance(scenario, BatchSweep):
        sizes = scenario.batch_sizes
        runs = [
            (output_dir / f"batch-{size}", size, sweep_label(size, number, len(sizes)))
            for number, size in enumerate(sizes, start=1)
        ]
    else:
        runs = [(output_dir, scenario.samples_per_query, "")]
    phases = tuple(
        _run_phase(scenario, run_query, sample_count, logs, size, on_step, watch, label)
        for logs, size, label in runs
    )
    return LoadgenResult(
        scenario=scenario, sample_count=sample_count, load_ns=load_ns, phases=phases
    )


def run_loadgen_generation(
    scenario: SingleStream | Server,
    generate: TokenQuery,
    *,
    output_dir: Path,
    bounds: TokenBounds,
    sample_count: int = 1,
    load_ns: int | None = None,
    on_step: OnStep = ignore_steps,
    watch: WindowWatch | None = None,
) -> LoadgenResult:
    """Run ``scenario`` under LoadGen with its token latencies, one generation a query (one
    at a time: a server's requests queue on the model, and that wait is their TTFT's). The
    server scenario is judged against ``bounds``; single-stream reports its percentiles."""
    if isinstance(scenario, Server) and bounds.ttft_ms is None and bounds.tpot_ms is None:
        raise ConfigurationError(
            "LoadGen's server scenario judges a generation by its TTFT and TPOT: give "
            "ttft_bound_ms or tpot_bound_ms (--ttft-bound / --tpot-bound)"
        )
    check_sample_count(scenario, sample_count)
    phase = _run_phase(
        scenario,
        lambda samples: generate(samples[0], time.perf_counter_ns(), _nothing),
        sample_count,
        output_dir,
        1,
        on_step,
        watch,
        tokens=(generate, bounds),
    )
    return LoadgenResult(
        scenario=scenario, sample_count=sample_count, load_ns=load_ns, phases=(phase,)
    )


def _nothing() -> None:
    """A warm-up generation's first token: LoadGen is not running yet."""


def _loadgen() -> Any:
    """LoadGen itself, imported when a run uses it: it is an extra (``dlscope[loadgen]``), and
    this module is imported on hosts without it (the analyzer's, for the names it keeps)."""
    try:
        import mlperf_loadgen
    except ImportError as exc:
        raise ConfigurationError(
            "--driver loadgen needs MLCommons LoadGen, which is not installed here: "
            "pip install 'dlscope[loadgen]'"
        ) from exc
    return mlperf_loadgen


def _run_phase(
    scenario: ScenarioPlan,
    run_query: RunQuery,
    sample_count: int,
    output_dir: Path,
    samples_per_query: int,
    on_step: OnStep,
    watch: WindowWatch | None,
    label: str = "",
    tokens: tuple[TokenQuery, TokenBounds] | None = None,
) -> LoadgenPhase:
    lg = _loadgen()
    timed_query = timed(run_query, SampleOrder(sample_count, samples_per_query, scenario.seed).next)
    on_step(warming_up(scenario, label))
    first_ns = timed_query()
    warmup = warm_up(timed_query, scenario.warmup)
    query_ns = typical_ns(warmup.latencies_ns, first_ns)
    # LoadGen decides when it has enough; its minimum duration is the floor of the wait.
    on_step(timed_queries(scenario, f"{label} (LoadGen)", scenario.min_duration_s))

    settings = _settings(scenario, sample_count, max(int(query_ns), 1))
    percentile = None if isinstance(scenario, Offline) else scenario.target_latency_percentile
    if tokens is not None:
        percentile = _token_settings(settings, scenario, tokens[1])
    # A sweep's LoadGen sample stands for a batch; elsewhere LoadGen sizes the queries.
    expand = (
        _batch_of(sample_count, samples_per_query) if isinstance(scenario, BatchSweep) else None
    )
    worker = _Worker(run_query, scenario, expand, None if tokens is None else tokens[0])
    output_dir.mkdir(parents=True, exist_ok=True)
    log_settings = lg.LogSettings()
    log_settings.log_output.outdir = str(output_dir)
    log_settings.log_output.copy_summary_to_stdout = False

    sut = lg.ConstructSUT(worker.issue, worker.flush)
    qsl = lg.ConstructQSL(sample_count, sample_count, _no_op, _no_op)
    worker.start()
    end_window = watch() if watch is not None else None
    try:
        lg.StartTestWithLogSettings(sut, qsl, settings, log_settings, "")
    finally:
        window = end_window() if end_window is not None else None
        worker.stop()
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
    worker.raise_failure()
    return LoadgenPhase(
        samples_per_query=samples_per_query,
        output_dir=str(output_dir),
        first_query_ns=first_ns,
        warmup=warmup,
        summary=parse_summary((output_dir / SUMMARY_FILE).read_text(), percentile=percentile),
        window=window,
        framework_calls=worker.calls,
    )


def _settings(scenario: ScenarioPlan, sample_count: int, query_ns: int) -> Any:
    lg = _loadgen()
    settings = lg.TestSettings()
    settings.mode = lg.TestMode.PerformanceOnly
    settings.min_duration_ms = int(scenario.min_duration_s * 1000)
    settings.max_duration_ms = int(scenario.max_duration_s * 1000)
    settings.qsl_rng_seed = scenario.seed
    settings.sample_index_rng_seed = scenario.seed
    settings.schedule_rng_seed = scenario.seed
    settings.performance_sample_count_override = sample_count
    if isinstance(scenario, SingleStream | BatchSweep):
        settings.scenario = lg.TestScenario.SingleStream
        settings.min_query_count = scenario.min_query_count
        settings.single_stream_target_latency_percentile = scenario.target_latency_percentile
        settings.single_stream_expected_latency_ns = query_ns
    elif isinstance(scenario, MultiStream):
        settings.scenario = lg.TestScenario.MultiStream
        settings.min_query_count = scenario.min_query_count
        settings.multi_stream_samples_per_query = scenario.samples_per_query
        settings.multi_stream_target_latency_percentile = scenario.target_latency_percentile
        settings.multi_stream_expected_latency_ns = query_ns
    elif isinstance(scenario, Server):
        settings.scenario = lg.TestScenario.Server
        settings.min_query_count = scenario.min_query_count
        settings.server_target_qps = scenario.target_qps
        settings.server_target_latency_ns = int(scenario.latency_bound_ms * 1e6)
        settings.server_target_latency_percentile = scenario.target_latency_percentile
    else:
        settings.scenario = lg.TestScenario.Offline
        # In the offline scenario LoadGen reads min_query_count as the minimum sample count.
        settings.min_query_count = scenario.min_sample_count
        settings.offline_expected_qps = scenario.batch_size * 1e9 / query_ns
    return settings


def _token_settings(settings: Any, scenario: ScenarioPlan, bounds: TokenBounds) -> float:
    """Turn LoadGen's token latencies on: TTFT and TPOT are recorded per query and, in the
    server scenario, are what the run must meet at ``bounds.percentile``, in place of the
    whole query's latency. The percentile the summary headlines is returned."""
    settings.use_token_latencies = True
    unbounded_ns = int(scenario.max_duration_s * 1e9)
    settings.ttft_latency = unbounded_ns if bounds.ttft_ms is None else int(bounds.ttft_ms * 1e6)
    settings.tpot_latency = unbounded_ns if bounds.tpot_ms is None else int(bounds.tpot_ms * 1e6)
    # The percentile the scenario's bounds name is the one LoadGen reports and judges.
    if isinstance(scenario, Server):
        settings.server_target_latency_percentile = bounds.percentile
    else:
        settings.single_stream_target_latency_percentile = bounds.percentile
    return bounds.percentile


def _batch_of(sample_count: int, batch_size: int) -> Callable[[int], list[int]]:
    """A sweep's LoadGen sample ``k`` stands for the batch of samples from ``k`` on."""

    def batch(index: int) -> list[int]:
        return [(index + j) % sample_count for j in range(batch_size)]

    return batch


def _no_op(_: Sequence[int]) -> None:
    """The caller pre-built every sample's inputs: LoadGen's load and unload have no work."""


class _Worker:
    """Runs LoadGen's queries: a closed loop's on LoadGen's issue thread, server and offline
    queries on a thread of their own so LoadGen keeps issuing meanwhile. A failing framework
    call still completes its samples (LoadGen would otherwise wait for them forever); the
    failure is re-raised once the test is over. With ``tokens`` each sample is a generation,
    whose first token and token count LoadGen is told of."""

    def __init__(
        self,
        run_query: RunQuery,
        scenario: ScenarioPlan,
        expand: Callable[[int], list[int]] | None,
        tokens: TokenQuery | None = None,
    ) -> None:
        self._run = run_query
        self._scenario = scenario
        self._expand = expand
        self._tokens = tokens
        self._lg = _loadgen()
        # Each issue with the time LoadGen made it: a generation's arrival.
        self._pending: queue.SimpleQueue[tuple[int, list[Any]] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name="dlscope-loadgen-sut")
        self._failure: BaseException | None = None
        self.calls = 0
        # A closed loop issues the next query only once this one is complete, so it runs on
        # LoadGen's own issue thread: a hand-over to another thread and back costs a
        # wake-up each way (~100 µs a query here), which LoadGen would time as latency.
        self._inline = isinstance(scenario, SingleStream | MultiStream | BatchSweep)

    def issue(self, samples: list[Any]) -> None:
        if self._inline:
            self._complete(time.perf_counter_ns(), samples)
        else:
            self._pending.put((time.perf_counter_ns(), samples))

    def flush(self) -> None:
        """Queries are run as they arrive: nothing is held back to flush."""

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._pending.put(None)
        self._thread.join()

    def raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _work(self) -> None:
        while (issued := self._pending.get()) is not None:
            self._complete(*issued)

    def _complete(self, issued_ns: int, samples: list[Any]) -> None:
        if self._tokens is not None:
            for sample in samples:
                self._generate(self._tokens, sample, issued_ns)
            return
        for group in self._groups(samples):
            if self._failure is None:
                try:
                    self._run_group(group)
                except BaseException as exc:  # re-raised on the caller's thread
                    self._failure = exc
            responses = [self._lg.QuerySampleResponse(s.id, 0, 0) for s in group]
            self._lg.QuerySamplesComplete(responses)

    def _generate(self, generate: TokenQuery, sample: Any, issued_ns: int) -> None:
        lg = self._lg

        def first_token() -> None:
            lg.FirstTokenComplete([lg.QuerySampleResponse(sample.id, 0, 0, 1)])

        produced = 0
        if self._failure is None:
            self.calls += 1
            try:
                produced = generate(sample.index, issued_ns, first_token)
            except BaseException as exc:  # re-raised on the caller's thread
                self._failure = exc
        lg.QuerySamplesComplete([lg.QuerySampleResponse(sample.id, 0, 0, max(produced, 1))])

    def _groups(self, samples: list[Any]) -> list[list[Any]]:
        """The framework calls one issue makes: a multi-stream query at once, an offline
        query in batches, otherwise one sample per call."""
        if isinstance(self._scenario, MultiStream):
            return [samples]
        if isinstance(self._scenario, Offline):
            size = self._scenario.batch_size
            return [samples[i : i + size] for i in range(0, len(samples), size)]
        return [[sample] for sample in samples]

    def _run_group(self, group: list[Any]) -> None:
        self.calls += 1
        if self._expand is not None:
            self._run(self._expand(group[0].index))
        else:
            self._run([sample.index for sample in group])


_NUMBER = re.compile(r"^-?\d+(\.\d+)?([eE][-+]?\d+)?$")
_PERCENTILE_LINE = re.compile(r"^(\d+(?:\.\d+)?)th percentile latency \(ns\)$")


def parse_summary(text: str, *, percentile: float | None = None) -> dict[str, Any]:
    """LoadGen's summary as a dict: every ``key : value`` line under a snake_case key (numbers
    as numbers, Yes/No as booleans), plus ``result`` ("VALID"/"INVALID") and, for latency
    scenarios, the headline ``percentile`` (0.9) with its ``percentile_latency_ns``. The
    server summary states no headline line: pass its target ``percentile`` to read it from
    the additional statistics. With token latencies, ``ttft_percentile_ns`` and
    ``tpot_percentile_ns`` at that percentile; ``recommendations``, LoadGen's reasons for an
    INVALID result, as it words them."""
    parsed: dict[str, Any] = {}
    for line in text.splitlines():
        key, separator, value = line.partition(":")
        if not separator or not value.strip():
            continue
        key = key.strip().lstrip("*").strip()
        value = value.strip()
        headline = _PERCENTILE_LINE.match(key)
        if headline and "percentile" not in parsed:
            parsed["percentile"] = float(headline.group(1)) / 100
            parsed["percentile_latency_ns"] = float(value)
            continue
        parsed.setdefault(_snake(key), _value(value))
    if "result_is" in parsed:
        parsed["result"] = parsed.pop("result_is")
    if "percentile" not in parsed and percentile is not None:
        stated = parsed.get(f"{percentile * 100:.2f}_percentile_latency_ns".replace(".", "_"))
        if stated is not None:
            parsed["percentile"] = percentile
            parsed["percentile_latency_ns"] = float(stated)
    if "percentile" in parsed:
        at = f"{parsed['percentile'] * 100:.2f}".replace(".", "_")
        for name, key in (
            ("ttft", f"{at}_percentile_first_token_latency_ns"),
            ("tpot", f"{at}_percentile_time_to_output_token_ns"),
        ):
            if key in parsed:
                parsed[f"{name}_percentile_ns"] = float(parsed[key])
    recommendations = _recommendations(text)
    if recommendations:
        parsed["recommendations"] = recommendations
    return parsed


def _recommendations(text: str) -> list[str]:
    """The bullet lines under the summary's "Recommendations:" heading."""
    found: list[str] = []
    listing = False
    for line in text.splitlines():
        if line.strip() == "Recommendations:":
            listing = True
        elif listing and line.lstrip().startswith("*"):
            found.append(line.strip().lstrip("*").strip())
        else:
            listing = False
    return found


def _snake(key: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", key.lower()).strip("_")


def _value(text: str) -> Any:
    if text.lower() in ("yes", "no"):  # LoadGen writes "Yes", "No" and "NO"
        return text.lower() == "yes"
    if _NUMBER.match(text):
        return float(text) if any(c in text for c in ".eE") else int(text)
    return text
