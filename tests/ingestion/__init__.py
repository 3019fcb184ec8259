"""The tests of ingestion."""
