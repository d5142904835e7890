"""Which tier a test is in, and which of its skips the whole suite may not take.

Tiers. ``make test`` runs every test; ``make test-fast`` (the developer's loop) leaves out
those marked ``rabbitmq``, ``postgres``, ``e2e``, ``zoo``, ``server`` and ``slow``, which the
Makefile selects with ``-m``: a bare ``pytest`` runs everything, one test at a time.
``make test`` runs the suite on two workers (pytest-xdist, a test file to each), then by
themselves the tests marked ``alone``: those that judge a quiet machine (a run found VALID, a
bound set from a TTFT measured a moment before), where the other worker is the contention
they exist to see, and one that drops every connection the broker holds, the other worker's
too. A test that fails only beside another worker is marked ``alone``, saying why. A test is
marked where it is written, or here, by the fixtures it uses (``FIXTURE_MARKS``): one that
reads the zoo's digits CNN through ``digits_zoo`` is a ``zoo`` test whether or not its author
said so.

Skips. A test that finds something missing skips, naming it. Some of what can be missing is
what the test command itself builds or installs here (the llama.cpp and vLLM servers'
virtualenvs, the frameworks of ``.[all]``, Debian's Chromium): a suite that skipped those
tests would go green without having tested the language models, the served models or the
web UI. So where ``DLSCOPE_TEST_STRICT=1`` (set by ``make test``, which CI runs, never by a
developer's bare ``pytest``) such a skip fails its test instead, saying what was not built.
What the command cannot provide stays a skip with its reason: hardware (a GPU, TensorRT, an
OpenCL device whose compiler builds nothing), root for network namespaces or a private
PostgreSQL cluster, tools installed apart (kubectl, docker compose, rabbitmqctl where
RabbitMQ runs elsewhere), a package registry out of reach.
"""

from __future__ import annotations

import functools
import os
import re

__all__ = ["CHROMIUM_MISSING", "FIXTURE_MARKS", "STRICT", "built_here"]

STRICT = os.environ.get("DLSCOPE_TEST_STRICT") == "1"

# The fixtures that make a test a zoo test (it trains, exports or reads what the zoo built)
# or a server test (it talks to llama.cpp's or vLLM's server); and those of real services.
FIXTURE_MARKS = {
    "digits_zoo": "zoo",
    "minilm_zoo": "zoo",
    "smollm2_home": "zoo",
    "llama_url": "server",
    "vllm_served": "server",
    "rabbitmq_url": "rabbitmq",
    "postgres_database": "postgres",
}

CHROMIUM_MISSING = "no Chromium at "


@functools.cache
def _built_here() -> tuple[re.Pattern[str], ...]:
    """Skip reasons (their beginnings) that mean "the test command did not build this here".
    Read when first asked: the harness's servers import torch, which a test session that
    skips nothing need not wait for."""
    from harness.llama_server import NOT_BUILT
    from harness.vllm_server import NOT_INSTALLED

    return (
        re.compile(re.escape(NOT_BUILT)),
        re.compile(re.escape(NOT_INSTALLED)),
        re.compile(re.escape(CHROMIUM_MISSING)),
        # `.[all]` installs every framework but TensorRT (NVIDIA's, for a GPU).
        re.compile(r"framework '(onnxruntime|pytorch|tensorflow|opencl)' is not installed"),
        re.compile(r"the zoo builds no digits model for "),
    )


def built_here(reason: str) -> bool:
    """Whether a skip for ``reason`` is one the test command should have made impossible."""
    reason = reason.removeprefix("Skipped: ")
    return any(pattern.match(reason) for pattern in _built_here())
