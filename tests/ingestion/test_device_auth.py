"""Device authentication: the key, unknown bottles, key rotation."""

import logging
import threading
from datetime import datetime
from typing import Any

import pytest

from shared.bottles import provisioning
from shared.devices.device_keys import hash_key
from shared.devices.heartbeat_document import KEY, KEY_VERSION, key_digest
from shared.ingestion import authentication
from shared.instants import utc_now
from shared.store import schema
from shared.store.retries import THROTTLED_SPREAD_S
from tests.api import SPEC, ago, closed, heartbeat, opened, post_events, provisioned, put_bottle
from tests.heartbeats import counted
from tools.local_host import invoking_thread_name

UNAUTHORIZED = {"error": "unknown bottle or wrong device key", "details": []}


@pytest.mark.parametrize(
    ("bottle_id", "key"),
    [("bottle-1", None), ("bottle-1", ""), ("bottle-1", "not-the-key"), ("bottle-1", "k" * 1000), ("ghost", "any")],
    ids=["missing key", "empty key", "wrong key", "oversized key", "unknown bottle"],
)
def test_unauthorised_requests_get_the_same_401_and_store_nothing(db, bottle_id, key):
    provisioned("bottle-1")

    response = post_events(bottle_id, key, heartbeat(ago(minutes=1)))

    assert (response.status, response.body) == (401, UNAUTHORIZED)
    assert counted(db) == []


def test_a_missing_key_is_401_before_the_body_is_read(db):
    response = post_events("ghost", None, raw=b"{not json")
    assert (response.status, response.body) == (401, UNAUTHORIZED)


def test_validation_answers_the_same_for_known_and_unknown_bottles(db):
    # The body is checked before anything is read, so a 400 says nothing about the registry.
    provisioned("bottle-1")
    known = post_events("bottle-1", "wrong", raw=b"{not json")
    unknown = post_events("ghost", "wrong", raw=b"{not json")
    assert known.status == unknown.status == 400
    assert known.body == unknown.body


@pytest.mark.parametrize("mixed", [False, True], ids=["heartbeats only", "with an action"])
def test_a_wrong_key_stores_nothing_of_a_batch(db, mixed):
    provisioned("bottle-1")
    events = [heartbeat(ago(minutes=3)), heartbeat(ago(minutes=2))]
    if mixed:
        events.append(opened(ago(minutes=1)))
    response = post_events("bottle-1", "wrong", {"events": events})
    assert (response.status, response.body) == (401, UNAUTHORIZED)
    assert counted(db) == []
    assert db[schema.BOTTLE_ACTIONS].count_documents({}) == 0


def test_a_rotated_key_is_refused_for_heartbeats_at_once(db):
    old_key = provisioned("bottle-1")
    assert post_events("bottle-1", old_key, opened(ago(minutes=5))).status == 202
    new_hash = hash_key("the-new-key")
    db[schema.BOTTLES].update_one({"_id": "bottle-1"}, {"$set": {"key_hash": new_hash}})  # another worker
    db[schema.BOTTLE_HEARTBEATS].update_one({"_id": "bottle-1"}, {"$set": {KEY: key_digest(new_hash)}})

    response = post_events("bottle-1", old_key, {"events": [heartbeat(ago(minutes=1)), closed(ago(minutes=1))]})

    assert response.status == 401
    assert db[schema.BOTTLE_ACTIONS].count_documents({}) == 1


def test_a_key_only_opens_its_own_bottle(db):
    key_1 = provisioned("bottle-1")
    provisioned("bottle-2")
    assert post_events("bottle-2", key_1, heartbeat(ago(minutes=1))).status == 401


