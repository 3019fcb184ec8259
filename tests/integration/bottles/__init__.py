"""The integration tests of bottles: on a real wire-protocol server (SecantusDB) or the Cosmos-faithful store."""
