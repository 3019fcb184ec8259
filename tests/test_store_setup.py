"""The setup command: every collection and index, on any MongoDB and on Cosmos DB, safe to run twice."""

import mongomock
import pytest

from shared.settings import get_settings
from shared.store import cosmos
from shared.store.schema import collection_specs
from shared.store.setup import ensure_store, main
from tests.cosmos_fakes import FakeCosmosDatabase


def index_keys(db, name):
    return {tuple(info["key"]) for info in db[name].index_information().values()}


@pytest.mark.parametrize("store", ["mongomock", pytest.param("secantus", marks=pytest.mark.integration)])
def test_creates_every_collection_and_index_and_is_idempotent(store, secantus_client, request):
    client = mongomock.MongoClient() if store == "mongomock" else secantus_client
    db = client[f"setup_{store}_{request.node.name[-8:].strip('[]-')}"]
    settings = get_settings()

    first = ensure_store(db, settings, on_cosmos=False)
    second = ensure_store(db, settings, on_cosmos=False)

    assert first == second
    specs = collection_specs(settings)
    assert set(db.list_collection_names()) == {spec.name for spec in specs}
    for spec in specs:
        expected = {tuple(index.keys) for index in spec.indexes} | {(("_id", 1),)}
        assert index_keys(db, spec.name) == expected, spec.name
    if store == "secantus":
        client.drop_database(db.name)


@pytest.mark.parametrize("store", ["mongomock", pytest.param("secantus", marks=pytest.mark.integration)])
def test_an_index_whose_declared_keys_changed_is_rebuilt_under_its_name(store, secantus_client, request):
    client = mongomock.MongoClient() if store == "mongomock" else secantus_client
    db = client[f"setup_changed_{store}"]
    # A store set up before the checks swept by bucket range: the sweep index without `bucket`.
    db["bottles"].create_index([("open_pending", 1), ("open_since", 1)], name="open_check")

    report = ensure_store(db, get_settings(), on_cosmos=False)

    assert list(db["bottles"].index_information()["open_check"]["key"]) == [
        ("bucket", 1),
        ("open_pending", 1),
        ("open_since", 1),
    ]
    assert any(line.startswith("bottles:") and "rebuilt with new keys: open_check" in line for line in report)
    assert ensure_store(db, get_settings(), on_cosmos=False) == [line.split(" (rebuilt")[0] for line in report]
    client.drop_database(db.name)


def test_on_cosmos_collections_are_created_sharded_with_the_design_keys():
    fake = FakeCosmosDatabase(mongomock.MongoClient().db)

    ensure_store(fake, get_settings(), on_cosmos=True)
    ensure_store(fake, get_settings(), on_cosmos=True)  # existing collections are not an error

    design = {
        "bottles": "bottle_id",
        "bottle_actions": "bottle_id",
        "bottle_heartbeats": "bottle_id",
        "notifications": "user_id",
        "user_hourly_reports": "user_id",
        "user_daily_reports": "user_id",
        "leases": None,
    }
    assert fake.shard_keys == {spec.name: spec.shard_key for spec in collection_specs(get_settings())}
    assert design.items() <= fake.shard_keys.items()


def test_cosmos_ttl_indexes_are_on_ts():
    from shared.store.schema import IndexSpec

    ttl = IndexSpec("ttl", (("received_at", 1),), expire_after_seconds=60, cosmos_keys=(("_ts", 1),))
    assert ttl.keys_for(True) == (("_ts", 1),)
    assert ttl.keys_for(False) == (("received_at", 1),)


def test_cosmos_uris_are_recognised():
    assert cosmos.is_cosmos_uri("mongodb://acct:key@acct.mongo.cosmos.azure.com:10255/?ssl=true")
    assert not cosmos.is_cosmos_uri("mongodb://127.0.0.1:27017/")


@pytest.mark.integration
def test_request_charge_comes_from_get_last_request_statistics(secantus_client):
    fake = FakeCosmosDatabase(mongomock.MongoClient().db)
    assert cosmos.last_request_charge(fake) == 7.5
    assert cosmos.last_request_charge(secantus_client.db) is None  # not Cosmos: no such command


@pytest.mark.integration
def test_the_command_line_sets_up_a_real_server(secantus_uri, secantus_client, capsys):
    main(["--uri", secantus_uri, "--database", "setup_cli"])
    main(["--uri", secantus_uri, "--database", "setup_cli"])

    out = capsys.readouterr().out
    assert "bottle_actions: shard key bottle_id; indexes: bottle_time" in out
    assert set(secantus_client["setup_cli"].list_collection_names()) == {
        spec.name for spec in collection_specs(get_settings())
    }
    secantus_client.drop_database("setup_cli")


def test_the_command_line_needs_a_connection_string(capsys):
    with pytest.raises(SystemExit):
        main([])
    assert "MONGODB_CONNECTION_STRING" in capsys.readouterr().err


@pytest.mark.integration
def test_documents_stored_before_they_carried_a_bucket_get_it_once_and_their_partition_reads_them(
    secantus_uri, secantus_client, capsys
):
    from shared.store import schema
    from shared.store.partitioning import bucket_of

    db = secantus_client["setup_backfill"]
    main(["--uri", secantus_uri, "--database", "setup_backfill"])
    db[schema.BOTTLE_ACTIONS].insert_many([{"_id": f"b{i}|e", "bottle_id": f"b{i}"} for i in range(7)])
    db[schema.USER_HOURLY_REPORTS].insert_one({"_id": "u1|2026-01-01T00", "user_id": "u1"})
    db[schema.BOTTLES].insert_one({"_id": "b0", "bottle_id": "b0", "bucket": 5})  # already has one: kept
    # A heartbeat document of before the tally: its bucket, but not its owner's.
    db[schema.BOTTLE_HEARTBEATS].insert_one({"_id": "b3", "bottle_id": "b3", "bucket": 9, "user_id": "u3"})

    main(["--uri", secantus_uri, "--database", "setup_backfill", "--backfill-buckets"])
    main(["--uri", secantus_uri, "--database", "setup_backfill", "--backfill-buckets"])

    out = capsys.readouterr().out
    assert "bottle_actions: 7 documents given their bucket" in out
    assert "bottle_actions: 0 documents given their bucket" in out  # the second run finds none left
    assert all(doc["bucket"] == bucket_of(doc["bottle_id"]) for doc in db[schema.BOTTLE_ACTIONS].find())
    assert db[schema.USER_HOURLY_REPORTS].find_one()["bucket"] == bucket_of("u1")
    assert db[schema.BOTTLES].find_one()["bucket"] == 5
    assert "bottle_heartbeats.ub: 1 documents given their bucket" in out
    heartbeats = db[schema.BOTTLE_HEARTBEATS].find_one()
    assert (heartbeats["bucket"], heartbeats["ub"]) == (9, bucket_of("u3"))
    secantus_client.drop_database("setup_backfill")