def test_rotation_issues_a_new_key_and_the_old_one_stops_working(db):
    old_key = provisioned("bottle-1")
    assert post_events("bottle-1", old_key, heartbeat(ago(minutes=3))).status == 202

    rotated = put_bottle("bottle-1", rotate_key=True)

    assert rotated.status == 200
    new_key = rotated.body["device_key"]
    assert new_key != old_key
    assert post_events("bottle-1", old_key, heartbeat(ago(minutes=2))).status == 401
    assert post_events("bottle-1", new_key, heartbeat(ago(minutes=1))).status == 202


def test_each_rotation_stores_when_it_happened_and_adds_one_to_the_key_version(db):
    """The registry records each rotation: `key_rotated_at` (when the bottle last got a new key, for an operator
    tracing a key) and `key_version` one more than before (docs/ingestion.md, "One valid key")."""
    provisioned("bottle-1")
    assert stored_key_fields(db) == (1, None)

    for version in (2, 3):
        before = utc_now().replace(microsecond=0)
        assert put_bottle("bottle-1", rotate_key=True).status == 200
        stored_version, rotated_at = stored_key_fields(db)
        assert stored_version == version
        assert rotated_at is not None
        assert before <= rotated_at <= utc_now()


def stored_key_fields(db: Any) -> tuple[int, datetime | None]:
    bottle = db[schema.BOTTLES].find_one({"_id": "bottle-1"})
    return bottle["key_version"], bottle.get("key_rotated_at")


def test_a_bottle_lost_from_the_store_during_its_rotation_is_a_503_to_retry_and_logged_saying_so(
    db, monkeypatch, caplog
):
    """Bottles are never deleted: a rotation that finds none lost it to the store (a restore, a failover). The
    device's PUT gets a 503 with a short Retry-After, and the operator's line says where it happened."""
    provisioned("bottle-1")
    real_rotate = provisioning._rotate

    def lost_first(rotating_db: Any, bottle_id: str, *args: Any, **kwargs: Any) -> Any:
        rotating_db[schema.BOTTLES].delete_one({"_id": bottle_id})
        return real_rotate(rotating_db, bottle_id, *args, **kwargs)

    monkeypatch.setattr(provisioning, "_rotate", lost_first)

    with caplog.at_level(logging.WARNING):
        response = put_bottle("bottle-1", rotate_key=True)

    assert response.status == 503
    assert response.body == {"error": "the database is busy or unavailable; retry later", "details": []}
    # A conflict's Retry-After (shared/store/retries.py): a second, plus up to the spread.
    assert 1 <= int(response.headers["Retry-After"]) <= 1 + THROTTLED_SPREAD_S
    logged = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "provision_bottle store unavailable: the bottle was not found during its key rotation; retry" in logged, (
        logged
    )


def test_a_bottle_lost_from_the_store_after_its_insert_met_it_is_a_503_to_retry_and_logged_saying_so(
    db, monkeypatch, caplog
):
    """A PUT's insert meets the bottle already there (a duplicate `_id`: a racing create landed after the PUT read
    no bottle), then its update finds none: the store lost it in between. The same 503 with a short Retry-After,
    and a line saying where."""
    real_insert = provisioning._insert_new

    def lost_after_the_insert(inserting_db: Any, bottle: Any) -> bool:
        racing_create = dict(bottle, key_hash="a racing create's")
        assert real_insert(inserting_db, racing_create)
        inserted = real_insert(inserting_db, bottle)
        inserting_db[schema.BOTTLES].delete_one({"_id": bottle["_id"]})
        return inserted

    monkeypatch.setattr(provisioning, "_insert_new", lost_after_the_insert)

    with caplog.at_level(logging.WARNING):
        response = put_bottle("bottle-1")

    assert response.status == 503
    assert response.body == {"error": "the database is busy or unavailable; retry later", "details": []}
    assert 1 <= int(response.headers["Retry-After"]) <= 1 + THROTTLED_SPREAD_S
    logged = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "provision_bottle store unavailable: the bottle was not found after its insert; retry" in logged, logged


