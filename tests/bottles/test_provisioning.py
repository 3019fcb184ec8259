"""PUT and GET /api/bottles/{bottle_id}: provisioning, validation, keys and the status view."""

from datetime import timedelta
from typing import Any

import pytest

from shared.bottles import provisioning
from shared.instants import format_instant, set_clock
from shared.store import schema
from shared.store.partitioning import bucket_of
from shared.store.retries import StoreUnavailable
from tests.api import SPEC, ago, closed, get_bottle, heartbeat, opened, post_events, provisioned, put_bottle


def test_create_returns_201_with_a_key_that_is_stored_only_as_a_hash(db):
    response = put_bottle("bottle-1")

    assert response.status == 201
    key = response.body.pop("device_key")
    assert len(key) >= 40
    assert response.body | {"provisioned_at": None, "updated_at": None} == {
        "bottle_id": "bottle-1",
        "user_id": "willcross1024",
        "medication": "Cordrazine",
        "schedule": {"times": ["08:00", "20:00"], "timezone": "Europe/Rome"},
        "grace_minutes": 60,
        "provisioned_at": None,
        "updated_at": None,
    }
    stored = db[schema.BOTTLES].find_one({"_id": "bottle-1"})
    assert key not in str(stored)
    assert stored["key_hash"] != key


def test_update_returns_200_without_a_key_and_keeps_the_old_one(db):
    key = provisioned()
    response = put_bottle("bottle-1", {**SPEC, "medication": "Tri-ox", "schedule": {"every_hours": 8}})

    assert response.status == 200
    assert "device_key" not in response.body
    assert response.body["medication"] == "Tri-ox"
    assert response.body["schedule"] == {"every_hours": 8}
    assert post_events("bottle-1", key, heartbeat(ago(minutes=1))).status == 202


def test_an_update_reaches_devices_on_this_worker_at_once(db):
    key = provisioned()
    post_events("bottle-1", key, opened(ago(minutes=2), event_id="before"))
    put_bottle("bottle-1", {**SPEC, "medication": "Tri-ox"})
    post_events("bottle-1", key, opened(ago(minutes=1), event_id="after"))
    assert db[schema.BOTTLE_ACTIONS].find_one({"event_id": "after"})["medication"] == "Tri-ox"


def test_grace_defaults_to_60_minutes(db):
    spec = {k: v for k, v in SPEC.items() if k != "grace_minutes"}
    assert put_bottle("bottle-1", spec).body["grace_minutes"] == 60


def test_times_are_returned_sorted(db):
    spec = {**SPEC, "schedule": {"times": ["20:00", "08:00", "13:30"], "timezone": "America/New_York"}}
    assert put_bottle("bottle-1", spec).body["schedule"]["times"] == ["08:00", "13:30", "20:00"]


def test_medication_is_trimmed(db):
    assert put_bottle("bottle-1", {**SPEC, "medication": "  Cordrazine "}).body["medication"] == "Cordrazine"


def _with(**changes: Any) -> dict[str, Any]:
    return {**SPEC, **changes}


def _without(name: str) -> dict[str, Any]:
    return {k: v for k, v in SPEC.items() if k != name}


BAD_SPECS = {
    "user_id missing": (_without("user_id"), "user_id", "required"),
    "user_id with spaces": (_with(user_id="will cross"), "user_id", "1-64 characters"),
    "user_id too long": (_with(user_id="u" * 65), "user_id", "1-64 characters"),
    "medication empty": (_with(medication=""), "medication", "at least 1"),
    "medication blank": (_with(medication="   "), "medication", "at least 1"),
    "medication not a string": (_with(medication=5), "medication", "string"),
    "schedule missing": (_without("schedule"), "schedule", "required"),
    "zone not IANA": (_with(schedule={"times": ["08:00"], "timezone": "Mars/Olympus"}), "schedule.timezone", "IANA"),
    "time not HH:MM": (_with(schedule={"times": ["8am"], "timezone": "UTC"}), "schedule.times[0]", "HH:MM"),
    "time 24:00": (_with(schedule={"times": ["24:00"], "timezone": "UTC"}), "schedule.times[0]", "HH:MM"),
    "no times": (_with(schedule={"times": [], "timezone": "UTC"}), "schedule.times", "at least 1"),
    "repeated times": (_with(schedule={"times": ["08:00", "08:00"], "timezone": "UTC"}), "schedule.times", "repeat"),
    "timezone missing": (_with(schedule={"times": ["08:00"]}), "schedule.timezone", "required"),
    "every_hours 0": (_with(schedule={"every_hours": 0}), "schedule.every_hours", "greater than or equal to 1"),
    "every_hours 169": (_with(schedule={"every_hours": 169}), "schedule.every_hours", "less than or equal to 168"),
    "every_hours fractional": (_with(schedule={"every_hours": 1.5}), "schedule.every_hours", "integer"),
    "both kinds": (
        _with(schedule={"every_hours": 8, "times": ["08:00"], "timezone": "UTC"}),
        "schedule.times",
        "unknown field",
    ),
    "grace 0": (_with(grace_minutes=0), "grace_minutes", "greater than or equal to 1"),
    "grace as string": (_with(grace_minutes="60"), "grace_minutes", "integer"),
    "unknown field": (_with(colour="red"), "colour", "unknown field"),
}


