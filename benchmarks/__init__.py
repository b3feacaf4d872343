"""Strom benchmarks: one command (`uv run python -m benchmarks`), a table on stdout, JSON on disk."""
