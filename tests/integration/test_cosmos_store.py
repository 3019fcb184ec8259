"""The Cosmos-faithful store (tools/cosmos_store): a proxy in front of SecantusDB that answers as Cosmos DB for
MongoDB (RU) does. First the app's own flows through it, unchanged; then each rule it models, each test quoting
the Microsoft documentation page it follows."""

import itertools
import json
import socket
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from pymongo import MongoClient

from shared.settings import get_settings
from shared.store import client as store
from shared.store import cosmos as cosmos_seam
from shared.store import schema
from shared.store.setup import ensure_store
from tests.api import SPEC, closed, heartbeat, opened, post_events, provisioned
from tests.checking import World
from tests.report_client import aggregate, get_reports
from tools.cosmos_store import CosmosProxy, Options

pytestmark = pytest.mark.integration
_databases = itertools.count()
USER = SPEC["user_id"]


class Clock:
    """The proxy's clock, moved by the test (throughput seconds, `_ts`, index transformations)."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def proxy_of(secantus_uri: str, **options: Any) -> CosmosProxy:
    return CosmosProxy(secantus_uri, Options(**options))


@pytest.fixture
def cosmos(secantus_uri: str, clock: Clock) -> Iterator[CosmosProxy]:
    with proxy_of(secantus_uri, seed=7, clock=clock) as proxy:
        yield proxy


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


@pytest.fixture
def cosmos_db(cosmos: CosmosProxy, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    yield from app_database(cosmos, monkeypatch)


def last_charge(db: Any) -> float:
    charge = cosmos_seam.last_request_charge(db)
    assert charge is not None
    return charge


# --- the proxy: the app runs through it unchanged ----------------------------------------------------------


def test_the_apps_flows_run_through_the_proxy_unchanged(cosmos, cosmos_db):
    """Provisioning, device events, the report consumer and a check, through the app's own client and code:
    what the app stores and answers is what it does on the embedded store directly."""
    keys = {"bottle-1": provisioned("bottle-1"), "bottle-2": provisioned("bottle-2", {**SPEC, "medication": "B"})}
    h8 = _an_hour_ago()
    events = [
        heartbeat(h8 + timedelta(minutes=1)),
        opened(h8 + timedelta(minutes=2)),
        closed(h8 + timedelta(minutes=3)),
    ]
    assert post_events("bottle-1", keys["bottle-1"], {"events": events}).status == 202
    assert post_events("bottle-2", keys["bottle-2"], {"events": [heartbeat(h8 + timedelta(minutes=5))]}).status == 202

    aggregate()
    response = get_reports(USER, **{"from": h8.isoformat(), "to": (h8 + timedelta(hours=1)).isoformat()})

    assert response.status == 200
    [report] = response.body["reports"]
    assert (report["opened"], report["closed"], report["pills_taken"]) == (1, 1, 1)
    assert cosmos_db[schema.BOTTLE_ACTIONS].count_documents({}) == 2
    assert cosmos.metered.request_units[f"{cosmos_db.name}.{schema.BOTTLE_ACTIONS}"] > 0


def test_a_check_runs_through_the_proxy(cosmos, cosmos_db):
    world = World(cosmos_db, _an_hour_ago())
    try:
        world.provision()
        world.open()
        assert world.after(minutes=5, seconds=1).check("left_open") != []
        assert [n["kind"] for n in world.notifications()] == ["left_open"]
    finally:
        world.stop()


def test_the_proxy_listens_on_loopback_names_itself_in_hello_and_stops_cleanly(secantus_uri):
    with proxy_of(secantus_uri) as proxy:
        host, port = proxy.address
        client: MongoClient[Any] = MongoClient(proxy.uri, serverSelectionTimeoutMS=3000)
        hello = client.admin.command("hello")
        assert host == "127.0.0.1"
        assert hello["me"] == f"{host}:{port}"
        assert client.address == (host, port)  # pymongo stays on the proxy, never finds the backend
        client.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, port), timeout=1)


def test_connections_past_the_bound_are_refused_not_queued(secantus_uri):
    with proxy_of(secantus_uri, max_connections=2) as proxy:
        held = [socket.create_connection(proxy.address, timeout=2) for _ in range(2)]
        extra = socket.create_connection(proxy.address, timeout=2)
        refused = extra.recv(1) == b""  # closed at once, not left waiting for a slot
        extra.close()
        for s in held:
            s.close()
        client: MongoClient[Any] = MongoClient(proxy.uri, serverSelectionTimeoutMS=3000)
        client.admin.command("ping")  # the slots come back when their connections end
        client.close()
    assert refused


def _an_hour_ago() -> Any:
    from shared.instants import hour_of, utc_now

    return hour_of(utc_now()) - timedelta(hours=1)


def _json(token: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(token["_data"]))
