"""The integration tests of notifications: on a real wire-protocol server (SecantusDB) or the Cosmos-faithful store."""
