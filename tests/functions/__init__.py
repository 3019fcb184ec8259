"""The tests of functions."""
