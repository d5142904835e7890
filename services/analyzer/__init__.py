"""Analyzer: statistics and reports from raw measurements."""

from services.analyzer.service import AnalyzerService

__all__ = ["AnalyzerService"]
