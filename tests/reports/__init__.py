"""The tests of reports."""