@pytest.mark.parametrize(("spec", "field", "message"), BAD_SPECS.values(), ids=BAD_SPECS.keys())
def test_invalid_bottle_is_400_naming_the_field_and_stores_nothing(db, spec, field, message):
    response = put_bottle("bottle-1", spec)

    assert response.status == 400
    problems = [d for d in response.body["details"] if d["field"] == field]
    assert problems, response.body
    assert message in problems[0]["message"]
    assert db[schema.BOTTLES].count_documents({}) == 0


@pytest.mark.parametrize("raw", [b"", b"{", b"[]", b"\xff"], ids=["empty", "broken", "array", "binary"])
def test_malformed_provisioning_body_is_400(db, raw):
    response = put_bottle("bottle-1", raw=raw)
    assert response.status == 400
    assert db[schema.BOTTLES].count_documents({}) == 0


def test_oversize_provisioning_body_is_413(db):
    response = put_bottle("bottle-1", raw=b" " * (256 * 1024 + 1))
    assert response.status == 413


def test_bad_bottle_id_and_bad_rotate_flag_are_400(db):
    assert put_bottle("bad id").status == 400
    from functions.bottles import provision_bottle
    from tests.api import call_http

    response = call_http(
        provision_bottle, "PUT", "/api/bottles/b", {"bottle_id": "b"}, b"{}", params={"rotate_key": "maybe"}
    )
    assert response.status == 400
    assert response.body["details"] == [{"field": "rotate_key", "message": "must be true or false"}]


def test_get_unknown_bottle_is_404(db):
    response = get_bottle("nobody")
    assert response.status == 404
    assert response.body["error"] == "no bottle 'nobody'"


def test_get_shows_registry_and_live_status_but_never_the_key(db):
    spec = {**SPEC, "schedule": {"every_hours": 8}}
    key = provisioned("bottle-1", spec)
    t_beat, t_open, t_close, t_reopen = ago(minutes=50), ago(minutes=40), ago(minutes=39), ago(minutes=5)
    post_events(
        "bottle-1",
        key,
        {"events": [heartbeat(t_beat), opened(t_open), closed(t_close, taken=2), opened(t_reopen)]},
    )

    response = get_bottle("bottle-1")

    assert response.status == 200
    assert "device_key" not in response.body
    assert "key_hash" not in str(response.body)
    assert key not in str(response.body)
    assert response.body["user_id"] == "willcross1024"
    assert response.body["status"] == {
        "last_heartbeat": format_instant(t_beat),
        "last_action": "opened",
        "last_action_time": format_instant(t_reopen),
        "open_since": format_instant(t_reopen),
        "last_dose_time": format_instant(t_close),
        "next_dose_due": format_instant(t_close + timedelta(hours=8)),
    }


@pytest.mark.parametrize("change", ["the same spec", "another medication", "another owner", "a key rotation"])
def test_putting_a_bottle_again_keeps_its_last_heartbeat(db, change):
    """A PUT once unset the heartbeat document's `last` (listed among the earlier layout's fields), so the
    bottle showed no heartbeat until its device's next one."""
    key = provisioned("bottle-1")
    t_beat = ago(minutes=20)
    assert post_events("bottle-1", key, heartbeat(t_beat)).status == 202
    spec = {"another medication": {**SPEC, "medication": "Tri-ox"}, "another owner": {**SPEC, "user_id": "u2"}}

    assert put_bottle("bottle-1", spec.get(change, SPEC), rotate_key=change == "a key rotation").status == 200

    assert get_bottle("bottle-1").body["status"]["last_heartbeat"] == format_instant(t_beat)


def test_new_bottle_has_empty_status(db):
    provisioned("bottle-1", {**SPEC, "schedule": {"every_hours": 6}})
    status = get_bottle("bottle-1").body["status"]
    provisioned_at = db[schema.BOTTLES].find_one({"_id": "bottle-1"})["provisioned_at"]
    assert status == {
        "last_heartbeat": None,
        "last_action": None,
        "last_action_time": None,
        "open_since": None,
        "last_dose_time": None,
        "next_dose_due": format_instant(provisioned_at + timedelta(hours=6)),
    }


