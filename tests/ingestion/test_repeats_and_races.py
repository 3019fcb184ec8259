"""Idempotency under reuse and races: a reused event_id changes nothing, concurrent creates issue one key, an
opened and a closed at the same instant end the same whatever their order, and an unknown bottle looks like
a wrong key in every way a client can measure."""

import threading
from typing import Any

import pytest

from shared.devices import device_keys
from shared.ingestion import authentication, storing
from shared.reports.documents import action_parts
from shared.store import schema
from tests.api import ago, closed, get_bottle, heartbeat, iso, opened, post_events, provisioned, put_bottle
from tests.heartbeats import counted


def status(bottle_id: str = "bottle-1") -> dict[str, Any]:
    return dict(get_bottle(bottle_id).body["status"])


# --- an event_id reused for another event -------------------------------------------------------------------


def test_an_event_id_reused_for_a_different_event_changes_nothing(db):
    key = provisioned()
    first = opened(ago(minutes=10), event_id="e-1")
    assert post_events("bottle-1", key, first).body == {"stored": 1, "duplicates": 0, "expired": 0}
    before = (status(), list(db[schema.BOTTLE_ACTIONS].find()), db[schema.BOTTLES].find_one({"_id": "bottle-1"}))

    reuse = closed(ago(minutes=2), taken=2, event_id="e-1")  # later, a dose: it would move status and doses
    response = post_events("bottle-1", key, reuse)

    assert (response.status, response.body) == (202, {"stored": 0, "duplicates": 1, "expired": 0})
    after = (status(), list(db[schema.BOTTLE_ACTIONS].find()), db[schema.BOTTLES].find_one({"_id": "bottle-1"}))
    assert after == before
    assert status()["last_action"] == "opened"
    assert status()["last_dose_time"] is None


def test_a_true_retry_still_repairs_the_status_a_failure_left_behind(db):
    key = provisioned()
    event = closed(ago(minutes=5), event_id="c-9")
    post_events("bottle-1", key, event)
    # As if the request had died after storing the action and before updating the status.
    db[schema.BOTTLES].update_one(
        {"_id": "bottle-1"}, {"$unset": {"last_action": "", "last_action_time": "", "last_dose_time": ""}}
    )

    assert post_events("bottle-1", key, event).body == {"stored": 0, "duplicates": 1, "expired": 0}
    assert status()["last_action"] == "closed"
    assert status()["last_dose_time"] is not None


def test_an_event_id_repeated_with_other_content_in_one_request_is_400(db):
    key = provisioned()
    response = post_events(
        "bottle-1",
        key,
        {
            "events": [
                heartbeat(ago(minutes=3)),
                opened(ago(minutes=2), event_id="x"),
                closed(ago(minutes=1), event_id="x"),
            ]
        },
    )

    assert response.status == 400
    assert [(d["index"], d["field"]) for d in response.body["details"]] == [(2, "event_id")]
    assert db[schema.BOTTLE_ACTIONS].count_documents({}) == 0
    assert counted(db) == []


def test_the_same_event_twice_in_one_request_is_stored_once(db):
    key = provisioned()
    event = opened(ago(minutes=2), event_id="x")
    assert post_events("bottle-1", key, {"events": [event, event]}).body == {"stored": 1, "duplicates": 1, "expired": 0}


# --- concurrent creates ------------------------------------------------------------------------------------------


