"""The ``dlscope`` command as a user types it, on the embedded default."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from dlscope.cli.live import parse_line
from dlscope.cli.outcome import COMPLETED, EXIT_INVALID
from harness.relay import free_port
from harness.squeezenet import squeezenet_copy, squeezenet_file
from harness.waiting import eventually
from shared.config import REPOSITORY_ROOT

pytestmark = pytest.mark.e2e

SQUEEZENET = squeezenet_file()
MANIFEST = squeezenet_copy("my-net", "my own copy of squeezenet")


def dlscope(home: Path, *arguments: str, **variables: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("DLSCOPE_")}
    environment.update(DLSCOPE_HOME=str(home), COLUMNS="120", **variables)
    return subprocess.run(
        [sys.executable, "-m", "dlscope", *arguments],
        env=environment,
        cwd=REPOSITORY_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_run_evaluates_the_built_in_model_and_writes_the_full_result(tmp_path: Path) -> None:
    result = dlscope(
        tmp_path, "run", "squeezenet", "--iterations", "40", "--json", str(tmp_path / "result.json")
    )
    assert result.returncode in COMPLETED, result.stderr
    shown = " ".join(result.stdout.split())  # the table title may wrap
    assert "squeezenet 1.0.1 on onnxruntime (cpu)" in shown
    assert "p90 (ms)" in shown

    document = json.loads((tmp_path / "result.json").read_text())
    evaluation = document["evaluation"]
    assert evaluation["status"] == "completed"
    # At least 40 queries and, by default, at least one second of them.
    assert evaluation["result"]["count"] >= 40
    measured = document["events"][3]["payload"]["run"]["phases"][0]
    assert len(measured["latencies_ns"]) == evaluation["result"]["count"]
    assert measured["duration_ns"] >= 1e9
    assert [e["type"] for e in document["events"]] == [
        "evaluation.requested",
        "evaluation.scheduled",
        "evaluation.started",
        "evaluation.measured",
        "evaluation.completed",
    ]
    assert {e["trace_id"] for e in document["events"]} == {document["trace_id"]}
    started = document["events"][2]["payload"]["environment"]
    assert started["framework_version"] == "1.31.1"
    assert (tmp_path / "dlscope.db").exists()  # the embedded event store, under DLSCOPE_HOME


def test_run_of_an_unknown_model_fails_naming_it(tmp_path: Path) -> None:
    result = dlscope(tmp_path, "run", "resnet9000")
    assert result.returncode == 1
    assert "unknown model 'resnet9000'; did you mean: resnet50? registered models: " in (
        result.stderr
    )
    assert "squeezenet" in result.stderr


def test_a_misspelt_model_gets_the_nearest_names_and_the_zoo_built_on_first_use(
    tmp_path: Path,
) -> None:
    result = dlscope(tmp_path, "run", "squeezenat")
    assert result.returncode == 1
    [said] = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert said.startswith("error: unknown model 'squeezenat'; did you mean: squeezenet? ")
    assert "; built on first use: digits-cnn, digits-cnn-torch, digits-cnn-tf, minilm-l6" in said
    assert "Traceback" not in result.stderr


def test_a_dataset_of_another_shape_fails_the_evaluation_in_one_line(tmp_path: Path) -> None:
    result = dlscope(
        tmp_path, "run", "squeezenet", "--dataset", "digits", "--json", str(tmp_path / "r.json")
    )
    assert result.returncode == 1
    [said] = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "dataset digits@1.0.0 does not fit squeezenet@1.0.1: its samples are [8, 8]" in said
    assert "takes samples of [3, 224, 224]" in said
    assert "ONNXRuntimeError" not in result.stderr
    assert " index: 1 Got: 8" not in result.stderr
    document = json.loads((tmp_path / "r.json").read_text())
    assert document["evaluation"]["status"] == "failed"
    # Refused while the inputs were prepared: nothing was measured.
    assert [e["type"] for e in document["events"]][-2:] == [
        "evaluation.started",
        "evaluation.failed",
    ]


def test_run_on_an_unknown_framework_is_refused_before_anything_starts(tmp_path: Path) -> None:
    result = dlscope(tmp_path, "run", "squeezenet", "--framework", "caffe")
    assert result.returncode == 2
    assert "unknown framework 'caffe'; choose one of: onnxruntime" in result.stderr
    assert not (tmp_path / "dlscope.db").exists()


def test_run_with_a_batch_the_model_cannot_take_fails_with_the_reason(tmp_path: Path) -> None:
    result = dlscope(tmp_path, "run", "squeezenet", "--batch-size", "4")
    assert result.returncode == 1
    assert "takes batches of 1 only" in result.stderr


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--scenario", "server", "--qps", "0"], "--scenario server: --qps must be greater than 0"),
        (["--scenario", "server", "--latency-bound", "0"], "--latency-bound must be greater"),
        (["--scenario", "sideways"], "--scenario must be one of 'single-stream'"),
        (["--scenario", "batch-sweep", "--batch-sizes", "1,x"], "--batch-sizes takes integers"),
        (["--scenario", "batch-sweep", "--batch-sizes", "1,0"], "--batch-sizes must be >= 1"),
        (["-b", "0"], "--batch-size (-b) must be at least 1, got 0"),
        (["-n", "0"], "--iterations (-n) must be at least 1, got 0"),
        (["--min-duration", "5", "--max-duration", "1"], "--min-duration (5.0) exceeds"),
        (["--adaptive", "2"], "--adaptive must be less than 1"),
        (["-b", "4", "--adaptive", "0.05"], "--adaptive cannot be honoured at --batch-size"),
    ],
)
def test_an_impossible_scenario_is_refused_before_anything_starts(
    tmp_path: Path, options: list[str], says: str
) -> None:
    result = dlscope(tmp_path, "run", "squeezenet", *options)
    assert result.returncode == 2
    assert says in result.stderr
    assert not (tmp_path / "dlscope.db").exists()  # nothing ran, nothing was stored


def test_the_server_scenario_runs_from_the_command_line_with_its_verdict(tmp_path: Path) -> None:
    result = dlscope(
        tmp_path,
        *("run", "squeezenet", "--scenario", "server", "--qps", "20", "--latency-bound", "0.01"),
        *("-n", "10", "--min-duration", "0", "--warmup", "0", "--json", str(tmp_path / "r.json")),
    )
    assert result.returncode == EXIT_INVALID, result.stderr
    assert "verdict" in result.stdout
    evaluation = json.loads((tmp_path / "r.json").read_text())["evaluation"]
    verdict = evaluation["result"]["verdict"]
    assert verdict["status"] == "INVALID"  # no squeezenet answers within 10 µs
    assert "latency_bound_missed" in {reason["code"] for reason in verdict["reasons"]}


def test_run_says_what_a_query_cost_and_what_else_used_the_machine(tmp_path: Path) -> None:
    result = dlscope(
        tmp_path, "run", "squeezenet", "-n", "64", "--json", str(tmp_path / "result.json")
    )
    assert result.returncode in COMPLETED, result.stderr
    shown = " ".join(result.stdout.split())
    for label in ("CPU per query", "peak memory", "energy per query", "other processes"):
        assert label in shown
    assert "noise probe" in shown

    document = json.loads((tmp_path / "result.json").read_text())
    cost = document["evaluation"]["result"]["machine"]["cost"]
    assert cost["cpu_s_per_query"] > 0
    assert cost["peak_memory"]["bytes"] > 0
    # The measured event keeps the raw readings: the window (with its wall-clock times) in
    # its phase, the noise probe and the peak memory beside the run.
    measured = document["events"][3]["payload"]
    window = measured["run"]["phases"][0]["window"]
    assert 0 < window["started_at_ns"] < window["ended_at_ns"]
    assert measured["machine"]["noise"]["after_ns"] > 0
    assert measured["machine"]["peak_memory"]["scope"] == "job"


def test_repeats_run_in_fresh_processes_and_two_results_compare(tmp_path: Path) -> None:
    quick = ("-n", "64", "--min-duration", "0", "--warmup", "0")
    # With no spread allowed, any two real runs are flagged, and the farther one is named.
    repeated = dlscope(tmp_path, "run", "squeezenet", *quick, "--repeat", "2", "--max-spread", "0")
    assert repeated.returncode in COMPLETED, repeated.stderr
    said = " ".join(repeated.stdout.split())
    assert "2 runs of `dlscope run squeezenet" in said
    assert "coefficient of variation" in said
    assert "high run-to-run variation: the spread is above 0.0% (--max-spread)" in said
    assert re.search(r"run [12] is the farthest from the others \([+-]\d", said)

    for name in ("a", "b"):
        run = dlscope(
            tmp_path, "run", "squeezenet", *quick, "--json", str(tmp_path / f"{name}.json")
        )
        assert run.returncode in COMPLETED, run.stderr
    # --allow-invalid: a run this machine's other work made INVALID is still compared here
    # (flagged); tests/unit/test_exit_status.py shows the refusal.
    allow = "--allow-invalid"
    same = dlscope(tmp_path, "compare", str(tmp_path / "a.json"), str(tmp_path / "a.json"), allow)
    assert same.returncode == 0, same.stderr
    assert "not significant" in same.stdout
    two = dlscope(tmp_path, "compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), allow)
    assert two.returncode == 0, two.stderr
    assert "significant" in two.stdout
    missing = dlscope(tmp_path, "compare", str(tmp_path / "a.json"), str(tmp_path / "c.json"))
    assert missing.returncode == 2
    assert "c.json: cannot read a result" in missing.stderr


def test_projections_rebuild_from_the_stored_events(tmp_path: Path) -> None:
    assert dlscope(tmp_path, "run", "squeezenet", "--iterations", "5").returncode in COMPLETED
    result = dlscope(tmp_path, "db", "rebuild-projections")
    assert result.returncode == 0, result.stderr
    # requested, scheduled, started, measured, completed + the worker's and scheduler's own
    assert "projections rebuilt from" in result.stdout


def test_models_list_shows_the_built_in_zoo(tmp_path: Path) -> None:
    result = dlscope(tmp_path, "models", "list")
    assert result.returncode == 0, result.stderr
    assert "squeezenet" in result.stdout
    assert "1.0.0" in result.stdout


def test_a_user_registers_a_manifest_and_runs_it_by_name(tmp_path: Path) -> None:
    shutil.copy(SQUEEZENET, tmp_path / "net.onnx")
    (tmp_path / "net.yaml").write_text(MANIFEST)

    registered = dlscope(tmp_path, "models", "register", str(tmp_path / "net.yaml"))
    assert registered.returncode == 0, registered.stderr
    assert "my-net@1.0.0: registered" in registered.stdout

    run = dlscope(tmp_path, "run", "my-net", "--version", ">=1,<2", "-n", "5")
    assert run.returncode in COMPLETED, run.stderr
    assert "my-net 1.0.0 on onnxruntime" in " ".join(run.stdout.split())

    (tmp_path / "net.yaml").write_text(MANIFEST.replace("my own", "a changed"))
    changed = dlscope(tmp_path, "models", "register", str(tmp_path / "net.yaml"))
    assert changed.returncode == 1
    assert "my-net@1.0.0 is already registered with different content" in changed.stderr


def test_registering_a_file_that_does_not_match_its_checksum_is_refused(tmp_path: Path) -> None:
    (tmp_path / "net.onnx").write_bytes(b"not the model")
    (tmp_path / "net.yaml").write_text(MANIFEST)
    result = dlscope(tmp_path, "models", "register", str(tmp_path / "net.yaml"))
    assert result.returncode == 1
    assert "sha256 mismatch" in result.stderr
    listed = dlscope(tmp_path, "models", "list")
    assert "my-net" not in listed.stdout


def test_db_upgrade_reports_the_revision(tmp_path: Path) -> None:
    result = dlscope(tmp_path, "db", "upgrade")
    assert result.returncode == 0, result.stderr
    # The newest migration: revisions are numbered with their file names.
    newest = max(
        p.name.split("_")[0] for p in (REPOSITORY_ROOT / "migrations" / "versions").glob("0*.py")
    )
    assert f"event store at revision {newest}" in result.stdout


def test_the_zoo_digits_model_reaches_its_recorded_accuracy_through_the_worker(
    tmp_path: Path,
) -> None:
    built = dlscope(tmp_path, "zoo", "build", "digits-cnn")
    assert built.returncode == 0, built.stderr
    assert "digits-cnn@1.0.0 (onnxruntime)" in built.stdout
    assert "minilm" not in built.stdout, "only the family asked for"
    again = dlscope(tmp_path, "zoo", "build", "digits-cnn-torch")
    assert again.stdout.count("already registered") == 3  # same bytes, same versions

    recorded = yaml.safe_load((tmp_path / "zoo" / "digits-cnn.yaml").read_text())
    expected = recorded["attributes"]["accuracy"]["top1"]
    assert expected >= 0.95

    result_file = tmp_path / "digits.json"
    run = dlscope(
        tmp_path,
        "run",
        "digits-cnn",
        "--dataset",
        "digits",
        "--split",
        "test",
        "-n",
        "20",
        "-b",
        "32",
        "--json",
        str(result_file),
        # As `--repeat` runs it: the progress as lines on stderr, for a parent to draw.
        DLSCOPE_PROGRESS="lines",
    )
    assert run.returncode in COMPLETED, run.stderr
    told = [event for line in run.stderr.splitlines() if (event := parse_line(line))]
    steps = [p.get("part") or p["phase"] for kind, p in told if kind == "evaluation.progress"]
    assert steps == [
        "fetching the model",
        "preparing the inputs",
        "loading the model",
        "warming up, batch 32",
        "timed queries, batch 32",
        "measuring accuracy",
        "recording the output fingerprint",
        "tracing at the model level",
        "closing the model",
    ]
    kinds = [kind for kind, _ in told]
    assert kinds.index("evaluation.started") < kinds.index("evaluation.progress")
    assert kinds[-1] == "evaluation.completed"
    accuracy = json.loads(result_file.read_text())["evaluation"]["result"]["accuracy"]
    assert accuracy["samples"] == 360
    assert accuracy["top1"] == pytest.approx(expected, abs=1e-9)

    # The same weights as TorchScript and as a SavedModel, on the PyTorch and TensorFlow
    # workers: the same top-1.
    for model, framework in (("digits-cnn-torch", "pytorch"), ("digits-cnn-tf", "tensorflow")):
        framework_file = tmp_path / f"digits-{framework}.json"
        run = dlscope(
            tmp_path,
            "run",
            model,
            "--framework",
            framework,
            "--dataset",
            "digits",
            "--split",
            "test",
            "-n",
            "20",
            "-b",
            "32",
            "--json",
            str(framework_file),
        )
        assert run.returncode in COMPLETED, run.stderr
        evaluation = json.loads(framework_file.read_text())["evaluation"]
        assert evaluation["framework"] == framework
        assert evaluation["result"]["accuracy"]["top1"] == pytest.approx(expected, abs=1e-9)


def test_a_model_for_another_framework_is_refused_with_the_reason(tmp_path: Path) -> None:
    result = dlscope(tmp_path, "run", "squeezenet", "--framework", "pytorch")
    assert result.returncode == 1
    assert "squeezenet@1.0.1 is for onnxruntime; it cannot run on pytorch" in result.stderr


def test_a_zoo_model_is_built_on_first_use(tmp_path: Path) -> None:
    first = dlscope(tmp_path, "run", "digits-cnn", "--dataset", "digits", "--split", "test")
    assert first.returncode in COMPLETED, first.stderr
    assert "digits-cnn is not built here yet: building it first (no download)" in first.stdout
    assert "minilm" not in first.stdout, "only the model's own family is built"
    assert "top-1 on digits@1.0.0 test (360 samples)" in " ".join(first.stdout.split())

    again = dlscope(tmp_path, "run", "digits-cnn", "-n", "5")
    assert again.returncode in COMPLETED, again.stderr
    assert "building it first" not in again.stdout


async def test_up_serves_the_api_with_a_worker_for_each_framework_asked_for(
    tmp_path: Path,
) -> None:
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("DLSCOPE_")}
    environment["DLSCOPE_HOME"] = str(tmp_path)
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "dlscope", "up", "--port", str(port), "-f", "onnxruntime,opencl"),
        env=environment,
        cwd=REPOSITORY_ROOT,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:

            async def both_online() -> set[str] | None:
                try:
                    agents = (await http.get("/v1/agents")).json()
                except httpx.HTTPError:
                    return None  # not listening yet
                online = {a["framework"] for a in agents if a["status"] == "online"}
                return online if {"onnxruntime", "opencl"} <= online else None

            assert await eventually(both_online, timeout=120)
    finally:
        process.terminate()
        assert await asyncio.wait_for(process.wait(), 30) == 0  # a clean stop on SIGTERM

    refused = dlscope(tmp_path, "up", "-f", "onnxruntime,caffe")
    assert refused.returncode == 2
    assert "unknown framework 'caffe'" in refused.stderr


def test_zoo_build_of_a_model_it_does_not_have_names_those_it_has(tmp_path: Path) -> None:
    result = dlscope(tmp_path, "zoo", "build", "gpt-5")
    assert result.returncode == 2
    assert "no zoo model 'gpt-5'; the zoo builds: digits-cnn, " in result.stderr
    assert "minilm-l6" in result.stderr


# Runs that assert what they measure, not how they are traced: a generation's traced passes
# (ten reference prefills, five traced generations) cost seconds a run.
UNTRACED = ("--trace-level", "none")


def test_run_of_the_language_model_reports_token_latencies_and_identical_tokens(
    smollm2_home: Path, tmp_path: Path
) -> None:
    # The home where the zoo built SmolLM2 once for the session (building on first use is
    # test_a_zoo_model_is_built_on_first_use's); results are written to this test's folder.
    result_file = tmp_path / "experiment.json"
    result = dlscope(
        smollm2_home,
        "run",
        "smollm2",
        "--framework",
        "onnxruntime,pytorch",
        "-n",
        "3",
        "--min-duration",
        "0",
        "--max-new-tokens",
        "6",
        "--json",
        str(result_file),
    )
    assert result.returncode in COMPLETED, result.stderr + result.stdout
    shown = " ".join(result.stdout.split())
    assert "parity: every pair within tolerance" in shown
    document = json.loads(result_file.read_text())
    comparison = document["experiment"]["comparison"]
    (pair,) = comparison["parity"]
    assert pair["top1_agreement"] == 1.0, "greedy decoding gives the same tokens everywhere"
    assert pair["bitwise_identical"] is True
    for member in comparison["evaluations"]:
        assert member["tokens"]["ttft_p50_ms"] > 0
        assert member["tokens"]["output_tokens_per_s"] > 0
    for evaluation in document["evaluations"]:
        generation = evaluation["result"]["generation"]
        assert generation["requests"] == 3
        assert generation["output_tokens_mean"] == 6  # pinned: the end of sequence is ignored
        ttft, e2e = generation["ttft"], generation["e2e"]
        assert 0 < ttft["min_ns"] <= e2e["min_ns"]
        assert generation["tpot"]["count"] == 3
        assert generation["itl"]["count"] == 3 * 5
        assert generation["output_tokens_per_s"] > 0

    alone_file = tmp_path / "alone.json"
    alone = dlscope(
        smollm2_home,
        *("run", "smollm2", "-n", "2", "--min-duration", "0", "--max-new-tokens", "4"),
        *("--dataset", "sentences", "--json", str(alone_file)),
        *UNTRACED,
    )
    assert alone.returncode in COMPLETED, alone.stderr
    scored = json.loads(alone_file.read_text())["evaluation"]["result"]["perplexity"]
    assert scored["dataset"] == "sentences@1.0.0"
    assert scored["texts"] == 48
    # A language model is far better than chance (a perplexity of 49 152, its vocabulary).
    assert 1 < scored["perplexity"] < 1000
    events = json.loads(alone_file.read_text())["events"]
    (measured,) = (e["payload"] for e in events if e["type"] == "evaluation.measured")
    # Every token's time, one array per request, in the one measured event.
    assert [len(r["token_ns"]) for r in measured["generation"]["requests"]] == [4, 4]
    table = " ".join(alone.stdout.split())
    for metric in ("TTFT", "TPOT", "ITL", "E2E", "output tokens/s"):
        assert metric in table
    assert "time per output token: (E2E - TTFT) / (output tokens - 1)" in table

    # Poisson arrivals faster than the model generates: requests queue, and TTFT, counted
    # from each request's scheduled time, grows past a bound no run here can meet.
    server_file = tmp_path / "server.json"
    server = dlscope(
        smollm2_home,
        *("run", "smollm2", "--scenario", "server", "--qps", "20", "-n", "6"),
        *("--min-duration", "0", "--max-new-tokens", "4", "--ttft-bound", "1"),
        *("--json", str(server_file)),
        *UNTRACED,
    )
    assert server.returncode == EXIT_INVALID, server.stderr
    result = json.loads(server_file.read_text())["evaluation"]["result"]
    codes = {reason["code"] for reason in result["verdict"]["reasons"]}
    assert result["verdict"]["status"] == "INVALID"
    assert "ttft_bound_missed" in codes
    assert "latency_bound_missed" not in codes, "the token bounds judge a generation"
    ttft = result["generation"]["ttft"]
    assert ttft["max_ns"] > 2 * ttft["min_ns"], "later arrivals waited in the queue"


def test_a_language_model_under_loadgens_server_rule_and_offline(
    smollm2_home: Path, tmp_path: Path
) -> None:
    # Poisson arrivals through MLCommons LoadGen with its token latencies: LoadGen times the first
    # token and the end of each request and judges the TTFT bound itself.
    loadgen_file = tmp_path / "loadgen.json"
    by_loadgen = dlscope(
        smollm2_home,
        *("run", "smollm2", "--scenario", "server", "--driver", "loadgen", "--qps", "20"),
        *("-n", "6", "--min-duration", "0", "--max-new-tokens", "4", "--ttft-bound", "1"),
        *UNTRACED,
        *("--slo-percentile", "0.5", "--json", str(loadgen_file)),
    )
    assert by_loadgen.returncode == EXIT_INVALID, by_loadgen.stderr
    result = json.loads(loadgen_file.read_text())["evaluation"]["result"]
    (phase,) = result["loadgen"]
    assert phase["result"] == "INVALID"
    assert phase["summary"]["ttft_percentile_ns"] > 1e6
    assert any("TTFT" in line for line in phase["summary"]["recommendations"])
    assert result["generation"]["requests"] == phase["summary"]["min_query_count"]
    shown = " ".join(by_loadgen.stdout.split())
    assert "LoadGen p50 TTFT (ms)" in shown
    assert "LoadGen says" in shown
    assert "TTFT constrain not met" in shown

    # Offline: every prompt issued at once, generated one after another; tokens/s is its
    # headline, and each request's TTFT counts from the start, queue included.
    offline_file = tmp_path / "offline.json"
    offline = dlscope(
        smollm2_home,
        *("run", "smollm2", "--scenario", "offline", "-n", "3", "--min-duration", "0"),
        *("--max-new-tokens", "4", "--json", str(offline_file)),
        *UNTRACED,
    )
    assert offline.returncode in COMPLETED, offline.stderr
    events = json.loads(offline_file.read_text())["events"]
    (measured,) = (e["payload"] for e in events if e["type"] == "evaluation.measured")
    requests = measured["generation"]["requests"]
    assert len(requests) == 3
    assert {r["scheduled_ns"] for r in requests} == {0}, "all issued at once"
    assert requests[2]["token_ns"][0] > requests[0]["token_ns"][-1], "the last one waited"
    generation = json.loads(offline_file.read_text())["evaluation"]["result"]["generation"]
    assert generation["output_tokens_per_s"] > 0

    # A batch of prompts in one call a step: the graph's attention mask lets prompts of
    # different lengths share it, each padded on the left.
    batched_file = tmp_path / "batched.json"
    batched = dlscope(
        smollm2_home,
        *("run", "smollm2", "--scenario", "offline", "-b", "3", "-n", "6", "--min-duration"),
        *("0", "--max-new-tokens", "4", "--json", str(batched_file)),
        *UNTRACED,
    )
    assert batched.returncode in COMPLETED, batched.stderr
    events = json.loads(batched_file.read_text())["events"]
    (measured,) = (e["payload"] for e in events if e["type"] == "evaluation.measured")
    requests = measured["generation"]["requests"]
    assert len(requests) % 3 == 0
    assert len(requests) >= 6
    for start in range(0, len(requests), 3):
        rows = requests[start : start + 3]
        assert len({tuple(r["token_ns"]) for r in rows}) == 1, "a batch's rows share each step"
    assert len({r["input_tokens"] for r in requests}) > 1, "prompts of different lengths"
    assert requests[3]["token_ns"][0] > requests[0]["token_ns"][-1], "the second batch waited"


# Alone: its bound is 1.5 x one stream's TTFT measured a moment before, which another test
# worker on the same cores would move.
@pytest.mark.alone
def test_a_language_model_sweep_and_goodput_search(smollm2_home: Path, tmp_path: Path) -> None:
    _sweep_and_search(smollm2_home, tmp_path)


def _sweep_and_search(home: Path, out: Path) -> None:
    """Two loads side by side, then the goodput search against bounds two streams miss."""
    sweep_file = out / "sweep.json"
    swept = dlscope(
        home,
        *("sweep", "smollm2", "--levels", "1,2", "-n", "4", "--min-duration", "0"),
        *("--max-new-tokens", "4", "--json", str(sweep_file)),
        *UNTRACED,
    )
    assert swept.returncode in COMPLETED, swept.stderr + swept.stdout
    loads = json.loads(sweep_file.read_text())["loads"]
    assert set(loads) == {"1", "2"}
    for streams, evaluation in loads.items():
        assert evaluation["request"]["scenario"]["concurrency"] == int(streams)
        assert evaluation["result"]["generation"]["requests"] >= 4

    # One stream's p50 TTFT is its prefill; two streams share two cores, so each prefill
    # takes longer: a bound of 1.5 x one stream's median separates them on any machine.
    alone = loads["1"]["result"]["generation"]["ttft"]["median"]["value_ns"] / 1e6
    search_file = out / "search.json"
    searched = dlscope(
        home,
        *("sweep", "smollm2", "--search", "--max-concurrency", "4", "-n", "12"),
        *("--min-duration", "0", "--max-new-tokens", "4", "--slo-percentile", "0.5"),
        *UNTRACED,
        *("--ttft-bound", f"{alone * 1.5:.1f}", "--json", str(search_file)),
    )
    assert searched.returncode in COMPLETED, searched.stderr + searched.stdout
    search = json.loads(search_file.read_text())["search"]
    assert search["probes"][0]["load"] == 1
    assert search["probes"][0]["judgement"] in ("meets", "indeterminate")
    shown = " ".join(searched.stdout.split())
    assert "goodput search: the highest load meeting p50 TTFT" in shown

    # Over Poisson rates: each load is the server scenario at that rate.
    rates_file = out / "rates.json"
    rates = dlscope(
        home,
        *("sweep", "smollm2", "--over", "rate", "--levels", "2,20", "-n", "4"),
        *("--min-duration", "0", "--max-new-tokens", "4", "--json", str(rates_file)),
        *UNTRACED,
    )
    assert rates.returncode in COMPLETED, rates.stderr + rates.stdout
    loads = json.loads(rates_file.read_text())["loads"]
    assert set(loads) == {"2", "20"}
    for rate, evaluation in loads.items():
        scenario = evaluation["request"]["scenario"]
        assert (scenario["name"], scenario["target_qps"]) == ("server", float(rate))
        assert evaluation["result"]["generation"]["requests"] >= 4
    assert "loads (Poisson arrivals)" in " ".join(rates.stdout.split())

    # Over batch sizes: each load is the offline scenario, its prompts batched.
    batches_file = out / "batches.json"
    batches = dlscope(
        home,
        *("sweep", "smollm2", "--over", "batch", "--levels", "1,3", "-n", "6"),
        *("--min-duration", "0", "--max-new-tokens", "4", "--json", str(batches_file)),
        *UNTRACED,
    )
    assert batches.returncode in COMPLETED, batches.stderr + batches.stdout
    loads = json.loads(batches_file.read_text())["loads"]
    assert set(loads) == {"1", "3"}
    for size, evaluation in loads.items():
        scenario = evaluation["request"]["scenario"]
        assert (scenario["name"], scenario["batch_size"]) == ("offline", int(size))
        assert evaluation["result"]["generation"]["output_tokens_per_s"] > 0
    assert "loads (offline, prompts batched)" in " ".join(batches.stdout.split())
