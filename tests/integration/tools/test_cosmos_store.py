"""The Cosmos-faithful store (tools/cosmos_store): a proxy in front of SecantusDB that answers as Cosmos DB for
MongoDB (RU) does. First the app's own flows through it, unchanged; then each rule it models, each test quoting
the Microsoft documentation page it follows."""

import itertools
import json
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import bson
import pytest
from pymongo import MongoClient
from pymongo.errors import ConfigurationError, OperationFailure

from shared.feeds.sources import PIPELINE
from shared.settings import get_settings
from shared.store import client as store
from shared.store import cosmos as cosmos_seam
from shared.store import schema
from shared.store.schema import collection_specs
from shared.store.setup import ensure_store
from tests.api import SPEC, closed, heartbeat, opened, post_events, provisioned
from tests.checking import World
from tests.integration.cosmos_proxy import app_database, proxy_of
from tests.report_client import aggregate, get_reports
from tools.cosmos_store.options import Options
from tools.cosmos_store.partitions import TOP, effective_key
from tools.cosmos_store.proxy import CosmosProxy
from tools.costs.meter import IndexedPaths
from tools.costs.request_units import DocumentWrite, Operation
from tools.simulate.in_process import run_simulation
from tools.simulate.scoring import KINDS

pytestmark = pytest.mark.integration
USER = SPEC["user_id"]


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


def test_the_apps_driver_refuses_a_server_speaking_mongodb_4_2s_wire_version(secantus_uri):
    """infra/modules/cosmos.bicep creates the account with serverVersion '4.2'; MongoDB 4.2 speaks wire version 8,
    and the pinned pymongo (requirements.txt) needs at least 9 (MongoDB 4.4). If Cosmos DB's 4.2 endpoint reports
    its version's wire number, as its 3.2 endpoint did (wire 2: drivers that dropped 3.0 refused it), the app cannot
    connect: a risk to check on a real account (`db.command("hello")["maxWireVersion"]`), or avoided with a newer
    serverVersion."""
    with proxy_of(secantus_uri, max_wire_version=8) as proxy:
        client = store.create_client(proxy.uri)
        try:
            with pytest.raises(ConfigurationError, match="reports wire version 8"):
                client.admin.command("ping")
        finally:
            client.close()


def test_connections_past_the_bound_are_refused_not_queued(secantus_uri):
    with proxy_of(secantus_uri, max_connections=4) as proxy:  # a pymongo client opens up to 3 (monitors, pool)
        held = [socket.create_connection(proxy.address, timeout=2) for _ in range(4)]
        extra = socket.create_connection(proxy.address, timeout=2)
        refused = extra.recv(1) == b""  # closed at once, not left waiting for a slot
        extra.close()
        for s in held:
            s.close()
        deadline = time.monotonic() + 5
        while proxy.open_connections and time.monotonic() < deadline:  # their threads see them close
            time.sleep(0.01)
        client: MongoClient[Any] = MongoClient(proxy.uri, serverSelectionTimeoutMS=3000)
        client.admin.command("ping")  # the slots come back when their connections end
        client.close()
    assert refused


def _an_hour_ago() -> Any:
    from shared.instants import hour_of, utc_now

    return hour_of(utc_now()) - timedelta(hours=1)


def _json(token: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(token["_data"]))


# --- physical partitions ------------------------------------------------------------------------------------

SCALING = "https://learn.microsoft.com/azure/cosmos-db/scaling-provisioned-throughput-best-practices"


def action(bottle_id: str, n: int = 0, **extra: Any) -> dict[str, Any]:
    return {"_id": f"{bottle_id}|{n}", "bottle_id": bottle_id, "note": "x" * 200, **extra}


def covers_the_hash_space(partitions: list[Any]) -> bool:
    bounds = [(p.low, p.high) for p in partitions]
    return bounds[0][0] == 0 and bounds[-1][1] == TOP and all(a[1] == b[0] for a, b in itertools.pairwise(bounds))


def test_a_partition_past_its_size_limit_splits_in_two_by_hash_range(secantus_uri, clock, monkeypatch):
    """SCALING: "Each physical partition can support a maximum of 10,000 RU/s (applies to all APIs) of throughput
    and 50 GB of storage" ... "Each PartitionKeyRangeId maps to one physical partition and is assigned to hold data
    for a range of possible hash values." ... "As data gets written, Azure Cosmos DB uses the hash of the partition
    key value to determine which logical and physical partition the data lives on." (50 GB scaled down to 6 KB.)"""
    with proxy_of(secantus_uri, partition_bytes=6_000, clock=clock) as proxy:
        db = next(app_database(proxy, monkeypatch))
        actions = db[schema.BOTTLE_ACTIONS]
        for n in range(60):
            actions.insert_one(action(f"bottle-{n}"))

        partitions = proxy.partition_map(db.name, schema.BOTTLE_ACTIONS)
        stored = list(actions.find())

    assert len(partitions) >= 4  # 60 x ~260 bytes: past 6 KB, then past it again in each half
    assert covers_the_hash_space(partitions)
    assert all(p.bytes <= 6_000 for p in partitions)
    for partition in partitions:  # each holds exactly the documents whose shard key hashes into its range
        held = [d for d in stored if partition.holds(effective_key(d["bottle_id"]))]
        assert partition.bytes == sum(len(bson.encode(d)) for d in held)
    assert proxy.partitions.splits[0].parent.parent is None  # the collection's first partition split first


def test_one_shard_key_value_never_splits_across_partitions(secantus_uri, clock, monkeypatch):
    """SCALING: a partition key range holds "a range of possible hash values", so one value's documents (one
    logical partition) stay in one physical partition however large: past the limit, no split can relieve it."""
    with proxy_of(secantus_uri, partition_bytes=2_000, clock=clock) as proxy:
        db = next(app_database(proxy, monkeypatch))
        db[schema.BOTTLE_ACTIONS].insert_many([action("bottle-1", n) for n in range(20)])
        [partition] = proxy.partition_map(db.name, schema.BOTTLE_ACTIONS)
        db[schema.BOTTLE_ACTIONS].insert_one(action("bottle-2"))
        after = proxy.partition_map(db.name, schema.BOTTLE_ACTIONS)

    assert partition.bytes > 2_000
    assert len(after) == 2  # a second key: now it can split, and each key lands whole on one side
    assert sorted(len(p.keys) for p in after) == [1, 1]


def test_a_test_splits_a_partition_when_it_asks(cosmos, cosmos_db):
    """As above (SCALING); and a collection without a shard key is one partition (it cannot split)."""
    actions = cosmos_db[schema.BOTTLE_ACTIONS]
    actions.insert_many([action(f"bottle-{n}") for n in range(10)])
    [parent] = cosmos.partition_map(cosmos_db.name, schema.BOTTLE_ACTIONS)

    [split] = cosmos.split(cosmos_db.name, schema.BOTTLE_ACTIONS)

    left, right = cosmos.partition_map(cosmos_db.name, schema.BOTTLE_ACTIONS)
    assert split.parent.id == parent.id
    assert (left.parent, right.parent) == (parent.id, parent.id)
    assert (left.low, left.high, right.high) == (parent.low, right.low, parent.high)
    assert left.bytes + right.bytes == parent.bytes
    assert min(left.bytes, right.bytes) > 0
    assert len(cosmos_seam.change_stream_tokens(cosmos_db, schema.BOTTLE_ACTIONS) or []) == 2
    with pytest.raises(ValueError, match="no shard key"):
        cosmos.split(cosmos_db.name, schema.LEASES)


# --- charges and throttling ---------------------------------------------------------------------------------