def test_a_bottle_lost_from_the_store_after_its_put_read_it_is_a_503_to_retry_and_logged_saying_so(
    db, monkeypatch, caplog
):
    """A PUT reads the bottle (to tell a change from a retry), then its update finds none: the store lost it in
    between. A 503 with a short Retry-After, and a line saying where."""
    provisioned("bottle-1")
    real_compare = provisioning._registry_unchanged

    def lost_after_the_read(stored: Any, registry: Any) -> bool:
        db[schema.BOTTLES].delete_one({"_id": "bottle-1"})
        return real_compare(stored, registry)

    monkeypatch.setattr(provisioning, "_registry_unchanged", lost_after_the_read)

    with caplog.at_level(logging.WARNING):
        response = put_bottle("bottle-1", {**SPEC, "medication": "Tri-ox"})

    assert response.status == 503
    assert 1 <= int(response.headers["Retry-After"]) <= 1 + THROTTLED_SPREAD_S
    logged = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "provision_bottle store unavailable: the bottle was not found after its read; retry" in logged, logged


def test_a_bottle_stored_before_key_versions_keeps_its_key_and_takes_its_next_rotation(db):
    """A bottle of the layout before key versions (no `key_version`, its heartbeat document no `kv`): a plain PUT
    keeps its key working, and a rotation after it reaches the heartbeats (version 1 is newer than the copy's)."""
    old_key = provisioned("bottle-1")
    db[schema.BOTTLES].update_one({"_id": "bottle-1"}, {"$unset": {"key_version": ""}})
    db[schema.BOTTLE_HEARTBEATS].update_one({"_id": "bottle-1"}, {"$unset": {KEY_VERSION: ""}})

    assert put_bottle("bottle-1").status == 200
    assert post_events("bottle-1", old_key, heartbeat(ago(minutes=3))).status == 202
    rotated = put_bottle("bottle-1", rotate_key=True)

    assert rotated.status == 200
    assert post_events("bottle-1", rotated.body["device_key"], heartbeat(ago(minutes=2))).status == 202
    assert post_events("bottle-1", old_key, heartbeat(ago(minutes=1))).status == 401


def test_a_heartbeat_document_whose_upsert_never_lands_is_a_503_to_retry_and_logged_saying_so(
    mock_db, monkeypatch, caplog
):
    """Some stores answer an upsert that raced a create with no document; the PUT tries again, a few rounds, then
    answers a 503 with a short Retry-After and logs which document kept changing."""
    real = type(mock_db[schema.BOTTLE_HEARTBEATS]).find_one_and_update

    def answers_nothing_for_heartbeat_upserts(collection: Any, *args: Any, **kwargs: Any) -> Any:
        found = real(collection, *args, **kwargs)
        return None if collection.name == schema.BOTTLE_HEARTBEATS and kwargs.get("upsert") else found

    monkeypatch.setattr(
        type(mock_db[schema.BOTTLE_HEARTBEATS]), "find_one_and_update", answers_nothing_for_heartbeat_upserts
    )

    with caplog.at_level(logging.WARNING):
        response = put_bottle("bottle-1")

    assert response.status == 503
    assert 1 <= int(response.headers["Retry-After"]) <= 1 + THROTTLED_SPREAD_S
    logged = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert (
        "provision_bottle store unavailable: the heartbeat document kept changing during the write; retry" in logged
    ), logged


def test_a_rotation_whose_copy_lands_after_a_newer_rotation_s_cannot_put_its_key_back(db, monkeypatch):
    """This PUT rotates (version 2) and finds the heartbeat document's copy older; before its copy lands, another
    worker's rotation (version 3) lands with its copy. Only a newer key replaces a copy, so the newest key works
    for heartbeats and the one this PUT answered, rotated out already, is refused."""
    provisioned("bottle-1")
    real_copy = provisioning._copy_key

    def newer_rotation_first(collection: Any, bottle_id: str, *args: Any, **kwargs: Any) -> None:
        rotate_elsewhere(db, bottle_id, "the-newest-key", version=3)
        real_copy(collection, bottle_id, *args, **kwargs)

    monkeypatch.setattr(provisioning, "_copy_key", newer_rotation_first)
    rotated = put_bottle("bottle-1", rotate_key=True)
    monkeypatch.undo()

    assert rotated.status == 200
    assert post_events("bottle-1", "the-newest-key", heartbeat(ago(minutes=2))).status == 202
    assert post_events("bottle-1", rotated.body["device_key"], heartbeat(ago(minutes=1))).status == 401


