"""The tests of notifications."""
