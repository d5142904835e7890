"""``python -m services.recorder``"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from services.recorder.service import RecorderService
from shared.config import Settings
from shared.runtime import run_process

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    argparse.ArgumentParser(prog="python -m services.recorder", description=__doc__).parse_args(
        argv
    )
    run_process("recorder", lambda runtime: [RecorderService(runtime)], Settings())
