"""``python -m services.scheduler``"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from services.scheduler.service import SchedulerService
from shared.config import Settings
from shared.runtime import run_process

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    argparse.ArgumentParser(prog="python -m services.scheduler", description=__doc__).parse_args(
        argv
    )
    run_process("scheduler", lambda runtime: [SchedulerService(runtime)], Settings())
