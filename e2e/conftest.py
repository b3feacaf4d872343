"""Whole-system tests: real broker processes, the real client, the real CLI and benchmarks."""