FIND_CHARGE = "https://learn.microsoft.com/azure/cosmos-db/mongodb/find-request-unit-charge"
RATE_LIMITING = "https://learn.microsoft.com/azure/cosmos-db/mongodb/prevent-rate-limiting-errors"


def test_every_operation_is_charged_by_the_cost_model_and_read_with_get_last_request_statistics(cosmos, cosmos_db):
    """FIND_CHARGE: "The RU charge is exposed by a custom database command named getLastRequestStatistics. The
    command returns a document that contains the name of the last operation executed, its request charge, and its
    duration." The charge is tools/costs/request_units.py's for what the operation did."""
    actions = cosmos_db[schema.BOTTLE_ACTIONS]
    document = action("bottle-1")
    paths = IndexedPaths.of(next(s for s in collection_specs(get_settings()) if s.name == schema.BOTTLE_ACTIONS))
    before = sum(p.charged for p in cosmos.partition_map(cosmos_db.name, schema.BOTTLE_ACTIONS))  # the setup's

    actions.insert_one(document)
    inserted = cosmos_db.command("getLastRequestStatistics")
    actions.find_one({"bottle_id": "bottle-1"})
    read = last_charge(cosmos_db)

    size = len(bson.encode(document))
    write = DocumentWrite(None, size, *paths.changed(None, document))
    expected = Operation("insert", schema.BOTTLE_ACTIONS, writes=[write])
    assert inserted["CommandName"] == "insert"
    assert inserted["RequestCharge"] == round(expected.ru(), 2) > 0
    assert inserted["RequestDurationInMilliSeconds"] >= 0
    assert read == round(Operation("find", schema.BOTTLE_ACTIONS, returned=[size]).ru(), 2)
    spent = sum(p.charged for p in cosmos.partition_map(cosmos_db.name, schema.BOTTLE_ACTIONS)) - before
    assert spent == pytest.approx(inserted["RequestCharge"] + read)


def two_bottles_in_two_partitions(proxy: CosmosProxy, db: Any) -> tuple[str, str]:
    first, second = proxy.partition_map(db.name, schema.BOTTLE_ACTIONS)
    names = (f"bottle-{n}" for n in itertools.count())
    return (
        next(n for n in names if first.holds(effective_key(n))),
        next(n for n in names if second.holds(effective_key(n))),
    )


def test_past_a_partitions_throughput_operations_fail_with_16500_and_retry_after(secantus_uri, clock, monkeypatch):
    """RATE_LIMITING: "Azure Cosmos DB for MongoDB operations might encounter rate-limiting, resulting in 16500
    errors in mongo request metrics, if they exceed a collection's throughput limit (RUs)."
    https://learn.microsoft.com/azure/cosmos-db/nosql/troubleshoot-request-rate-too-large: "In a given second, if
    the operations consume more than the provisioned request units, Azure Cosmos DB will return a 429 exception.
    Each second, the number of request units available to use is reset." Per physical partition (SCALING: 10,000
    RU/s each, scaled down here to 20)."""
    clock.now = 1_000.25
    with proxy_of(secantus_uri, partition_ru_per_second=20, initial_partitions=2, clock=clock) as proxy:
        db = next(app_database(proxy, monkeypatch))
        actions = db[schema.BOTTLE_ACTIONS]
        busy, quiet = two_bottles_in_two_partitions(proxy, db)
        written = 0
        try:
            for n in range(20):
                actions.insert_one(action(busy, n))
                written += 1
        except OperationFailure as error:
            refused = error
        else:
            pytest.fail("20 writes of ~5 RU each within one second of a 20 RU/s partition were all accepted")
        actions.insert_one(action(quiet))  # the other partition has its own budget
        with pytest.raises(OperationFailure) as reading:  # reads of the busy one wait too
            actions.count_documents({"bottle_id": busy})
        clock.now = 1_001.0  # the next second
        stored_while_throttled = actions.count_documents({"bottle_id": busy})
        actions.insert_one(action(busy, 99))

        assert refused.code == reading.value.code == 16500
        assert "RetryAfterMs=750" in str(refused)
        assert cosmos_seam.throttle_delay_ms(refused) == 750
        assert 0 < written < 20
        assert stored_while_throttled == written  # the refused write stored nothing
        assert actions.count_documents({"bottle_id": busy}) == written + 1
        assert proxy.metered.throttled >= 1


# --- change streams -----------------------------------------------------------------------------------------

CUSTOM_COMMANDS = "https://learn.microsoft.com/azure/cosmos-db/mongodb/custom-commands"
CHANGE_STREAMS = "https://learn.microsoft.com/azure/cosmos-db/mongodb/change-streams"


def feed_range(token: dict[str, Any]) -> tuple[str, str]:
    value = _json(token)["Continuation"][0]["FeedRange"]["value"]
    return value["min"], value["max"]


def test_get_change_stream_tokens_gives_one_token_per_partition_with_its_feed_range_in_no_fixed_order(
    secantus_uri, clock, monkeypatch
):
    """CUSTOM_COMMANDS: "The following command returns one or more change stream resume tokens - each one
    corresponding to data from a single physical shard/partition". The documented sample token is
    `{"_data": BinData(0, <base64 JSON>), "_kind": NumberInt(1)}`, the JSON being
    `{"V":2,"Rid":...,"Continuation":[{"FeedRange":{"type":"Effective Partition Key Range","value":{"min":"",
    "max":"FF"}},"State":{"type":"continuation",...}}]}`. No order is documented: ours changes between calls."""
    with proxy_of(secantus_uri, initial_partitions=4, clock=clock) as proxy:
        db = next(app_database(proxy, monkeypatch))
        replies = [
            db.command({"customAction": "GetChangeStreamTokens", "collection": schema.BOTTLE_ACTIONS}) for _ in range(8)
        ]
        partitions = proxy.partition_map(db.name, schema.BOTTLE_ACTIONS)

    tokens = replies[0]["resumeAfterTokens"]
    assert len(tokens) == 4
    document = _json(tokens[0])
    assert (document["V"], tokens[0]["_kind"]) == (2, 1)
    assert isinstance(document["Rid"], str)
    assert document["Continuation"][0]["FeedRange"]["type"] == "Effective Partition Key Range"
    assert document["Continuation"][0]["State"]["type"] == "continuation"
    assert {feed_range(t) for t in tokens} == {p.feed_range for p in partitions}
    assert ("", "FF") not in {feed_range(t) for t in tokens}
    orders = {tuple(feed_range(t) for t in reply["resumeAfterTokens"]) for reply in replies}
    assert len(orders) > 1


def watch(db: Any, token: Any, **options: Any) -> Any:
    return db[schema.BOTTLE_ACTIONS].watch(
        PIPELINE, full_document="updateLookup", resume_after=token, max_await_time_ms=10, **options
    )


def drain(stream: Any) -> list[dict[str, Any]]:
    changes = []
    while (change := stream.try_next()) is not None:
        changes.append(change)
    return changes


def test_a_stream_opened_with_a_partitions_token_reads_that_partition_only(secantus_uri, clock, monkeypatch):
    """CUSTOM_COMMANDS: "Each resume token causes watch() to only return data from that physical
    shard/partition." ... "receive data only from that physical partition." """
    with proxy_of(secantus_uri, initial_partitions=2, clock=clock) as proxy:
        db = next(app_database(proxy, monkeypatch))
        tokens = cosmos_seam.change_stream_tokens(db, schema.BOTTLE_ACTIONS) or []
        db[schema.BOTTLE_ACTIONS].insert_many([action(f"bottle-{n}") for n in range(12)])
        read = {feed_range(token): drain(watch(db, token)) for token in tokens}
        partitions = proxy.partition_map(db.name, schema.BOTTLE_ACTIONS)

    for partition in partitions:
        changes = read[partition.feed_range]
        assert changes, "each partition got some of the 12 bottles"
        assert all(partition.holds(effective_key(c["fullDocument"]["bottle_id"])) for c in changes)
        assert all(set(c) == {"_id", "fullDocument", "ns", "documentKey"} for c in changes)  # no operationType
    assert sorted(c["fullDocument"]["_id"] for cs in read.values() for c in cs) == sorted(
        f"bottle-{n}|0" for n in range(12)
    )


