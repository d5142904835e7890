"""``python -m services.gateway [--host H] [--port N]``"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from services.gateway.service import GatewayService
from shared.config import Settings
from shared.runtime import run_process

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m services.gateway", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args(argv)
    run_process(
        "gateway",
        lambda runtime: [GatewayService(runtime, host=args.host, port=args.port)],
        Settings(),
    )
