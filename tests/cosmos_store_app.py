"""The app's own tests on the Cosmos-faithful store (tools/cosmos_store): fixtures that stand in for the suite's
stores, so that a module importing the app's tests runs them through the store instead.

    from tests.cosmos_store_app import cosmos_store, db, real_db  # the stores the imported tests ask for
    from tests.ingestion.test_device_events import test_retried_request_is_stored_once  # runs here on the store

`db` and `real_db` are a database set up as on Cosmos DB (`customAction: CreateCollection`, `_ts` TTL) through the
proxy, installed as the app's store, with MONGODB_CONNECTION_STRING naming a Cosmos DB host (nothing connects to
it) so that the app takes its Cosmos DB paths: the report feeds partitioned by `GetChangeStreamTokens`, one change
stream per physical partition. Whatever the store refuses as Cosmos DB does (an unsupported operator, stage, index
or command, a sort no index serves, a write without its shard key, a document over 2 MB) fails the imported test."""

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from pymongo.database import Database

from shared.settings import get_settings
from shared.store import client as store
from shared.store.setup import ensure_store
from tools.cosmos_store.local import COSMOS_LOOKALIKE
from tools.cosmos_store.options import Options
from tools.cosmos_store.proxy import CosmosProxy

_databases = itertools.count()


@pytest.fixture(scope="module")
def cosmos_store(secantus_uri: str) -> Iterator[CosmosProxy]:
    """One proxy for a module's tests (each gets its own database): tokens in partition order, so that a failure is
    the test's and not the reply's order (the store's own tests shuffle them). A closed client's connection stays
    open until the backend answers its monitor's awaited `hello` (pymongo's streaming monitor, up to 10 s): the clock
    matrix runs a module's tests nine times as densely, so more than the default 64 are open for a moment."""
    with CosmosProxy(secantus_uri, Options(shuffle_tokens=False, max_connections=512)) as proxy:
        yield proxy


@pytest.fixture
def db(cosmos_store: CosmosProxy, monkeypatch: pytest.MonkeyPatch) -> Iterator[Database[Any]]:
    """The app's store on the Cosmos-faithful store, in place of the suite's mongomock and SecantusDB."""
    name = f"on_cosmos_{next(_databases)}"
    monkeypatch.setenv("MONGODB_DATABASE", name)
    monkeypatch.setenv("MONGODB_CONNECTION_STRING", COSMOS_LOOKALIKE)
    get_settings.cache_clear()
    client = store.create_client(cosmos_store.uri)
    store.use_client(client)
    database: Database[Any] = client[name]
    ensure_store(database, get_settings(), on_cosmos=True)
    yield database
    client.drop_database(name)
    client.close()


@pytest.fixture
def real_db(db: Database[Any]) -> Database[Any]:
    """What the integration tests ask for: the same database on the store."""
    return db