def test_every_document_of_a_batch_carries_one_token_pointing_after_the_batch(cosmos, cosmos_db):
    """CUSTOM_COMMANDS: "Each document returned includes a resume token (they're all the same for each page).
    This resume token should be stored and reused if the thread/process dies. This resume token picks up from
    where you left off"."""
    [token] = cosmos_seam.change_stream_tokens(cosmos_db, schema.BOTTLE_ACTIONS) or []
    actions = cosmos_db[schema.BOTTLE_ACTIONS]
    opened_stream = cosmos_db.command(
        "aggregate",
        schema.BOTTLE_ACTIONS,
        pipeline=[{"$changeStream": {"fullDocument": "updateLookup", "resumeAfter": token}}, *PIPELINE],
        cursor={},
    )
    actions.insert_many([action(f"bottle-{n}") for n in range(5)])
    page = cosmos_db.command("getMore", opened_stream["cursor"]["id"], collection=schema.BOTTLE_ACTIONS, maxTimeMS=50)
    batch = page["cursor"]["nextBatch"]
    actions.insert_one(action("bottle-late"))

    assert len(batch) == 5
    assert all(change["_id"] == page["cursor"]["postBatchResumeToken"] for change in batch)
    resumed = drain(watch(cosmos_db, batch[0]["_id"]))  # the token of the batch's first document
    assert [c["fullDocument"]["_id"] for c in resumed] == ["bottle-late|0"]  # nothing of the batch again


def test_a_change_stream_needs_cosmos_pipeline_and_never_shows_deletes(cosmos, cosmos_db):
    """CHANGE_STREAMS: "The $match stage, $project stage, and fullDocument option are required to get the change
    streams. Watching for delete operations using change streams is currently not supported." """
    actions = cosmos_db[schema.BOTTLE_ACTIONS]
    with_deletes = [{"$match": {"operationType": {"$in": ["insert", "delete"]}}}, PIPELINE[1]]
    for pipeline, options in (
        (PIPELINE, {}),  # no fullDocument
        (PIPELINE[:1], {"full_document": "updateLookup"}),  # no $project
        ([], {"full_document": "updateLookup"}),
        (with_deletes, {"full_document": "updateLookup"}),
    ):
        with pytest.raises(OperationFailure) as refused:
            actions.watch(pipeline, max_await_time_ms=10, **options).try_next()
        assert refused.value.code == 2

    stream = watch(cosmos_db, None)
    actions.insert_one(action("bottle-1"))
    actions.update_one({"bottle_id": "bottle-1", "_id": "bottle-1|0"}, {"$set": {"note": "y"}})
    actions.delete_one({"bottle_id": "bottle-1", "_id": "bottle-1|0"})
    actions.insert_one(action("bottle-2"))
    changes = drain(stream)
    assert [c["documentKey"]["_id"] for c in changes if c["documentKey"]["_id"] == "bottle-2|0"] == ["bottle-2|0"]
    assert all(c["fullDocument"] is not None for c in changes)  # nothing of the delete


def test_a_throttled_stream_answers_empty_pages_then_carries_on(secantus_uri, clock, monkeypatch):
    """RATE_LIMITING throttles every operation past the partition's RU/s; a throttled change stream's pages come
    back empty (its token unmoved) rather than failing, the least forgiving reading, which the worker assumes
    (docs/reports.md: an empty or short page is no proof of being caught up). No Microsoft page I could find says
    so in words: an assumption to check on a real account."""
    with proxy_of(secantus_uri, partition_ru_per_second=4, clock=clock) as proxy:
        db = next(app_database(proxy, monkeypatch))
        [token] = cosmos_seam.change_stream_tokens(db, schema.BOTTLE_ACTIONS) or []
        stream = watch(db, token)
        assert drain(stream) == []
        before = stream.resume_token
        db[schema.BOTTLE_ACTIONS].insert_one(action("bottle-1"))  # ~5 RU: past this second's 4

        throttled = drain(stream)
        unmoved = stream.resume_token
        clock.now += 1
        carried_on = drain(stream)

        assert throttled == []
        assert unmoved == before
        assert [c["fullDocument"]["_id"] for c in carried_on] == ["bottle-1|0"]
        assert proxy.partition_map(db.name, schema.BOTTLE_ACTIONS)[0].throttled >= 1


def test_after_a_split_the_parents_token_is_refused_and_the_childrens_tokens_read_on(cosmos, cosmos_db):
    """CUSTOM_COMMANDS promises one token per physical partition, and nothing about a token whose partition has
    split: this store takes the least forgiving reading. The parent's token (and a stream open on it) fails with
    code 280, non-resumable; new tokens, one per child, start at the time they are asked for, so what was written
    between the parent's last token and them is the consumer's to recover (shared/reports: by checkpoint time)."""
    actions = cosmos_db[schema.BOTTLE_ACTIONS]
    [parent] = cosmos_seam.change_stream_tokens(cosmos_db, schema.BOTTLE_ACTIONS) or []
    open_stream = watch(cosmos_db, parent)
    actions.insert_many([action(f"bottle-{n}") for n in range(10)])
    assert len(drain(open_stream)) == 10
    saved = open_stream.resume_token

    cosmos.split(cosmos_db.name, schema.BOTTLE_ACTIONS)
    actions.insert_one(action("bottle-between"))

    with pytest.raises(OperationFailure, match="PartitionKeyRangeGone") as open_failed:
        drain(open_stream)
    with pytest.raises(OperationFailure, match="PartitionKeyRangeGone") as resume_failed:
        drain(watch(cosmos_db, saved))
    assert open_failed.value.code == resume_failed.value.code == 280
    children = cosmos_seam.change_stream_tokens(cosmos_db, schema.BOTTLE_ACTIONS) or []
    streams = [watch(cosmos_db, token) for token in children]
    actions.insert_many([action(f"bottle-after-{n}") for n in range(10)])
    read = [c["fullDocument"]["_id"] for s in streams for c in drain(s)]
    assert len(children) == 2
    assert sorted(read) == sorted(f"bottle-after-{n}|0" for n in range(10))  # not "bottle-between"


# --- indexes: sorts, transformations, TTL ---------------------------------------------------------------------

ERROR_CODES = "https://learn.microsoft.com/azure/cosmos-db/mongodb/error-codes-solutions"
INDEX_POLICY = "https://learn.microsoft.com/azure/cosmos-db/index-policy"
TTL = "https://learn.microsoft.com/azure/cosmos-db/mongodb/time-to-live"


def test_a_sort_needs_an_index_that_matches_it_exactly(cosmos, cosmos_db, sort_audit):
    """ERROR_CODES, code 2: "The index path corresponding to the specified order-by item is excluded / The order by
    query does not have a corresponding composite index that it can be served from." (tools/sort_audit.py: the
    rule.)"""
    actions = cosmos_db[schema.BOTTLE_ACTIONS]
    actions.insert_many([action("bottle-1", n, time=n) for n in range(3)])

    served = list(actions.find({"bottle_id": "bottle-1"}).sort([("bottle_id", -1), ("time", -1)]))
    by_id = list(actions.find({"bottle_id": "bottle-1"}).sort("_id", -1))
    mixed = [("bottle_id", 1), ("time", -1)]
    for sort in ([("time", 1)], [("time", 1), ("bottle_id", 1)], [("bottle_id", 1), ("time", 1), ("_id", 1)], mixed):
        with pytest.raises(OperationFailure, match="order-by item is excluded") as refused:
            list(actions.find({"bottle_id": "bottle-1"}).sort(sort))
        assert refused.value.code == 2
    sort_audit.clear()  # the refused sorts are this test's point, not the app's

    assert [d["time"] for d in served] == [2, 1, 0]
    assert len(by_id) == 3


