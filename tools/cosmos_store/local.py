"""The Cosmos-faithful store for local runs: SecantusDB in a child process (or any MongoDB by URI) behind the
proxy, set up as on Cosmos DB and installed as the app's store.

The app tells Cosmos DB by its connection string's host (shared/store/cosmos.py: `is_cosmos_uri`), and the
proxy listens on 127.0.0.1; so, unless the environment sets it, MONGODB_CONNECTION_STRING names a Cosmos DB
host for the duration (`COSMOS_LOOKALIKE`). Nothing connects to it: the app's client, made on the proxy's URI,
is installed directly."""

import contextlib
from collections.abc import Iterator
from typing import Any

from pymongo.database import Database

from tools.cosmos_store.options import Options
from tools.cosmos_store.proxy import CosmosProxy
from tools.local_store import local_store, secantus_process, setting_defaults

COSMOS_LOOKALIKE = "mongodb://cosmos-faithful-store.mongo.cosmos.azure.com:10255/?ssl=true"


@contextlib.contextmanager
def cosmos_local_store(
    options: Options,
    uri: str | None = None,
    *,
    listeners: list[Any] | None = None,
    expire: bool = True,
) -> Iterator[tuple[Database[Any], CosmosProxy]]:
    """A set-up database on the Cosmos-faithful store, and the proxy (its partitions, what it metered)."""
    with contextlib.ExitStack() as stack:
        backend = uri or stack.enter_context(secantus_process(expire=expire))
        proxy = stack.enter_context(CosmosProxy(backend, options))
        stack.enter_context(setting_defaults(MONGODB_CONNECTION_STRING=COSMOS_LOOKALIKE))
        db = stack.enter_context(local_store(proxy.uri, listeners=listeners, on_cosmos=True))
        yield db, proxy


def describe_store(proxy: CosmosProxy) -> list[str]:
    """What the store did: partitions and splits per collection, request units metered (and the busiest second of
    the busiest hour: what autoscale bills), operations throttled."""
    metered = proxy.metered
    first = f"Cosmos-faithful store: {len(proxy.partitions.splits)} splits, {metered.throttled} throttled"
    if proxy.options.server_side_retry:
        first += f", {metered.retried_in_server} waited out by server-side retry, {metered.timed_out} timed out (50)"
    if proxy.partitions.merges:
        first += f", {len(proxy.partitions.merges)} merges"
    lines = [first]
    for collection in sorted(proxy.partitions.collections(), key=lambda c: c.name):
        charged = metered.request_units.get(collection.name, 0.0)
        lines.append(
            f"  {collection.name.split('.', 1)[1]:<22} {len(collection.partitions):>3} partitions  "
            f"{sum(p.bytes for p in collection.partitions) / 1024:>9,.1f} KB  {charged:>12,.0f} RU  "
            f"peak {metered.peak_ru_per_second(collection.name):>8,.0f} RU/s"
        )
    return lines
