"""Benchmarks of dlscope itself. ``python -m bench [name ...]``; results in BENCHMARKS.md."""
