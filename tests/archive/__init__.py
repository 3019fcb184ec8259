"""The tests of archive."""
