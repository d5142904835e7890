"""What the benchmarks share: where the real services are, and how results are kept."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["POSTGRES_ADMIN_DSN", "RABBITMQ_URL", "median_ci95", "percentiles", "save"]

RABBITMQ_URL = os.environ.get("DLSCOPE_BENCH_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")
POSTGRES_ADMIN_DSN = os.environ.get(
    "DLSCOPE_BENCH_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"
)
RESULTS = Path(__file__).parent / "results"


def percentiles(values_ms: list[float]) -> dict[str, float]:
    array = np.asarray(values_ms)
    p50, p90, p99 = np.percentile(array, [50, 90, 99])
    return {
        "count": int(array.size),
        "mean_ms": float(array.mean()),
        "p50_ms": float(p50),
        "p90_ms": float(p90),
        "p99_ms": float(p99),
        "max_ms": float(array.max()),
    }


def save(name: str, result: dict[str, Any]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    document = {
        "benchmark": name,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        **result,
    }
    path.write_text(json.dumps(document, indent=2))
    return path


def median_ci95(values: list[float], resamples: int = 2000) -> list[float]:
    """95 % confidence interval of the median of ``values`` (a benchmark's rounds), by
    bootstrap, seeded."""
    import numpy as np

    rng = np.random.default_rng(0)
    samples = rng.choice(np.asarray(values), size=(resamples, len(values)), replace=True)
    low, high = np.percentile(np.median(samples, axis=1), [2.5, 97.5])
    return [float(low), float(high)]
