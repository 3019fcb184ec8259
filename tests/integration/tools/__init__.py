"""The integration tests of tools: on a real wire-protocol server (SecantusDB) or the Cosmos-faithful store."""
