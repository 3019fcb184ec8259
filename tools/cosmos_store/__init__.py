"""A Cosmos DB for MongoDB (RU) that behaves as the documentation says, in front of SecantusDB: see
docs/cosmos-store.md. The proxy and its options are in tools/cosmos_store/proxy.py (`CosmosProxy`, `Options`)."""
