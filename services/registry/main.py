"""``python -m services.registry``"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from services.registry.service import RegistryService
from shared.config import Settings
from shared.runtime import run_process

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    argparse.ArgumentParser(prog="python -m services.registry", description=__doc__).parse_args(
        argv
    )
    run_process("registry", lambda runtime: [RegistryService(runtime)], Settings())
