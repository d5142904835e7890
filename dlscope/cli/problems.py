"""pydantic's validation errors said in the command line's words: each names the option the
user typed (``--batch-size (-b) must be at least 1, got 0``), not the wire field."""

from __future__ import annotations

import re

from pydantic import ValidationError

__all__ = ["REQUEST_OPTIONS", "SCENARIO_OPTIONS", "problems"]

# The options that set each wire field, so that an error names what the user typed.
SCENARIO_OPTIONS = {
    "name": "--scenario",
    "driver": "--driver",
    "iterations": "--iterations (-n)",
    "warmup": "--warmup",
    "batch_size": "--batch-size (-b)",
    "samples_per_query": "--samples-per-query",
    "target_qps": "--qps",
    "latency_bound_ms": "--latency-bound",
    "batch_sizes": "--batch-sizes",
    "min_duration_s": "--min-duration",
    "max_duration_s": "--max-duration",
    "adaptive_half_width": "--adaptive",
    "seed": "--seed",
    "max_new_tokens": "--max-new-tokens",
    "input_tokens": "--input-tokens",
    "output_tokens": "--output-tokens",
    "replay": "--replay",
    "ignore_eos": "--natural",
    "ttft_bound_ms": "--ttft-bound",
    "tpot_bound_ms": "--tpot-bound",
    "e2e_bound_ms": "--e2e-bound",
    "slo_percentile": "--slo-percentile",
    "concurrency": "--concurrency",
    "temperature": "--temperature",
    "top_k": "--top-k",
}
REQUEST_OPTIONS = {
    "model": "MODEL",
    "model_version": "--version",
    "framework_version": "--framework-version",
    "dataset": "--dataset",
    "split": "--split",
    "scenario": "--scenario",
}
# pydantic's wording of a bound, as the CLI says it.
_BOUNDS = {
    "greater_than_equal": "must be at least {ge}",
    "greater_than": "must be greater than {gt}",
    "less_than_equal": "must be at most {le}",
    "less_than": "must be less than {lt}",
    "literal_error": "must be one of {expected}",
}


def problems(exc: ValidationError, options: dict[str, str], *, scenario: str = "") -> str:
    """Each of pydantic's errors as "<option> <what is wrong>, got <value>"."""
    said = []
    for error in exc.errors():
        fields = [str(part) for part in error["loc"] if str(part) in options]
        template = _BOUNDS.get(error["type"])
        if fields and template is not None:
            bound = template.format(**error.get("ctx", {}))
            said.append(f"{options[fields[-1]]} {bound}, got {error['input']!r}")
        elif fields:
            said.append(f"{options[fields[-1]]}: {_rename(error['msg'], options)}")
        else:
            # A rule across fields (the scenario's own check): its message names the fields.
            message = _rename(error["msg"], options).removeprefix(f"{scenario} scenario: ")
            said.append(f"--scenario {scenario}: {message}" if scenario else message)
    return "; ".join(said)


def _rename(message: str, options: dict[str, str]) -> str:
    message = message.replace("Value error, ", "").replace(": Input should be", " must be")
    message = message.replace("Input should be", "must be")
    if "batch_sizes" in options:  # the typed scenario's own wording
        message = message.replace("batch sizes must", "--batch-sizes must")
    return re.sub(
        r"\b(" + "|".join(sorted(options, key=len, reverse=True)) + r")\b",
        lambda match: options[match.group(1)] if "_" in match.group(1) else match.group(1),
        message,
    )