def test_an_index_serves_sorts_only_once_its_transformation_has_ended(secantus_uri, clock, monkeypatch):
    """INDEX_POLICY: "Index transformation is an asynchronous operation ... While re-indexing is in progress,
    queries may not return all the matching results". Here a sort that needs an index still transforming fails
    as it would without one (code 2), until the (settable) transformation time has passed."""
    with proxy_of(secantus_uri, index_delay_seconds=30, clock=clock) as proxy:
        db = next(app_database(proxy, monkeypatch))  # the app's own indexes: still transforming too
        actions = db[schema.BOTTLE_ACTIONS]
        actions.insert_one(action("bottle-1", time=1))
        query = actions.find({"bottle_id": "bottle-1"}).sort([("bottle_id", 1), ("time", 1)])
        with pytest.raises(OperationFailure, match=r"still transforming: .*bottle_time") as early:
            list(query.clone())
        clock.now += 31
        assert [d["time"] for d in query.clone()] == [1]
        assert early.value.code == 2
        assert proxy.indexes.delay == 30


def test_ttl_indexes_only_on_ts_and_documents_expire_by_their_last_write_or_own_ttl(cosmos, clock, cosmos_db):
    """TTL: "The TTL index is an index on the _ts field with an "expireAfterSeconds" value." ... "the database
    deletes any documents in that collection that weren't modified in the last 10 seconds." ... "TTL values set on
    a document will override the collection's TTL value." (A TTL index on another field is refused with code 2,
    "The 'expireAfterSeconds' option is supported on '_ts' field only.")"""
    notes = cosmos_db["notes"]
    with pytest.raises(OperationFailure, match="supported on '_ts' field only") as refused:
        notes.create_index([("created_at", 1)], expireAfterSeconds=60)
    notes.create_index([("_ts", 1)], expireAfterSeconds=10)
    notes.insert_many([{"_id": "old"}, {"_id": "touched"}, {"_id": "long", "ttl": 100}, {"_id": "never", "ttl": -1}])
    notes.insert_one({"_id": "short", "ttl": 2})
    clock.now += 5
    assert cosmos.expire() == 1  # "short": its own 2 seconds
    notes.update_one({"_id": "touched"}, {"$set": {"seen": True}})  # a write moves its _ts
    clock.now += 6

    assert cosmos.expire() == 1
    assert refused.value.code == 2
    assert sorted(d["_id"] for d in notes.find()) == ["long", "never", "touched"]


def test_the_app_setting_up_a_store_as_for_plain_mongodb_is_refused_on_its_ttl_indexes(cosmos, monkeypatch):
    """What the app would meet if it set up Cosmos DB as any MongoDB (retention on date fields): TTL's rule."""
    monkeypatch.setenv("MONGODB_DATABASE", "cosmos_plain")
    get_settings.cache_clear()
    client = store.create_client(cosmos.uri)
    try:
        with pytest.raises(OperationFailure, match="supported on '_ts' field only"):
            ensure_store(client["cosmos_plain"], get_settings(), on_cosmos=False)
    finally:
        client.drop_database("cosmos_plain")
        client.close()


def test_tokens_asked_for_an_operation_time_read_from_it(cosmos, cosmos_db):
    """CUSTOM_COMMANDS: `startAtOperationTime: "<BSON Timestamp>" // Optional. Defaults to the time the command is
    run.`"""
    actions = cosmos_db[schema.BOTTLE_ACTIONS]
    actions.insert_one(action("bottle-before"))
    since = cosmos_db.client.admin.command("hello")["operationTime"]
    actions.insert_many([action(f"bottle-{n}") for n in range(3)])

    [from_then] = cosmos_db.command(
        {"customAction": "GetChangeStreamTokens", "collection": schema.BOTTLE_ACTIONS, "startAtOperationTime": since}
    )["resumeAfterTokens"]
    [from_now] = cosmos_seam.change_stream_tokens(cosmos_db, schema.BOTTLE_ACTIONS) or []

    assert sorted(c["fullDocument"]["_id"] for c in drain(watch(cosmos_db, from_then))) == [
        f"bottle-{n}|0" for n in range(3)
    ]
    assert drain(watch(cosmos_db, from_now)) == []


def test_writers_side_by_side_leave_the_partition_map_exact(secantus_uri, clock, monkeypatch):
    """The proxy serves concurrent connections (one thread each): the sizes it keeps per partition still add
    up to what is stored, and splits under concurrent writes lose no document's bytes."""
    with proxy_of(secantus_uri, partition_bytes=3_000, initial_partitions=2, clock=clock) as proxy:
        db = next(app_database(proxy, monkeypatch))
        actions = db[schema.BOTTLE_ACTIONS]

        def write(worker: int) -> None:
            for n in range(15):
                bottle = f"bottle-{worker}-{n}"
                actions.insert_one(action(bottle))
                actions.update_one({"bottle_id": bottle, "_id": f"{bottle}|0"}, {"$set": {"note": "z" * (n * 10)}})

        with ThreadPoolExecutor(max_workers=6) as pool:
            list(pool.map(write, range(6)))
        partitions = proxy.partition_map(db.name, schema.BOTTLE_ACTIONS)
        stored = list(actions.find())

    assert len(stored) == 90
    assert len(partitions) > 2
    assert covers_the_hash_space(partitions)
    for partition in partitions:
        held = [d for d in stored if partition.holds(effective_key(d["bottle_id"]))]
        assert partition.bytes == sum(len(bson.encode(d)) for d in held)


def test_simulated_hours_on_the_store_notify_exactly_and_report_truly_through_splits(registered_functions, monkeypatch):
    """The simulator (./dev simulate --cosmos-store) on the store, the app in its Cosmos DB mode (one report feed
    partition per physical partition, from GetChangeStreamTokens): the partitions split as the fleet's data grows,
    bottle_actions' among them while the report consumer reads it, and the notifications and reports must still
    match the injected trouble and the source. The tokens come in no order (as CUSTOM_COMMANDS allows: the leases
    are keyed by the feed range each token names, so a reply's order cannot lose a partition's actions; the rule
    itself is tests/reports/test_partition_splits.py's, on the fakes). One queue worker: a run repeats.

    Nine simulated hours of ten bottles: seed 89 injects every kind of trouble (two missed doses, a bottle left open,
    two bottles silent for hours whose buffered events then arrive), and partitions of 1,200 bytes split
    bottle_actions into four while it grows. The checks and the report dispatcher run less often than the app's
    defaults, each still often enough to see every episode (tests/tools/test_simulation.py says why)."""
    monkeypatch.setenv("CHECK_PARTITIONS", "2")
    monkeypatch.setenv("CHECK_OPEN_BOTTLES_SCHEDULE", "0 */5 * * * *")
    monkeypatch.setenv("CHECK_SILENT_BOTTLES_SCHEDULE", "0 */15 * * * *")
    monkeypatch.setenv("REPORTS_SCHEDULE", "0 */30 * * * *")
    get_settings.cache_clear()
    result = run_simulation(
        bottles=10,
        users=4,
        days=0.375,
        seed=89,
        mongodb_uri=None,
        progress=False,
        workers=1,
        cosmos=Options(partition_bytes=1_200, seed=3, shuffle_tokens=True),
    )

    partitions = {line.split()[0]: int(line.split()[1]) for line in result.store_lines[1:]}
    assert partitions["bottle_actions"] >= 3, result.store_lines
    assert {kind: score.expected > 0 for kind, score in result.scores.items()} == dict.fromkeys(KINDS, True)
    for kind, score in result.scores.items():
        assert (score.precision, score.recall) == (1.0, 1.0), (kind, result.misses, result.extras)
    assert result.report_check.user_hours > 0
    assert result.report_check.mismatches == []


