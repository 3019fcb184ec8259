"""The Cosmos-faithful store's proxy for the integration tests: its clock moved by the test (Clock), a proxy in front
of SecantusDB (proxy_of), and a database set up through it as on Cosmos DB with the app's own client (app_database)."""

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from shared.settings import get_settings
from shared.store import client as store
from shared.store.setup import ensure_store
from tools.cosmos_store.options import Options
from tools.cosmos_store.proxy import CosmosProxy

_databases = itertools.count()


class Clock:
    """The proxy's clock, moved by the test (throughput seconds, `_ts`, index transformations)."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def proxy_of(secantus_uri: str, **options: Any) -> CosmosProxy:
    return CosmosProxy(secantus_uri, Options(**options))


def app_database(proxy: CosmosProxy, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A database set up as on Cosmos DB (customAction CreateCollection, `_ts` TTL), through the proxy, with
    the app's own client installed as its store."""
    name = f"cosmos_{next(_databases)}"
    monkeypatch.setenv("MONGODB_DATABASE", name)
    get_settings.cache_clear()
    client = store.create_client(proxy.uri)
    store.use_client(client)
    db = client[name]
    ensure_store(db, get_settings(), on_cosmos=True)
    yield db
    client.drop_database(name)
    client.close()
