"""The store: the one MongoClient (`client`), retries and throttling (`retries`), the Cosmos DB seam (`cosmos`),
the collections and indexes (`schema`) and the command that creates them (`setup`). Every job uses it; it
knows no job."""