def test_current_op_reports_an_index_build_until_its_transformation_ends(cosmos, clock, cosmos_db):
    """INDEX_PROGRESS (learn.microsoft.com/azure/cosmos-db/mongodb/indexing#track-index-progress): "you can use the
    currentOp() command to track the progress ... db.currentOp({"command.createIndexes": <collectionName>,
    "command.$db": <databaseName>})"; an empty `inprog` when no index build is in progress."""
    cosmos.indexes.delay = 30
    cosmos_db["things"].insert_one({"_id": 1, "n": 1})
    cosmos_db["things"].create_index([("n", 1)], name="by_n")
    ask = {"currentOp": 1, "command.createIndexes": "things", "command.$db": cosmos_db.name}

    building = cosmos_db.client.admin.command(ask)["inprog"]
    clock.now += 31
    built = cosmos_db.client.admin.command(ask)["inprog"]

    assert [op["command"]["indexes"][0]["name"] for op in building] == ["by_n"]
    assert building[0]["progress"] == {"done": 0, "total": 1}
    assert built == []


def test_a_filter_on_a_path_whose_index_is_being_dropped_misses_documents_until_the_transformation_ends(
    secantus_uri, clock, monkeypatch
):
    """MONGO_INDEXING (Background index updates): "When adding new indexes, there is also no risk of incomplete or
    inconsistent query results." ... "When removing indexes and immediately running queries that have filters on
    the dropped indexes, results might be inconsistent and incomplete until the index transformation finishes."
    Here the removal (30 s, settable) walks the documents indexed before it began, and those written since are
    not in the index it reads: the least forgiving reading. A filter on a path another ready index keeps, or one
    on a newly added index, stays complete."""
    with proxy_of(secantus_uri, index_delay_seconds=30, clock=clock) as proxy:
        db = next(app_database(proxy, monkeypatch))
        things = db["things"]
        things.create_index([("n", 1)], name="by_n")
        things.create_index([("m", 1), ("n", 1)], name="by_m_n")
        things.create_index([("k", 1)], name="by_k")
        clock.now += 31
        things.insert_many([{"_id": i, "n": 1, "m": 1, "k": 1} for i in range(10)])

        things.drop_index("by_k")
        things.drop_index("by_n")  # `n` stays in by_m_n: filters on it stay complete
        things.create_index([("j", 1)], name="by_j")  # added: "no risk of incomplete ... results"
        clock.now += 1
        things.insert_one({"_id": 10, "n": 1, "m": 1, "k": 1, "j": 1})
        at_once = things.count_documents({"k": 1})
        clock.now += 14
        halfway = sorted(d["_id"] for d in things.find({"k": 1}))
        complete = (things.count_documents({"n": 1}), things.count_documents({"j": 1}), things.count_documents({}))
        clock.now += 16
        after = things.count_documents({"k": 1})

    assert at_once == 10  # the document written since the drop began is missing
    assert len(halfway) == 5
    assert 10 not in halfway
    assert complete == (11, 1, 11)
    assert after == 11


def test_filters_stay_complete_during_a_drop_when_the_option_is_off(secantus_uri, clock, monkeypatch):
    """The rule above is settable (`incomplete_during_index_drops`), for a run that wants to tell it apart."""
    with proxy_of(secantus_uri, index_delay_seconds=30, incomplete_during_index_drops=False, clock=clock) as proxy:
        db = next(app_database(proxy, monkeypatch))
        db["things"].create_index([("k", 1)], name="by_k")
        clock.now += 31
        db["things"].insert_many([{"_id": i, "k": 1} for i in range(4)])
        db["things"].drop_index("by_k")
        clock.now += 15
        assert db["things"].count_documents({"k": 1}) == 4


LIMITS = "https://learn.microsoft.com/azure/cosmos-db/concepts-limits"
FORBIDDEN = "https://learn.microsoft.com/azure/cosmos-db/nosql/troubleshoot-forbidden"


def test_a_write_past_a_logical_partitions_limit_fails_and_stores_nothing(secantus_uri, clock, monkeypatch):
    """LIMITS: "Maximum storage across all items per (logical) partition | 20 GB" (scaled here to 2,000 bytes,
    `logical_partition_bytes`). FORBIDDEN gives the NoSQL API's error: "Forbidden (403); Substatus: 1014 /
    Partition key reached maximum size of {...} GB". The MongoDB API's code for it is not documented: this store
    answers code 2 with that message, a failure no retry policy takes for a passing one (the least forgiving)."""
    with proxy_of(secantus_uri, logical_partition_bytes=2_000, clock=clock) as proxy:
        db = next(app_database(proxy, monkeypatch))
        actions = db[schema.BOTTLE_ACTIONS]
        stored = 0
        try:
            for n in range(20):
                actions.insert_one(action("bottle-full", n))
                stored += 1
        except OperationFailure as error:
            refused = error
        else:
            pytest.fail("20 documents of ~260 bytes under one shard key value fitted in 2,000 bytes")
        with pytest.raises(OperationFailure, match="Substatus: 1014") as update_refused:
            actions.update_one({"bottle_id": "bottle-full", "_id": "bottle-full|0"}, {"$set": {"more": "y" * 300}})
        actions.insert_one(action("bottle-other"))  # another shard key value has its own 20 GB
        actions.delete_one({"bottle_id": "bottle-full", "_id": "bottle-full|0"})  # deletes free room
        actions.insert_one(action("bottle-full", 99))

        assert refused.code == update_refused.value.code == 2
        assert "Partition key reached maximum size" in str(refused)
        assert 0 < stored < 20
        assert stored * len(bson.encode(action("bottle-full", 10))) <= 2_000
        assert actions.count_documents({"bottle_id": "bottle-full"}) == stored  # the refused ones stored nothing
        assert actions.find_one({"bottle_id": "bottle-full", "_id": "bottle-full|0"}) is None


SERVER_SIDE_RETRY = "https://learn.microsoft.com/azure/cosmos-db/mongodb/prevent-rate-limiting-errors"


def test_server_side_retry_waits_out_throttling_inside_the_server(secantus_uri, clock, monkeypatch):
    """SERVER_SIDE_RETRY: "Enable Server Side Retry (SSR) to automate operation retries. SSR retries requests across
    all collections in your account with short delays." The client sees no 16500: the write waits (on the proxy's
    clock) until the partition's next second."""
    clock.now = 1_000.25

    def sleep(seconds: float) -> None:
        clock.now += seconds

    with proxy_of(secantus_uri, partition_ru_per_second=20, server_side_retry=True, sleep=sleep, clock=clock) as proxy:
        db = next(app_database(proxy, monkeypatch))
        actions = db[schema.BOTTLE_ACTIONS]
        for n in range(12):  # ~5 RU each: three seconds' budget
            actions.insert_one(action("bottle-1", n))

        assert actions.count_documents({"bottle_id": "bottle-1"}) == 12
        assert proxy.metered.throttled == 0
        assert proxy.metered.retried_in_server >= 2
        assert 1_002.0 <= clock.now < 1_004.0


