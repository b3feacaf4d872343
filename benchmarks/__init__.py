"""Strom benchmarks: one command (`uv run python -m benchmarks`), a table and a JSON file."""
