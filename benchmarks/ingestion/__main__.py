"""`python -m benchmarks.ingestion [args]`: the benchmark's command (benchmarks/ingestion/__init__.py)."""

from benchmarks.ingestion import main

main()
