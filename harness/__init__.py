"""The test-and-benchmark harness: dlscope deployed, broken and waited on from outside.

What the end-to-end tests and the benchmarks share, and the product never uses:

- ``deployment``: dlscope on this machine as separate OS processes, each deployment with its
  own database and broker namespace, removed afterwards;
- ``postgres``: a throwaway PostgreSQL cluster of our own, to stop and start;
- ``hosts``, ``relay`` and ``multihost``: workers on simulated hosts (network namespaces)
  that reach the control plane only over their own links;
- ``waiting``: ``eventually``, and the waits built on it (an evaluation's outcome, ...).

Not to be confused with the measurement harness of the workers (``services.workers``),
which is the product. An import contract (pyproject.toml, ``lint-imports``) keeps
``dlscope``, ``services`` and ``shared`` from importing this package, and the wheel does not
ship it: it exists in a source checkout only.
"""
