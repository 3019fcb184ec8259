"""The integration tests of reports: on a real wire-protocol server (SecantusDB) or the Cosmos-faithful store."""
