"""What the benchmarks share: where the real services are, and how results are kept."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dlscope.cli.outcome import COMPLETED
from shared.config import REPOSITORY_ROOT

if TYPE_CHECKING:
    from shared.manifests import ModelManifest

__all__ = [
    "POSTGRES_ADMIN_DSN",
    "RABBITMQ_URL",
    "digits_manifests",
    "dlscope",
    "median_ci95",
    "percentiles",
    "save",
    "smollm_manifests",
]

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


def digits_manifests(zoo: Path) -> dict[str, ModelManifest]:
    """The zoo's digits CNN in ``zoo``, by framework: read back where ``build_digits`` has
    built it already (a test session's zoo, shared by the benchmarks' smoke runs), trained
    and exported there otherwise (seconds)."""
    from dlscope.zoo import DIGITS_MODELS, build_digits
    from shared.manifests import ModelManifest, load_manifest

    paths = {framework: zoo / f"{name}.yaml" for name, framework, _ in DIGITS_MODELS}
    if not all(path.exists() for path in paths.values()):
        return {m.manifest.framework.name: m.manifest for m in build_digits(zoo)}
    found = {framework: load_manifest(path) for framework, path in paths.items()}
    return {f: m for f, m in found.items() if isinstance(m, ModelManifest)}


def smollm_manifests(zoo: Path) -> dict[str, ModelManifest]:
    """SmolLM2 in ``zoo``, by framework, as ``digits_manifests`` (its build takes a minute)."""
    from dlscope.zoo.smollm import SMOLLM_MODELS, build_smollm
    from shared.manifests import ModelManifest, load_manifest

    paths = {framework: zoo / f"{name}.yaml" for name, framework, _ in SMOLLM_MODELS}
    if not all(path.exists() for path in paths.values()):
        return {manifest.framework.name: manifest for manifest, _ in build_smollm(zoo)}
    found = {framework: load_manifest(path) for framework, path in paths.items()}
    return {f: m for f, m in found.items() if isinstance(m, ModelManifest)}


def dlscope(home: Path, *arguments: str, timeout_s: float = 900, **variables: str) -> None:
    """``dlscope *arguments`` as a user types it, in a process of its own: ``home`` its
    DLSCOPE_HOME, ``variables`` its other settings, none of this process's. A run that
    completed INVALID (exit 3 or 4: too few samples for a short run's p90, contention) still
    wrote its result, which is what a benchmark reads; any other failure raises, with what
    the command said."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("DLSCOPE_")}
    environment.update(DLSCOPE_HOME=str(home), **variables)
    done = subprocess.run(
        [sys.executable, "-m", "dlscope", *arguments],
        env=environment,
        cwd=REPOSITORY_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    if done.returncode not in COMPLETED:
        raise RuntimeError(f"dlscope {' '.join(arguments)} failed: {done.stderr[-2000:]}")
