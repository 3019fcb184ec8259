"""The integration tests of ingestion: on a real wire-protocol server (SecantusDB) or the Cosmos-faithful store."""
