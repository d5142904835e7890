"""Measurement shared by every framework: the timed loop and the statistics of its latencies."""

from shared.measurement.loop import Measurement, measure
from shared.measurement.statistics import summarize

__all__ = ["Measurement", "measure", "summarize"]