def test_server_side_retry_gives_up_after_60_seconds_with_exceeded_time_limit(secantus_uri, clock, monkeypatch):
    """SERVER_SIDE_RETRY: "If a 60-second timeout is reached, a client receives an ExceededTimeLimit exception
    (50)." ERROR_CODES, 50: "The request has exceeded the timeout of 60 seconds of execution." A partition over its
    budget for the whole minute (the proxy's clock stands still here: the wait is counted by what it slept)."""
    slept: list[float] = []
    with proxy_of(
        secantus_uri, partition_ru_per_second=4, server_side_retry=True, sleep=slept.append, clock=clock
    ) as proxy:
        db = next(app_database(proxy, monkeypatch))
        actions = db[schema.BOTTLE_ACTIONS]
        actions.insert_one(action("bottle-1"))  # ~5 RU: past this second's 4
        with pytest.raises(OperationFailure, match="Retries due to rate limiting") as gave_up:
            actions.insert_one(action("bottle-1", 1))

        assert gave_up.value.code == 50
        assert sum(slept) == pytest.approx(60.0)
        assert proxy.metered.timed_out == 1
        backend: MongoClient[Any] = MongoClient(secantus_uri)
        assert backend[db.name][schema.BOTTLE_ACTIONS].count_documents({}) == 1  # the refused write stored nothing
        backend.close()


MONGO_INDEXING = "https://learn.microsoft.com/azure/cosmos-db/mongodb/indexing"


def test_unique_indexes_lead_with_the_shard_key_and_need_an_empty_collection(cosmos, cosmos_db):
    """MONGO_INDEXING (Unique indexes): "For sharded collections, you must provide the shard (partition) key to
    create a unique index ... The first field in the order should be the shard key." ... omitting it "returns an
    error with the following message: cannot create unique index over {student_id : 1.0} with shard key pattern
    { university : 1.0 }". Limitations: "Unique indexes need to be created while the collection is empty."
    (ERROR_CODES, 67 CannotCreateIndex.)"""
    actions = cosmos_db[schema.BOTTLE_ACTIONS]
    with pytest.raises(OperationFailure, match="cannot create unique index over") as unsharded_key:
        actions.create_index([("note", 1), ("bottle_id", 1)], unique=True)
    actions.create_index([("bottle_id", 1), ("note", 1)], unique=True, name="bottle_note")
    cosmos_db["things"].insert_one({"_id": 1, "n": 1})
    with pytest.raises(OperationFailure, match="while the collection is empty") as not_empty:
        cosmos_db["things"].create_index([("n", 1)], unique=True)
    cosmos_db["things"].create_index([("n", 1)])  # a non-unique one is fine

    assert unsharded_key.value.code == not_empty.value.code == 67
    assert "bottle_note" in actions.index_information()


def test_a_write_must_give_a_document_its_shard_key_and_never_change_it(cosmos, cosmos_db):
    """ERROR_CODES, 61 ShardKeyNotFound: "The document in your request didn't contain the collection's shard key
    (Azure Cosmos DB partition key)." 66 ImmutableField: "The request is attempting to change an immutable field"
    ... "Ensure that your request doesn't attempt to update that field or the shard key field." An upsert whose
    filter does not fix the shard key by equality and whose update does not set it is refused even when it would
    have matched (the least forgiving reading)."""
    actions = cosmos_db[schema.BOTTLE_ACTIONS]
    actions.insert_one(action("bottle-1"))
    refusals = []
    for write in (
        lambda: actions.insert_one({"_id": "loose", "note": "no bottle"}),
        lambda: actions.update_one({"_id": "bottle-1|0"}, {"$set": {"note": "y"}}, upsert=True),
        lambda: actions.find_one_and_update({"_id": "new"}, {"$set": {"note": "y"}}, upsert=True),
        lambda: actions.update_one({"_id": "bottle-1|0"}, {"$set": {"bottle_id": "bottle-2"}}),
        lambda: actions.update_one({"bottle_id": "bottle-1", "_id": "bottle-1|0"}, {"$unset": {"bottle_id": ""}}),
        lambda: actions.replace_one({"_id": "bottle-1|0"}, {"bottle_id": "bottle-3", "note": "z"}),
    ):
        with pytest.raises(OperationFailure) as refused:
            write()
        refusals.append(refused.value.code)
    actions.update_one({"bottle_id": "bottle-1", "_id": "bottle-1|0"}, {"$set": {"bottle_id": "bottle-1"}})
    actions.update_one({"_id": "bottle-1|0"}, {"$set": {"note": "kept"}})  # no upsert: the shard key stays
    actions.update_one({"_id": "bottle-9|0"}, {"$set": {"bottle_id": "bottle-9"}}, upsert=True)

    assert refusals == [61, 61, 61, 66, 66, 66]
    assert actions.find_one({"_id": "bottle-1|0"}) == {**action("bottle-1"), "note": "kept"}
    assert actions.count_documents({}) == 2


AUTOSCALE = "https://learn.microsoft.com/azure/cosmos-db/provision-throughput-autoscale"


def test_an_autoscale_maximum_forces_partitions_and_is_the_collections_throughput(secantus_uri, clock, monkeypatch):
    """LIMITS: "Maximum RUs per partition (logical & physical) | 10,000": a maximum of 25,000 RU/s needs three
    physical partitions from the start (tools/costs/billing.py: physical_partitions), each serving its share.
    Scaled: `partition_ru_per_second` 20 stands for 10,000, so a maximum of 4 stands for 2,000 RU/s, one partition
    whose 4 RU/s throttle a second write (~5 RU each) within one second."""
    with proxy_of(secantus_uri, autoscale_max_ru_per_second=25_000, clock=clock) as proxy:
        db = next(app_database(proxy, monkeypatch))
        wide = proxy.partition_map(db.name, schema.BOTTLE_ACTIONS)
        unsharded = proxy.partition_map(db.name, schema.LEASES)
        splits = list(proxy.partitions.splits)
    clock.now = 1_000.25
    with proxy_of(secantus_uri, partition_ru_per_second=20, autoscale_max_ru_per_second=4, clock=clock) as proxy:
        db = next(app_database(proxy, monkeypatch))
        actions = db[schema.BOTTLE_ACTIONS]
        actions.insert_one(action("bottle-1"))
        with pytest.raises(OperationFailure) as throttled:
            actions.insert_one(action("bottle-1", 1))

    assert len(wide) == 3
    assert covers_the_hash_space(wide)
    assert max(p.high - p.low for p in wide) - min(p.high - p.low for p in wide) <= 1  # created even, not split
    assert [p.parent for p in wide] == [None] * 3
    assert splits == []
    assert [p.share for p in wide] == [pytest.approx(25_000 / 3)] * 3
    assert [p.share for p in unsharded] == [None]  # no shard key: one partition, its own throughput
    assert throttled.value.code == 16500


def test_cosmos_raises_an_autoscale_maximum_to_ten_ru_per_second_per_gb_stored(secantus_uri, clock, monkeypatch):
    """AUTOSCALE (Minimum autoscale max RU/s for a container): the maximum is at least 10 x the GB stored (data and
    index), at least 1,000, in steps of 1,000, and Cosmos DB raises it by itself (tools.costs.billing.storage_floor).
    Here 6,000 bytes stand for a partition's 50 GB: 60 actions (~15.6 KB, ~130 GB) lift a 1,000 RU/s maximum to
    2,000, spread over the partitions their storage forced."""
    with proxy_of(secantus_uri, partition_bytes=6_000, autoscale_max_ru_per_second=1_000, clock=clock) as proxy:
        db = next(app_database(proxy, monkeypatch))
        actions = db[schema.BOTTLE_ACTIONS]
        actions.insert_one(action("bottle-0"))
        before = proxy.partitions.collection(db.name, schema.BOTTLE_ACTIONS).autoscale_max
        actions.insert_many([action(f"bottle-{n}") for n in range(1, 60)])
        grown = proxy.partitions.collection(db.name, schema.BOTTLE_ACTIONS)
        stored_gb = proxy.partitions.stored_gb(grown)

    assert before == 1_000
    assert 100 < stored_gb < 200
    assert grown.autoscale_max == 2_000
    assert len(grown.partitions) >= 3  # ~130 GB at 50 GB each
    assert sum(p.share or 0 for p in grown.partitions) == pytest.approx(2_000)


