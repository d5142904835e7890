"""Benchmark scenarios: what the measuring needs of their plans.

The plans themselves (``SingleStream``, ``MultiStream``, ``Server``, ``Offline``,
``BatchSweep``, their ``WarmupSettings`` and ``AdaptiveStop``) are wire types: a measured
result carries the plan it ran, so they are defined in ``shared.messages.plans`` (with their
defaults and MLPerf's rules behind them) and named here too. What is left here is the check
only a run can make: whether the dataset can feed the plan.
"""

from __future__ import annotations

from shared.errors import ConfigurationError
from shared.messages.plans import (
    AdaptiveStop,
    BatchSweep,
    MultiStream,
    Offline,
    ScenarioPlan,
    Server,
    SingleStream,
    WarmupSettings,
)

__all__ = [
    "AdaptiveStop",
    "BatchSweep",
    "MultiStream",
    "Offline",
    "ScenarioPlan",
    "Server",
    "SingleStream",
    "WarmupSettings",
    "check_sample_count",
]


def check_sample_count(scenario: ScenarioPlan, sample_count: int) -> None:
    """Refuse a scenario the dataset cannot feed: a multi-stream query draws distinct samples,
    so it cannot ask for more than the dataset holds."""
    if sample_count < 1:
        raise ConfigurationError(f"a scenario needs at least one sample, got {sample_count}")
    if isinstance(scenario, MultiStream) and scenario.samples_per_query > sample_count:
        raise ConfigurationError(
            f"multi-stream queries of {scenario.samples_per_query} samples need a dataset of at "
            f"least that many samples; this one has {sample_count}"
        )
