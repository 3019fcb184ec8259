"""Benchmarks: scripts that print figures, each beside a baseline measured in the same run."""