def test_metering_reports_each_hours_peak_second_and_its_bill(secantus_uri, clock, monkeypatch):
    """AUTOSCALE: "each hour, you're billed for the highest throughput the system scaled to within that hour" (and
    at least 0.1 x the maximum): the proxy keeps, per collection and hour of its clock, the most RU charged in one
    second; `hourly_bill` applies the floor."""
    with proxy_of(secantus_uri, autoscale_max_ru_per_second=1_000, clock=clock) as proxy:
        db = next(app_database(proxy, monkeypatch))
        actions = db[schema.BOTTLE_ACTIONS]
        name = f"{db.name}.{schema.BOTTLE_ACTIONS}"
        clock.now = 7_200.5  # hour 2
        charged = []
        for n in range(3):
            actions.insert_one(action("bottle-1", n))
            charged.append(last_charge(db))
        clock.now += 1
        actions.insert_one(action("bottle-1", 3))
        clock.now += 3_600  # hour 3
        actions.find_one({"bottle_id": "bottle-1"})
        read = last_charge(db)
        peaks = dict(proxy.metered.hourly_peak_ru[name])
        bill = proxy.hourly_bill(db.name, schema.BOTTLE_ACTIONS)

    assert peaks[2] == pytest.approx(sum(charged))
    assert peaks[3] == pytest.approx(read)
    assert bill[2] == pytest.approx(100.0)  # a tenth of the 1,000 maximum: more than the hour's ~15 RU/s
    assert proxy.metered.peak_ru_per_second(name) == max(peaks.values())


MERGE = "https://learn.microsoft.com/azure/cosmos-db/merge"


def test_a_merge_joins_two_partitions_and_refuses_their_tokens_and_start_times(secantus_uri, clock, monkeypatch):
    """MERGE (applies to NoSQL and MongoDB): "Merging partitions in Azure Cosmos DB (preview) allows you to reduce
    the number of physical partitions used for your container in place." ... "After a container has been merged,
    it isn't possible to read the change feed with start time." What a merged partition's parents' tokens do is
    not documented: refused with code 280 as a split parent's is (the least forgiving). Merges run when an
    operator asks (`merge()`), never on their own."""
    with proxy_of(secantus_uri, initial_partitions=2, clock=clock) as proxy:
        db = next(app_database(proxy, monkeypatch))
        actions = db[schema.BOTTLE_ACTIONS]
        since = db.client.admin.command("hello")["operationTime"]
        parents = cosmos_seam.change_stream_tokens(db, schema.BOTTLE_ACTIONS) or []
        left, right = proxy.partition_map(db.name, schema.BOTTLE_ACTIONS)

        merge = proxy.merge(db.name, schema.BOTTLE_ACTIONS)
        actions.insert_many([action(f"bottle-{n}") for n in range(6)])
        refused = []
        for token in parents:
            with pytest.raises(OperationFailure, match="PartitionKeyRangeGone") as gone:
                drain(watch(db, token))
            refused.append(gone.value.code)
        with pytest.raises(OperationFailure, match="start time") as from_then:
            db.command(
                {
                    "customAction": "GetChangeStreamTokens",
                    "collection": schema.BOTTLE_ACTIONS,
                    "startAtOperationTime": since,
                }
            )
        [token] = cosmos_seam.change_stream_tokens(db, schema.BOTTLE_ACTIONS) or []
        stream = watch(db, token)
        actions.insert_many([action(f"bottle-after-{n}") for n in range(6)])
        read = sorted(c["fullDocument"]["_id"] for c in drain(stream))
        [merged] = proxy.partition_map(db.name, schema.BOTTLE_ACTIONS)

    assert (merged.low, merged.high) == (left.low, right.high) == (0, TOP)
    assert merge.child.merged_from == (left.id, right.id)
    assert refused == [280, 280]
    assert from_then.value.code == 2
    assert read == sorted(f"bottle-after-{n}|0" for n in range(6))  # the merged partition's token reads both halves


def test_a_merge_keeps_the_partitions_storage_and_throughput_force(secantus_uri, clock, monkeypatch):
    """MERGE: "the same target partition count based on the RU/s set at the time the merge was triggered": a
    collection whose autoscale maximum (LIMITS: 10,000 RU/s a partition) forces its partitions cannot merge them,
    and an unsharded collection has nothing to merge."""
    with proxy_of(secantus_uri, autoscale_max_ru_per_second=20_000, clock=clock) as proxy:
        db = next(app_database(proxy, monkeypatch))
        with pytest.raises(ValueError, match="needs 2 partitions"):
            proxy.merge(db.name, schema.BOTTLE_ACTIONS)
        with pytest.raises(ValueError, match="nothing to merge"):
            proxy.merge(db.name, schema.LEASES)
        assert len(proxy.partition_map(db.name, schema.BOTTLE_ACTIONS)) == 2


# --- what Cosmos DB for MongoDB 6.0 does not support -----------------------------------------------------------

FEATURES_60 = "https://learn.microsoft.com/azure/cosmos-db/mongodb/feature-support-60"  # the server version deployed


def refused_code(call: Any, says: str) -> int:
    with pytest.raises(OperationFailure, match=says) as refused:
        call()
    return int(refused.value.code or 0)


def test_query_operators_cosmos_db_does_not_support_are_refused_wherever_a_filter_is(cosmos, cosmos_db):
    """FEATURES_60, "Azure Cosmos DB for MongoDB (6.0 server version): Supported features and syntax": "Bitwise
    update operator | `bit` Yes | `bitsAllSet` No | `bitsAnySet` No | `bitsAllClear` No | `bitsAnyClear` No";
    "Evaluation query operators | `jsonSchema` No | `text` No (Not supported. Use `$regex` instead.) | `where` No".
    ERROR_CODES: "115 | CommandNotSupported | The request attempted isn't supported." A filter naming one is
    refused in a find, a count, an aggregate's `$match`, an update and a delete alike; `$bit` (the heartbeat ring's
    update) is fine."""
    actions = cosmos_db[schema.BOTTLE_ACTIONS]
    actions.insert_one(action("bottle-1", flags=5))
    schema_filter = {"$jsonSchema": {"required": ["bottle_id"]}}
    codes = [
        refused_code(lambda: actions.find_one({"flags": {"$bitsAllSet": 1}}), r"\$bitsAllSet is not supported"),
        refused_code(lambda: actions.count_documents({"flags": {"$bitsAnyClear": [1]}}), r"\$bitsAnyClear"),
        refused_code(lambda: actions.find_one(schema_filter), r"\$jsonSchema is not supported"),
        refused_code(lambda: list(actions.aggregate([{"$match": {"$or": [schema_filter]}}])), r"\$jsonSchema"),
        refused_code(lambda: actions.update_many(schema_filter, {"$set": {"seen": 1}}), r"\$jsonSchema"),
        refused_code(lambda: actions.delete_many({"$where": "this.flags > 1"}), r"\$where is not supported"),
    ]
    actions.update_one({"bottle_id": "bottle-1", "_id": "bottle-1|0"}, {"$bit": {"flags": {"or": 2}}})

    assert codes == [115] * 6
    assert actions.find_one({"bottle_id": "bottle-1"}, {"_id": 0, "flags": 1}) == {"flags": 7}  # nothing else ran


