"""A Cosmos DB for MongoDB (RU) that behaves as the documentation says, in front of SecantusDB: see
docs/cosmos-store.md and tools/cosmos_store/proxy.py."""

from tools.cosmos_store.proxy import CosmosProxy, Options

__all__ = ["CosmosProxy", "Options"]
