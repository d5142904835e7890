"""``python -m services.workers --framework NAME --hardware KIND [--agent-id ID]
[--endpoint URL]``"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from services.workers.service import WorkerService
from shared.config import Settings
from shared.errors import ConfigurationError
from shared.messages import FRAMEWORKS, HARDWARE
from shared.runtime import run_process

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m services.workers", description=__doc__)
    parser.add_argument("--framework", choices=FRAMEWORKS, default="onnxruntime")
    parser.add_argument("--hardware", choices=HARDWARE, default="cpu")
    parser.add_argument(
        "--agent-id", default=None, help="default: <host>-<framework>-<hardware>-<random>"
    )
    parser.add_argument(
        "--endpoint",
        default=None,
        help="--framework endpoint: the server's OpenAI-compatible API root, e.g. "
        "http://127.0.0.1:8000/v1 (default DLSCOPE_ENDPOINT_URL; its key: "
        "DLSCOPE_ENDPOINT_API_KEY)",
    )
    args = parser.parse_args(argv)
    settings = Settings()
    if args.endpoint:
        settings = settings.model_copy(update={"endpoint_url": args.endpoint})
    try:
        run_process(
            f"worker-{args.framework}-{args.hardware}",
            lambda runtime: [
                WorkerService(
                    runtime,
                    framework=args.framework,
                    hardware=args.hardware,
                    agent_id=args.agent_id,
                )
            ],
            settings,
        )
    except ConfigurationError as exc:
        # A worker that cannot start at all (no core to lease, a lease directory it cannot
        # use): one line saying why and a non-zero exit, which a container restarts. A
        # framework that is missing or can run nothing here never gets here: the worker
        # stays up, announced as unavailable with why (WorkerService.start).
        raise SystemExit(f"dlscope worker: {exc}") from None
