"""Tests of shared/feeds: the feed machinery with consumers of the tests' own."""
