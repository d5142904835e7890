"""Benchmarks of dlscope itself. ``python -m bench [name ...]``; results in BENCHMARKS.md.

Each module's ``suite`` (several configurations in one run) or else ``run`` measures at full
scale by default; their parameters scale it down, and tests/bench/test_smoke.py runs every one
of ``BENCHMARKS`` once at a tiny scale, so a benchmark that no longer runs fails the suite.
"""

__all__ = ["BENCHMARKS"]

BENCHMARKS = (
    "dispatch",
    "recorder_throughput",
    "recorder_drain",
    "harness_overhead",
    "opencl",
    "loadgen_parity",
    "server_capacity",
    "fanout",
    "install_size",
    "trace_overhead",
    "ui_pages",
    "fairness",
    "interference",
    "generation",
    "endpoint",
    "load_generator",
    "vllm_agreement",
)
