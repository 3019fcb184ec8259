"""The tests of infra."""
