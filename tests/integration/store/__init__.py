"""The integration tests of store: on a real wire-protocol server (SecantusDB) or the Cosmos-faithful store."""
