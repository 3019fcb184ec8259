"""The setup command: every collection and index, on any MongoDB and on Cosmos DB, safe to run twice."""

from typing import Any

import mongomock
import pytest
from pymongo.errors import OperationFailure

from shared.notifications import delivery
from shared.settings import get_settings
from shared.store import cosmos, schema
from shared.store.schema import collection_specs
from shared.store.setup import BuildWait, IndexBuildPending, ensure_store
from shared.store.setup_command import main
from tests.cosmos_fakes import FakeCosmosDatabase, IndexTransformingDatabase
from tests.store.old_layout import OLD_KEYS, pending_notifications


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
def test_an_index_whose_declared_keys_changed_is_built_under_its_other_name_before_the_old_one_goes(
    store, secantus_client, request
):
    client = mongomock.MongoClient() if store == "mongomock" else secantus_client
    db = client[f"setup_changed_{store}"]
    # A store set up before the checks swept by bucket range: the sweep index without `bucket`.
    db["bottles"].create_index([("open_pending", 1), ("open_since", 1)], name="open_check")

    report = ensure_store(db, get_settings(), on_cosmos=False)

    indexes = db["bottles"].index_information()
    assert "open_check" not in indexes
    assert list(indexes["open_check_alt"]["key"]) == [("bucket", 1), ("open_pending", 1), ("open_since", 1)]
    assert any(line.startswith("bottles:") and "rebuilt with new keys: open_check" in line for line in report)
    assert ensure_store(db, get_settings(), on_cosmos=False) == [line.split(" (rebuilt")[0] for line in report]
    client.drop_database(db.name)


def cosmos_set_up_before_the_change() -> IndexTransformingDatabase:
    """A Cosmos DB whose notifications were set up when delivery_pending had no `bucket`, with data in it."""
    fake = IndexTransformingDatabase(mongomock.MongoClient().db, polls=3)
    fake.db[schema.NOTIFICATIONS].create_index(OLD_KEYS, name="delivery_pending")
    pending_notifications(fake.db, 5)
    return fake


def sorted_by(db: Any, keys: list[tuple[str, int]]) -> list[Any]:
    return list(db[schema.NOTIFICATIONS].find({"delivery": "pending"}).sort(keys).limit(10))


def test_on_cosmos_a_changed_index_serves_its_sorts_when_the_setup_ends_and_the_old_one_until_then():
    """Dropping the old index and creating the new one (what the setup did) left both sorts failing with code 2
    until Cosmos DB's transformation ended, after the setup had returned."""
    fake = cosmos_set_up_before_the_change()
    old_sorts: list[int] = []

    def running_code_meanwhile() -> None:
        if (schema.NOTIFICATIONS, "delivery_pending_alt") in fake.building:
            old_sorts.append(len(sorted_by(fake, OLD_KEYS)))
            with pytest.raises(OperationFailure):  # the new keys serve no sort yet
                sorted_by(fake, delivery.OLDEST_FIRST)

    fake.on_poll = running_code_meanwhile
    slept: list[float] = []

    report = ensure_store(fake, get_settings(), on_cosmos=True, wait=BuildWait(sleep=slept.append))

    assert any("rebuilt with new keys: delivery_pending" in line for line in report)
    assert old_sorts == [5, 5, 5]  # the old index served while the new one was built (three polls)
    assert slept  # it waited
    assert len(sorted_by(fake, delivery.OLDEST_FIRST)) == 5  # the new code's sort, at once
    info = fake.db[schema.NOTIFICATIONS].index_information()
    assert "delivery_pending" not in info
    assert [tuple(k) for k in info["delivery_pending_alt"]["key"]] == delivery.OLDEST_FIRST
    with pytest.raises(OperationFailure) as refused:  # the old keys are gone once the new ones serve
        sorted_by(fake, OLD_KEYS)
    assert refused.value.code == 2


def test_on_cosmos_a_build_longer_than_the_wait_keeps_the_old_index_and_the_next_setup_finishes():
    fake = cosmos_set_up_before_the_change()
    fake.polls = 10
    ticks = iter(range(0, 10_000, 60))
    short = BuildWait(timeout_s=120, clock=lambda: float(next(ticks)), sleep=lambda s: None)

    with pytest.raises(IndexBuildPending, match=r"still building an index .* run the setup again"):
        ensure_store(fake, get_settings(), on_cosmos=True, wait=short)

    assert len(sorted_by(fake, OLD_KEYS)) == 5  # kept
    ensure_store(fake, get_settings(), on_cosmos=True, wait=BuildWait(sleep=lambda s: None))
    assert len(sorted_by(fake, delivery.OLDEST_FIRST)) == 5
    assert "delivery_pending" not in fake.db[schema.NOTIFICATIONS].index_information()


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


def test_an_index_with_the_declared_keys_under_another_name_is_the_declared_one():
    """An Azure deployment's indexes come from the Bicep, and ARM cannot name an index: the setup run against it
    must neither create the same keys again under the declared name (MongoDB refuses: IndexOptionsConflict) nor
    drop it."""
    db: Any = mongomock.MongoClient().db
    db["bottles"].create_index([("bucket", 1), ("open_pending", 1), ("open_since", 1)], name="arm_made_name")

    ensure_store(db, get_settings(), on_cosmos=False)

    indexes = db["bottles"].index_information()
    assert "arm_made_name" in indexes
    assert "open_check" not in indexes


@pytest.mark.parametrize("days_changed", [False, True])
def test_the_bicep_ts_ttl_index_under_its_own_name_is_the_declared_one(days_changed):
    """ARM names the Bicep's `_ts` TTL index itself (`_ts_1`): the setup recognised a TTL index by its name only,
    so it created a second one on `_ts` (Cosmos DB allows one TTL index a collection; MongoDB refuses the same keys
    under another name) and, when the days changed, left the old days in force. Recognised by keys and days."""
    settings = get_settings()
    days = settings.actions_retention_days + (1 if days_changed else 0)
    fake = FakeCosmosDatabase(mongomock.MongoClient().db)
    fake.db[schema.BOTTLE_ACTIONS].create_index([("_ts", 1)], name="_ts_1", expireAfterSeconds=days * 86_400)

    ensure_store(fake, settings, on_cosmos=True)

    ttl = {
        name: info["expireAfterSeconds"]
        for name, info in fake.db[schema.BOTTLE_ACTIONS].index_information().items()
        if "expireAfterSeconds" in info
    }
    declared = settings.actions_retention_days * 86_400
    assert ttl == ({"retention": declared} if days_changed else {"_ts_1": declared})
