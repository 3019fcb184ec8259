"""What a run costs on Cosmos DB: the documented request-unit and billing rules with their pages (`rules`), the
code that applies them (`request_units`: what an operation costs; `billing`: what the account bills) and the meter
that measures what a run reads and writes for them (`meter`). Shared by the Cosmos-faithful store
(tools/cosmos_store/charges.py), the benchmarks and the tests, so it sits below all three."""
