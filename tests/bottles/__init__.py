"""The tests of bottles."""
