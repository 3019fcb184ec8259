"""The tests of tools."""
