"""`python -m benchmarks.checks [args]`: the benchmark's command (benchmarks/checks/__init__.py)."""

from benchmarks.checks import main

main()
