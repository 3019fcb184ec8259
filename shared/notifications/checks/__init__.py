"""The three notification checks (bottles left open, silent bottles, late doses): `rules` (what each finds and
writes), `partitions` (a timer's work messages, one per bucket range), `run` (one partition's sweeps within its
budget), `pacing` and `sending` (how a run spreads its batches and sends what it recorded). docs/checks.md."""
