"""dlscope against ``vllm bench serve`` on the same vLLM server (installed by ``make test`` into
.venv-vllm, serving SmolLM2-135M-Instruct in float32): both send 16 requests one at a time
(prompts of about 98 tokens, 16 output tokens with the end of sequence ignored), and the two
alternate, round after round, so drift on the shared machine hits both alike.

What each tool calls what (both follow the same formulas; they count differently):
- TTFT: ``vllm bench serve``, the first streamed chunk's arrival - the request's send time;
  dlscope, the first chunk *with content* - the request's scheduled time (one at a time, the
  send time).
- TPOT: both (E2E - TTFT) / (output tokens - 1); vllm bench counts the tokens the server says
  it generated, dlscope counts the text received with the model's tokenizer (the server's
  count kept beside it): a re-tokenised answer may count one token fewer.
- ITL: both every gap between consecutive chunks (one token a chunk here).
Figures: each tool's medians per round, and the median over rounds of dlscope / vllm bench
for each metric (the goal: within 5 %).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from bench.common import dlscope
from harness.llama_server import KEY, SERVED
from harness.vllm_server import CHECKPOINT, NOT_INSTALLED, PLATFORM, VLLM, vllm_server

__all__ = ["run"]

ROUNDS = 3
REQUESTS = 16
INPUT_TOKENS = 98
OUTPUT_TOKENS = 16
GOAL = 0.05


async def run(
    rounds: int = ROUNDS,
    *,
    requests: int = REQUESTS,
    url: str | None = None,
    home: Path | None = None,
) -> dict[str, Any]:
    """``rounds`` of ``requests`` requests from each tool. ``url``: the API root of a vLLM
    already serving SmolLM2 as ``harness.vllm_server`` starts it (one is started otherwise);
    ``home``: a dlscope home where ``dlscope zoo build smollm2`` has run (built in a
    temporary one otherwise, a minute)."""
    return await asyncio.to_thread(_run, rounds, requests, url, home)


def _run(rounds: int, requests: int, url: str | None, home: Path | None) -> dict[str, Any]:
    if not VLLM.exists():  # its client (`vllm bench serve`) too
        return {"skipped": NOT_INSTALLED}
    with (
        tempfile.TemporaryDirectory(prefix="vllm-agreement-") as scratch,
        contextlib.ExitStack() as stack,
    ):
        results = Path(scratch)
        if home is None:
            home = results
            dlscope(home, "zoo", "build", "smollm2", "--out", str(home / "zoo"))
        if url is None:
            url = stack.enter_context(vllm_server(results / "vllm.log"))
        by_round = []
        for number in range(rounds):
            vllm = _vllm_bench(url, results / f"vllm-{number}.json", requests)
            ours = _dlscope_run(url, home, results / f"dlscope-{number}.json", requests)
            by_round.append({"vllm_bench": vllm, "dlscope": ours})
    ratios = {
        metric: statistics.median(r["dlscope"][metric] / r["vllm_bench"][metric] for r in by_round)
        for metric in ("ttft_p50_ms", "tpot_p50_ms", "itl_p50_ms", "output_tokens_per_s")
    }
    return {
        "rounds": by_round,
        "dlscope_over_vllm_bench": ratios,
        "within_goal": {metric: abs(ratio - 1) <= GOAL for metric, ratio in ratios.items()},
        "goal": f"within {GOAL:.0%}",
        "requests_per_round": requests,
    }


def _vllm_bench(url: str, result: Path, requests: int) -> dict[str, float]:
    subprocess.run(
        [
            str(VLLM),
            *("bench", "serve", "--backend", "openai", "--endpoint", "/v1/completions"),
            *("--base-url", url.removesuffix("/v1"), "--model", SERVED),
            *("--tokenizer", str(CHECKPOINT), "--dataset-name", "random"),
            *("--random-input-len", str(INPUT_TOKENS), "--random-output-len", str(OUTPUT_TOKENS)),
            *("--num-prompts", str(requests), "--max-concurrency", "1", "--ignore-eos"),
            *("--save-result", "--result-dir", str(result.parent)),
            *("--result-filename", result.name),
        ],
        env={**os.environ, **PLATFORM, "OPENAI_API_KEY": KEY},
        check=True,
        capture_output=True,
        timeout=600,
    )
    document = json.loads(result.read_text())
    return {
        "ttft_p50_ms": document["median_ttft_ms"],
        "tpot_p50_ms": document["median_tpot_ms"],
        "itl_p50_ms": document["median_itl_ms"],
        "output_tokens_per_s": document["output_throughput"],
    }


def _dlscope_run(url: str, home: Path, result: Path, requests: int) -> dict[str, float]:
    dlscope(
        home,
        *("run", "smollm2", "--framework", "endpoint", "--endpoint", url),
        *("-n", str(requests), "--min-duration", "0", "--max-new-tokens", str(OUTPUT_TOKENS)),
        *("--json", str(result)),
        DLSCOPE_ENDPOINT_API_KEY=KEY,
    )
    generation = json.loads(result.read_text())["evaluation"]["result"]["generation"]

    def median_ms(metric: str) -> float:
        return float(generation[metric]["median"]["value_ns"]) / 1e6

    return {
        "ttft_p50_ms": median_ms("ttft"),
        "tpot_p50_ms": median_ms("tpot"),
        "itl_p50_ms": median_ms("itl"),
        "output_tokens_per_s": float(generation["output_tokens_per_s"]),
        "input_tokens_mean": float(generation["input_tokens_mean"]),
    }
