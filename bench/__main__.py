"""``python -m bench [name ...]`` (e.g. ``recorder_drain``): run, print and save results."""

from __future__ import annotations

import asyncio
import importlib
import json
import sys

from bench import BENCHMARKS
from bench.common import save


def main(names: list[str]) -> None:
    for name in names or BENCHMARKS:
        if name not in BENCHMARKS:
            raise SystemExit(f"unknown benchmark {name!r}; choose from {', '.join(BENCHMARKS)}")
        module = importlib.import_module(f"bench.{name}")
        # A benchmark's ``suite`` (several configurations in one run) when it has one.
        result = asyncio.run(getattr(module, "suite", module.run)())
        path = save(name, result)
        print(f"== {name} (saved to {path})")
        print(json.dumps(result, indent=2))


main(sys.argv[1:])
