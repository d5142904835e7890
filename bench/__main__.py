"""``python -m bench [dispatch] [recorder_throughput]``: run benchmarks, print and save results."""

from __future__ import annotations

import asyncio
import importlib
import json
import sys

from bench.common import save

BENCHMARKS = ("dispatch", "recorder_throughput")


def main(names: list[str]) -> None:
    for name in names or BENCHMARKS:
        if name not in BENCHMARKS:
            raise SystemExit(f"unknown benchmark {name!r}; choose from {', '.join(BENCHMARKS)}")
        module = importlib.import_module(f"bench.{name}")
        result = asyncio.run(module.run())
        path = save(name, result)
        print(f"== {name} (saved to {path})")
        print(json.dumps(result, indent=2))


main(sys.argv[1:])
