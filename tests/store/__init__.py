"""The tests of store."""
