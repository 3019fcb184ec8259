"""The tests of benchmarks."""