def test_out_of_order_actions_never_move_status_backwards(db):
    key = provisioned()
    t_open, t_close = ago(minutes=20), ago(minutes=10)
    post_events("bottle-1", key, closed(t_close, taken=1))
    # A buffered, older `opened` arrives late: the bottle stays closed.
    post_events("bottle-1", key, opened(t_open))
    # An older dose arrives late: the last dose stays the newer one.
    post_events("bottle-1", key, closed(ago(minutes=30), taken=3))

    status = get_bottle("bottle-1").body["status"]

    assert status["last_action"] == "closed"
    assert status["last_action_time"] == format_instant(t_close)
    assert status["open_since"] is None
    assert status["last_dose_time"] == format_instant(t_close)
    assert db[schema.BOTTLE_ACTIONS].count_documents({}) == 3


def test_the_last_dose_is_the_latest_of_a_request_carrying_several(db):
    """A device uploading its buffer sends several doses in one request, in any order: the bottle shows the latest
    as its last dose, and its next dose counts from it; a later request whose doses straddle the stored one moves
    it to its own latest."""
    key = provisioned("bottle-1", {**SPEC, "schedule": {"every_hours": 8}})
    first, second = ago(minutes=50), ago(minutes=30)
    buffered = [opened(second - timedelta(seconds=30)), closed(second, taken=1)]
    buffered += [opened(first - timedelta(seconds=30)), closed(first, taken=1)]  # the later dose listed first
    assert post_events("bottle-1", key, {"events": buffered}).status == 202

    status = get_bottle("bottle-1").body["status"]
    assert status["last_dose_time"] == format_instant(second)
    assert status["next_dose_due"] == format_instant(second + timedelta(hours=8))

    older, newest = ago(minutes=40), ago(minutes=10)  # one before the stored last dose, one after it
    post_events("bottle-1", key, {"events": [closed(older, taken=1), closed(newest, taken=1)]})

    status = get_bottle("bottle-1").body["status"]
    assert status["last_dose_time"] == format_instant(newest)
    assert status["next_dose_due"] == format_instant(newest + timedelta(hours=8))


def test_a_close_without_pills_is_not_a_dose(db):
    key = provisioned()
    post_events("bottle-1", key, {"events": [opened(ago(minutes=3)), closed(ago(minutes=2), taken=0)]})
    assert get_bottle("bottle-1").body["status"]["last_dose_time"] is None


def test_reassigning_a_bottle_attributes_later_events_to_the_new_user(db):
    key = provisioned()
    post_events("bottle-1", key, opened(ago(minutes=10)))
    put_bottle("bottle-1", {**SPEC, "user_id": "newowner"})
    post_events("bottle-1", key, opened(ago(minutes=5)))
    owners = sorted(d["user_id"] for d in db[schema.BOTTLE_ACTIONS].find())
    assert owners == ["newowner", "willcross1024"]
    assert db[schema.BOTTLE_HEARTBEATS].find_one({"_id": "bottle-1"})["user_id"] == "newowner"


def test_provisioning_again_drops_the_fields_of_the_heartbeat_document_s_earlier_layout(db):
    """A heartbeat document written by the earlier layout still holds `times`, `late`, `key_hash` and
    `received_at`; the bottle's next PUT removes them (a migration), and keeps the newest heartbeat."""
    key = provisioned()
    assert post_events("bottle-1", key, heartbeat(ago(minutes=3))).status == 202
    former = {"times": [1, 2], "late": [3], "key_hash": "old", "received_at": ago(minutes=2)}
    db[schema.BOTTLE_HEARTBEATS].update_one({"_id": "bottle-1"}, {"$set": former})

    assert put_bottle("bottle-1").status == 200

    document = db[schema.BOTTLE_HEARTBEATS].find_one({"_id": "bottle-1"})
    assert set(former).isdisjoint(document)
    assert get_bottle("bottle-1").body["status"]["last_heartbeat"] is not None


# --- a PUT that changes nothing stores nothing ------------------------------------------------------------------


def stored_documents(db: Any) -> tuple[Any, Any]:
    """The bottle and its heartbeat document as stored."""
    return (
        db[schema.BOTTLES].find_one({"_id": "bottle-1"}),
        db[schema.BOTTLE_HEARTBEATS].find_one({"_id": "bottle-1"}),
    )