def test_sparse_and_non_unique_partial_indexes_are_refused(cosmos, cosmos_db):
    """FEATURES_60, "Index properties": "`Partial` | Supported only for unique indexes", "`Case Insensitive` | No",
    "`Sparse` | No"; "Indexes": "`Text Index` | No", "`2d Index` | No", "`Hashed Index` | No". ERROR_CODES: "67 |
    CannotCreateIndex | The request to create an index can't be completed." A unique partial index (on an empty
    collection, led by the shard key: MONGO_INDEXING) is created."""
    actions = cosmos_db[schema.BOTTLE_ACTIONS]
    declared = set(actions.index_information())
    codes = [
        refused_code(lambda: actions.create_index([("note", 1)], sparse=True), "sparse indexes are not supported"),
        refused_code(
            lambda: actions.create_index([("note", 1)], partialFilterExpression={"note": {"$exists": True}}),
            "partial indexes are supported only for unique indexes",
        ),
        refused_code(lambda: actions.create_index([("note", "text")]), "text indexes are not supported"),
        refused_code(lambda: actions.create_index([("note", "hashed")]), "hashed indexes are not supported"),
        refused_code(
            lambda: actions.create_index([("note", 1)], collation={"locale": "en", "strength": 2}), "case insensitive"
        ),
    ]
    actions.create_index(
        [("bottle_id", 1), ("note", 1)],
        unique=True,
        partialFilterExpression={"note": {"$exists": True}},
        name="unique_partial",
    )

    assert codes == [67] * 5
    assert set(actions.index_information()) == {*declared, "unique_partial"}


def test_commands_cosmos_db_does_not_support_are_refused_and_change_nothing(cosmos, cosmos_db):
    """FEATURES_60, "Administration commands": "`collMod` | No", "`renameCollection` | No" (and "`killOp` | No",
    "`convertToCapped` | No"); "Diagnostics commands": "`serverStatus` | No"; "Aggregation commands": "`mapReduce`
    | No". ERROR_CODES: "115 | CommandNotSupported | The request attempted isn't supported.\""""
    actions = cosmos_db[schema.BOTTLE_ACTIONS]
    actions.insert_one(action("bottle-1"))
    admin = cosmos_db.client.admin
    full_name = f"{cosmos_db.name}.{schema.BOTTLE_ACTIONS}"
    codes = [
        refused_code(lambda: cosmos_db.command({"collMod": schema.BOTTLE_ACTIONS, "validator": {}}), "collMod"),
        refused_code(
            lambda: admin.command({"renameCollection": full_name, "to": f"{cosmos_db.name}.renamed"}),
            "Command renameCollection is not supported",
        ),
        refused_code(lambda: actions.rename("renamed_too"), "renameCollection"),
        refused_code(lambda: cosmos_db.command({"serverStatus": 1}), "serverStatus"),
        refused_code(
            lambda: cosmos_db.command(
                {"mapReduce": schema.BOTTLE_ACTIONS, "map": "function(){}", "reduce": "function(){}", "out": "x"}
            ),
            "mapReduce",
        ),
    ]

    assert codes == [115] * 5
    assert schema.BOTTLE_ACTIONS in cosmos_db.list_collection_names()
    assert {"renamed", "renamed_too"}.isdisjoint(cosmos_db.list_collection_names())
    assert actions.count_documents({}) == 1


def test_a_lookup_with_let_and_pipeline_is_refused_as_let_is_not_supported(cosmos, cosmos_db):
    """FEATURES_60, "Aggregation stages": "`lookup` | Partial" ... "The `$lookup` aggregation does not yet support
    the uncorrelated subqueries feature that's introduced in server version 3.6. If you attempt to use the
    `$lookup` operator with the `let` and `pipeline` fields, an error message that indicates that *`let` is not
    supported* appears." Its other stages marked No (`graphLookup`, `bucket`, ...) are refused too, inside a
    `$facet` as well; a `$lookup` by `localField` and `foreignField` runs."""
    actions = cosmos_db[schema.BOTTLE_ACTIONS]
    actions.insert_one(action("bottle-1"))
    cosmos_db[schema.BOTTLES].insert_one({"_id": "bottle-1", "bottle_id": "bottle-1", "user_id": USER})
    uncorrelated = {"from": schema.BOTTLES, "let": {"b": "$bottle_id"}, "pipeline": [], "as": "bottle"}
    by_field = {"from": schema.BOTTLES, "localField": "bottle_id", "foreignField": "_id", "as": "bottle"}
    codes = [
        refused_code(lambda: list(actions.aggregate([{"$lookup": uncorrelated}])), "let is not supported"),
        refused_code(lambda: list(actions.aggregate([{"$lookup": {**by_field, "pipeline": [{"$match": {}}]}}])), "let"),
        refused_code(
            lambda: list(actions.aggregate([{"$facet": {"n": [{"$bucketAuto": {"groupBy": "$n", "buckets": 2}}]}}])),
            r"\$bucketAuto is not supported",
        ),
    ]
    [joined] = actions.aggregate([{"$lookup": by_field}])

    assert codes == [115] * 3
    assert [b["user_id"] for b in joined["bottle"]] == [USER]


def test_a_document_over_2_mb_is_refused_and_stores_nothing_unless_the_16_mb_capability_is_on(
    secantus_uri, clock, monkeypatch
):
    """FEATURES_60, "Data types": "16-MB document support raises the size limit for your documents from 2 MB to 16
    MB ... To enable 16-MB document support, ... add the `EnableMongo16MBDocumentSupport` capability". LIMITS:
    "Maximum size of an item | 2 MB (UTF-8 length of JSON representation)"; "Large document sizes up to 16 MB
    require feature enablement in the Azure portal." The deployment does not enable it (infra/modules/cosmos.bicep):
    a 3 MB insert, a replacement to 3 MB and an update growing a document past 2 MB are refused, nothing written;
    with `large_documents` (the capability) the 3 MB insert is stored."""
    big = "x" * (3 * 1024 * 1024)
    with proxy_of(secantus_uri, clock=clock) as proxy:
        db = next(app_database(proxy, monkeypatch))
        actions = db[schema.BOTTLE_ACTIONS]
        actions.insert_one(action("bottle-1", note="y" * (1536 * 1024)))  # 1.5 MB: under the limit
        key = {"bottle_id": "bottle-1", "_id": "bottle-1|0"}
        messages = []
        for write in (
            lambda: actions.insert_one(action("bottle-2", note=big)),
            lambda: actions.replace_one(key, {**action("bottle-1"), "note": big}),
            lambda: actions.update_one(key, {"$set": {"more": "z" * (768 * 1024)}}),
        ):
            with pytest.raises(OperationFailure, match="RequestEntityTooLarge") as refused:
                write()
            messages.append(str(refused.value))
        stored = [len(d.get("note", "")) for d in actions.find({}, {"note": 1, "more": 1}) if "more" not in d]
    with proxy_of(secantus_uri, clock=clock, large_documents=True) as proxy:
        large = next(app_database(proxy, monkeypatch))
        large[schema.BOTTLE_ACTIONS].insert_one(action("bottle-2", note=big))

        assert large[schema.BOTTLE_ACTIONS].count_documents({}) == 1
    assert stored == [1536 * 1024]  # the first document only, as it was
    assert all("over the 2 MB a document may hold" in message for message in messages)
    assert "document 0 of the insert would be 3,145,788 bytes" in messages[0]
