"""``python -m services.recorder``"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from services.recorder.service import RecorderService
from shared.config import Settings
from shared.runtime import run_process

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m services.recorder", description=__doc__)
    parser.add_argument(
        "--partition",
        type=int,
        default=0,
        help="which of the DLSCOPE_RECORDER_PARTITIONS partitions to record (0-based)",
    )
    partition = parser.parse_args(argv).partition
    run_process(
        "recorder" if partition == 0 else f"recorder-{partition}",
        lambda runtime: [RecorderService(runtime, partition=partition)],
        Settings(),
    )