@pytest.mark.parametrize(
    "spec",
    [SPEC, {**SPEC, "user_id": "newowner"}, {**SPEC, "schedule": {"every_hours": 8}, "grace_minutes": 30}],
    ids=["as created", "after a reassignment", "after a schedule change"],
)
def test_a_put_of_what_is_stored_already_stores_nothing_and_answers_as_the_last_change_did(db, spec):
    key = provisioned()
    post_events("bottle-1", key, {"events": [heartbeat(ago(minutes=9)), opened(ago(minutes=8))]})
    earlier = ago(minutes=5)
    set_clock(lambda: earlier)
    try:
        last_change = put_bottle("bottle-1", {**spec, "medication": "Tri-ox"})
        assert last_change.status == 200
    finally:
        set_clock(None)
    again = {**spec, "medication": "Tri-ox"}
    assert put_bottle("bottle-1", again).body == last_change.body
    before = stored_documents(db)

    retried = put_bottle("bottle-1", again)

    assert (retried.status, retried.body) == (200, last_change.body)
    assert retried.body["updated_at"] == format_instant(earlier)
    assert stored_documents(db) == before


def test_a_put_that_changes_one_field_or_rotates_the_key_still_stores_it(db):
    provisioned()
    first = db[schema.BOTTLES].find_one({"_id": "bottle-1"})

    grace = put_bottle("bottle-1", {**SPEC, "grace_minutes": 61})
    assert (grace.status, grace.body["grace_minutes"]) == (200, 61)
    assert db[schema.BOTTLES].find_one({"_id": "bottle-1"})["updated_at"] > first["updated_at"]

    rotated = put_bottle("bottle-1", {**SPEC, "grace_minutes": 61}, rotate_key=True)
    assert rotated.status == 200
    assert post_events("bottle-1", rotated.body["device_key"], heartbeat(ago(minutes=1))).status == 202
    assert db[schema.BOTTLES].find_one({"_id": "bottle-1"})["key_version"] == 2


@pytest.mark.parametrize(
    ("change", "shown"),
    [({"medication": "Tri-ox"}, {"medication": "Tri-ox"}), ({"user_id": "newowner"}, {"user_id": "newowner"})],
    ids=["a medication", "an owner"],
)
def test_a_retry_of_a_put_that_failed_after_its_registry_write_completes_the_heartbeat_document(
    db, monkeypatch, change, shown
):
    """The first PUT wrote the bottle and then failed (a 503) before it wrote the heartbeat document; its retry
    finds the bottle as asked but the heartbeat document not, and goes the whole way: the device's heartbeats and
    the reports then carry the new medication or owner."""
    key = provisioned()
    real = provisioning._sync_heartbeat_document

    def store_gone(*args: Any, **kwargs: Any) -> None:
        raise StoreUnavailable("the store went away", 5)

    monkeypatch.setattr(provisioning, "_sync_heartbeat_document", store_gone)
    assert put_bottle("bottle-1", {**SPEC, **change}).status == 503
    monkeypatch.setattr(provisioning, "_sync_heartbeat_document", real)

    assert put_bottle("bottle-1", {**SPEC, **change}).status == 200

    document = db[schema.BOTTLE_HEARTBEATS].find_one({"_id": "bottle-1"})
    assert {name: document[name] for name in shown} == shown
    assert post_events("bottle-1", key, heartbeat(ago(minutes=1))).status == 202


def test_a_put_after_a_rotation_that_failed_before_its_heartbeat_copy_refuses_the_old_key_for_every_event_kind(
    db, monkeypatch
):
    """A rotation wrote the bottle's new key and failed (a 503, no key shown) before it copied the key to the
    heartbeat document, so heartbeats still took the old key while opened/closed events did not. The next PUT,
    though it asks for the registry as stored, finds the copy behind and writes it: one key for every kind."""
    old_key = provisioned()
    real = provisioning._sync_heartbeat_document

    def store_gone(*args: Any, **kwargs: Any) -> None:
        raise StoreUnavailable("the store went away", 5)

    monkeypatch.setattr(provisioning, "_sync_heartbeat_document", store_gone)
    assert put_bottle("bottle-1", rotate_key=True).status == 503
    monkeypatch.setattr(provisioning, "_sync_heartbeat_document", real)
    assert post_events("bottle-1", old_key, opened(ago(minutes=2))).status == 401

    assert put_bottle("bottle-1").status == 200

    assert post_events("bottle-1", old_key, heartbeat(ago(minutes=1))).status == 401


@pytest.mark.parametrize("collection", [schema.BOTTLES, schema.BOTTLE_HEARTBEATS])
def test_a_put_of_the_same_bottle_still_gives_a_document_stored_before_buckets_its_bucket(db, collection):
    """The checks sweep bottles, and the silent check heartbeat documents, by bucket range: a document stored
    before they did has no `bucket`, and is swept by no partition until the bottle's next PUT writes it, even a
    PUT that asks for nothing new."""
    provisioned()
    db[collection].update_one({"_id": "bottle-1"}, {"$unset": {"bucket": ""}})

    assert put_bottle("bottle-1").status == 200

    assert db[collection].find_one({"_id": "bottle-1"})["bucket"] == bucket_of("bottle-1")
