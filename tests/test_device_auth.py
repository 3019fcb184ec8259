"""Device authentication: the key, unknown bottles, key rotation."""

import threading
from typing import Any

import pytest

from shared.device_keys import hash_key
from shared.heartbeat_document import KEY, key_digest
from shared.ingestion import authentication
from shared.store import schema
from tests.api import ago, closed, heartbeat, opened, post_events, provisioned, put_bottle
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
