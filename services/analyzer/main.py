"""``python -m services.analyzer``"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from services.analyzer.service import AnalyzerService
from shared.config import Settings
from shared.runtime import run_process

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    argparse.ArgumentParser(prog="python -m services.analyzer", description=__doc__).parse_args(
        argv
    )
    run_process("analyzer", lambda runtime: [AnalyzerService(runtime)], Settings())