def test_a_heartbeat_document_of_the_layout_without_key_versions_takes_the_next_put_s_key(db):
    """A heartbeat document written before keys had versions has `k` but no `kv`: the next PUT replaces its key,
    whatever version the bottle's key is at, so a rotation reaches the device's heartbeats."""
    old_key = provisioned("bottle-1")
    db[schema.BOTTLE_HEARTBEATS].update_one({"_id": "bottle-1"}, {"$unset": {KEY_VERSION: ""}})

    rotated = put_bottle("bottle-1", rotate_key=True)

    assert rotated.status == 200
    assert post_events("bottle-1", rotated.body["device_key"], heartbeat(ago(minutes=2))).status == 202
    assert post_events("bottle-1", old_key, heartbeat(ago(minutes=1))).status == 401


def rotate_elsewhere(db: Any, bottle_id: str, key: str, *, version: int) -> None:
    """Another worker's rotation, as it leaves the store: the registry's key and version, and their copy."""
    key_hash = hash_key(key)
    db[schema.BOTTLES].update_one({"_id": bottle_id}, {"$set": {"key_hash": key_hash, "key_version": version}})
    db[schema.BOTTLE_HEARTBEATS].update_one(
        {"_id": bottle_id}, {"$set": {KEY: key_digest(key_hash), KEY_VERSION: version}}
    )


def test_a_key_rotated_elsewhere_is_refused_for_actions_at_once(db):
    """Another worker's rotation writes only the database; this one served the old key a moment before."""
    old_key = provisioned("bottle-1")
    assert post_events("bottle-1", old_key, opened(ago(minutes=4))).status == 202
    new_hash = hash_key("the-new-key")
    db[schema.BOTTLES].update_one({"_id": "bottle-1"}, {"$set": {"key_hash": new_hash}})

    assert post_events("bottle-1", old_key, closed(ago(minutes=3), taken=0)).status == 401
    assert post_events("bottle-1", "the-new-key", closed(ago(minutes=2), taken=0)).status == 202
    assert db[schema.BOTTLE_ACTIONS].count_documents({}) == 2


def test_a_request_in_flight_during_a_rotation_leaves_the_revoked_key_refused(db, monkeypatch):
    """A request reads the bottle (old key) just before a rotation, and finishes after the rotation answered:
    it was sent before, so it is stored, and nothing it read outlives the rotation."""
    old_key = provisioned("bottle-1")
    read, go = threading.Event(), threading.Event()
    real_read = authentication.read_bottle  # type: ignore[attr-defined]

    def read_bottle(*args: Any) -> Any:
        found = real_read(*args)
        if invoking_thread_name() == "in flight":
            read.set()
            assert go.wait(timeout=30)
        return found

    monkeypatch.setattr(authentication, "read_bottle", read_bottle)
    answers: list[int] = []
    in_flight = threading.Thread(
        target=lambda: answers.append(post_events("bottle-1", old_key, opened(ago(minutes=3))).status),
        name="in flight",
    )
    in_flight.start()
    assert read.wait(timeout=30)
    new_key = put_bottle("bottle-1", rotate_key=True).body["device_key"]
    go.set()
    in_flight.join(timeout=30)

    assert answers == [202]  # sent before the rotation answered
    assert post_events("bottle-1", old_key, opened(ago(minutes=2))).status == 401
    assert post_events("bottle-1", new_key, closed(ago(minutes=1))).status == 202
