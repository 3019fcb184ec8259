"""A Cosmos DB for MongoDB (RU) that behaves as the documentation says, in front of SecantusDB: see
docs/cosmos-store.md, which names the module that applies each rule. The proxy is tools/cosmos_store/proxy.py
(`CosmosProxy`), its knobs tools/cosmos_store/options.py (`Options`)."""
