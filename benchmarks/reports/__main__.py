"""`python -m benchmarks.reports [args]`: the benchmark's command (benchmarks/reports/__init__.py)."""

from benchmarks.reports import main

main()