@pytest.mark.integration
def test_concurrent_creates_of_one_bottle_issue_exactly_one_working_key(real_db):
    results: list[Any] = []
    start = threading.Barrier(8)

    def create() -> None:
        start.wait()
        results.append(put_bottle("bottle-1"))

    threads = [threading.Thread(target=create) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    created = [r for r in results if r.status == 201]
    assert len(created) == 1
    assert sorted(r.status for r in results) == [200] * 7 + [201]
    assert all("device_key" not in r.body for r in results if r.status == 200)
    key = created[0].body["device_key"]
    assert post_events("bottle-1", key, heartbeat(ago(minutes=2))).status == 202  # authenticated in its write
    assert post_events("bottle-1", key, opened(ago(minutes=1))).status == 202  # authenticated by the registry


def test_a_create_whose_answer_was_lost_is_still_a_create_with_its_key(db, monkeypatch):
    """The insert was applied but its answer lost; the retry sees a duplicate key, which is its own insert."""
    from pymongo.collection import Collection
    from pymongo.errors import AutoReconnect

    real_insert = Collection.insert_one
    lost = {"once": True}

    def insert_then_lose_the_answer(self: Any, document: Any, *args: Any, **kwargs: Any) -> Any:
        result = real_insert(self, document, *args, **kwargs)
        if self.name == schema.BOTTLES and lost.pop("once", False):
            raise AutoReconnect("connection closed before the reply")
        return result

    monkeypatch.setattr(Collection, "insert_one", insert_then_lose_the_answer)
    if type(db).__module__.startswith("mongomock"):
        import mongomock

        real_insert = mongomock.Collection.insert_one
        monkeypatch.setattr(mongomock.Collection, "insert_one", insert_then_lose_the_answer)

    response = put_bottle("bottle-1")

    assert response.status == 201
    assert post_events("bottle-1", response.body["device_key"], opened(ago(minutes=1))).status == 202


# --- opened and closed at the same instant --------------------------------------------------------------------


@pytest.mark.parametrize("taken", [1, 0], ids=["a dose", "no dose"])
@pytest.mark.parametrize("order", ["opened first", "closed first"])
def test_an_open_and_a_close_at_one_instant_end_closed_in_either_order(db, order, taken):
    key = provisioned()
    moment = ago(minutes=3)
    events = [opened(moment, event_id="o"), closed(moment, event_id="c", taken=taken)]
    for event in events if order == "opened first" else events[::-1]:
        assert post_events("bottle-1", key, event).status == 202

    assert status()["last_action"] == "closed"
    assert status()["last_action_time"] == iso(moment).replace("Z", ".000Z")
    assert status()["open_since"] is None
    # The reports read the same order: the hour's last readings are the close's.
    [part] = action_parts(db[schema.BOTTLE_ACTIONS].find()).values()
    assert (part.last_number_of_pills, part.last_mass_of_contents) == (29, 14.5)


# --- a bottle that keeps changing -------------------------------------------------------------------------------


def test_a_bottle_that_keeps_changing_answers_503_with_a_jittered_retry_after(db, monkeypatch, caplog):
    """Every read of the bottle is followed by another writer's change, so each dose's guarded status write loses
    every round: 503, and the devices that met it are not all told to come back in the same second; the log says
    which write kept losing."""
    key = provisioned()
    real = authentication.read_bottle  # type: ignore[attr-defined]

    def read_then_changed(*args: Any) -> Any:
        found = real(*args)
        db[schema.BOTTLES].update_one({"_id": "bottle-1"}, {"$inc": {"dose_seq": 1}})
        return found

    monkeypatch.setattr(authentication, "read_bottle", read_then_changed)
    monkeypatch.setattr(storing, "read_bottle", read_then_changed)
    answers = [post_events("bottle-1", key, closed(ago(minutes=5), event_id=f"c-{n}")) for n in range(20)]

    assert {a.status for a in answers} == {503}
    waits = {int(a.headers["Retry-After"]) for a in answers}
    assert min(waits) >= 1
    assert len(waits) > 1
    assert "the bottle's status kept changing during the write" in caplog.text


# --- unknown bottle versus wrong key ----------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("event", [heartbeat, opened], ids=["heartbeat", "opened"])
def test_an_unknown_bottle_and_a_wrong_key_take_the_same_steps(counted, monkeypatch, event):
    _db, counter = counted
    provisioned("bottle-1")
    comparisons: list[int] = []
    real_same_hash = device_keys.same_hash

    def counting(stored: str, presented: str) -> bool:
        comparisons.append(1)
        return real_same_hash(stored, presented)

    monkeypatch.setattr("shared.ingestion.authentication.same_hash", counting)
    observed = []
    for bottle_id, key in (("bottle-1", "not-its-key"), ("bottle-404", "not-its-key")):
        counter.reset()
        comparisons.clear()
        response = post_events(bottle_id, key, event(ago(minutes=1)))
        observed.append((response.status, response.body, counter.commands, len(comparisons)))

    wrong_key, unknown = observed
    assert wrong_key[:2] == (401, {"error": "unknown bottle or wrong device key", "details": []})
    assert unknown[:2] == wrong_key[:2]
    assert [name for name, _ in unknown[2]] == [name for name, _ in wrong_key[2]]  # the same commands
    assert unknown[3] == wrong_key[3]  # the same comparisons


def test_a_heartbeat_document_upsert_that_answers_no_document_is_tried_again(db, monkeypatch):
    """Under concurrent creates of one bottle, SecantusDB's upsert by findAndModify may answer no document (real
    MongoDB answers the document or a duplicate key): the PUT tries again and succeeds, never a 500."""
    collection_class = type(db[schema.BOTTLE_HEARTBEATS])  # pymongo's, or mongomock's
    real = collection_class.find_one_and_update
    answered = {"nothing": True}

    def first_answers_nothing(self: Any, *args: Any, **kwargs: Any) -> Any:
        found = real(self, *args, **kwargs)
        if self.name == schema.BOTTLE_HEARTBEATS and kwargs.get("upsert") and answered.pop("nothing", False):
            return None
        return found

    monkeypatch.setattr(collection_class, "find_one_and_update", first_answers_nothing)

    created = put_bottle("bottle-1")

    assert created.status == 201, created.body
    assert not answered  # the first answer was nothing
    assert post_events("bottle-1", created.body["device_key"], heartbeat(ago(minutes=2))).status == 202
