"""Cosmos DB throttling (16500) and database faults: bounded retries, then 503 + Retry-After; a device
retry repairs anything a failure left behind, and nothing is counted twice."""

from typing import Any

import pytest
from pymongo.errors import (
    AutoReconnect,
    BulkWriteError,
    ExecutionTimeout,
    NetworkTimeout,
    NotPrimaryError,
    OperationFailure,
)

from functions import bottles, device_events
from shared.store import cosmos, retries, schema
from tests.api import SPEC, ago, closed, get_bottle, heartbeat, opened, post_events, provisioned, put_bottle
from tests.cosmos_fakes import ThrottlingDatabase, throttled
from tests.heartbeats import counted


@pytest.fixture
def throttle(db, monkeypatch):
    """Install a throttling view of the store for the ingestion function; returns a setter."""

    def install(failures: dict[str, float], *, partial: bool = False) -> ThrottlingDatabase:
        fake = ThrottlingDatabase(db, failures, partial=partial)
        monkeypatch.setattr(device_events, "get_database", lambda: fake)
        return fake

    return install


def stored(db: Any) -> tuple[int, int]:
    return db[schema.BOTTLE_ACTIONS].count_documents({}), len(counted(db))


# The call each collection's writes go through: the heartbeat document's update (a findAndModify follows only
# when not every heartbeat is new), the actions' bulk insert, the bottle's one status update.
WRITE = {
    schema.BOTTLE_HEARTBEATS: "update_one",
    schema.BOTTLE_ACTIONS: "bulk_write",
    schema.BOTTLES: "update_one",
}


def batch() -> dict[str, Any]:
    """Three events of the last ten minutes, made when the test runs (its clock is placed per test)."""
    return {"events": [heartbeat(ago(minutes=9)), opened(ago(minutes=8)), closed(ago(minutes=7), taken=1)]}


@pytest.mark.parametrize("collection", [schema.BOTTLE_HEARTBEATS, schema.BOTTLE_ACTIONS, schema.BOTTLES])
def test_throttled_twice_then_succeeds(db, throttle, collection):
    key = provisioned()
    fake = throttle({f"{collection}.{WRITE[collection]}": 2})

    response = post_events("bottle-1", key, batch())

    assert (response.status, response.body) == (202, {"stored": 3, "duplicates": 0, "expired": 0})
    assert stored(db) == (2, 1)
    assert fake.calls.count(f"{collection}.{WRITE[collection]}") == 3
    assert get_bottle("bottle-1").body["status"]["last_action"] == "closed"


def test_throttled_registry_read_is_retried(db, throttle):
    key = provisioned()
    throttle({schema.BOTTLES: 1})
    assert post_events("bottle-1", key, heartbeat(ago(minutes=1))).status == 202


def test_always_throttled_is_503_with_retry_after_and_stores_nothing(db, throttle):
    key = provisioned()
    fake = throttle({schema.BOTTLE_HEARTBEATS: float("inf"), schema.BOTTLE_ACTIONS: float("inf")})

    response = post_events("bottle-1", key, batch())

    assert response.status == 503
    assert int(response.headers["Retry-After"]) >= 1
    assert "retry later" in response.body["error"]
    assert stored(db) == (0, 0)
    # The heartbeat write (its first command, the update) is tried once and retried 3 times, then 503.
    assert fake.calls.count(f"{schema.BOTTLE_HEARTBEATS}.update_one") == 4


def test_a_failure_part_way_is_repaired_by_the_device_retry(db, throttle):
    key = provisioned()
    throttle({f"{schema.BOTTLES}.update_one": float("inf")})  # the status update never gets through
    sent = batch()
    assert post_events("bottle-1", key, sent).status == 503

    throttle({})
    response = post_events("bottle-1", key, sent)  # the device's retry: the same events

    # The events written before the failure come back as duplicates; the status is now right.
    assert response.body == {"stored": 0, "duplicates": 3, "expired": 0}
    assert stored(db) == (2, 1)
    status = get_bottle("bottle-1").body["status"]
    assert status["last_action"] == "closed"
    assert status["last_dose_time"] is not None


def test_partially_throttled_bulk_retries_only_what_was_not_written(db, throttle):
    key = provisioned()
    throttle({schema.BOTTLE_HEARTBEATS: 1, schema.BOTTLE_ACTIONS: 1}, partial=True)
    events = [heartbeat(ago(minutes=30 - 5 * i)) for i in range(5)] + [opened(ago(minutes=3)), closed(ago(minutes=2))]

    response = post_events("bottle-1", key, {"events": events})

    assert response.body == {"stored": 7, "duplicates": 0, "expired": 0}
    assert stored(db) == (2, 5)


FAULTS = {
    "not authorized": lambda: OperationFailure("not authorized on pillbottle", code=13),
    "a bad query": lambda: OperationFailure("unknown operator: $foo", code=2),
    "a missing collection": lambda: OperationFailure("ns does not exist", code=26),
    "a refused write": lambda: BulkWriteError({"writeErrors": [{"index": 0, "code": 121, "errmsg": "invalid"}]}),
}
OUTAGES = {
    "throttled": throttled,
    "server-side retry ran out": lambda: ExecutionTimeout("Request timed out.", code=50),
    "primary stepped down": lambda: OperationFailure("PrimarySteppedDown", code=189),
    "not writable primary": lambda: NotPrimaryError("not primary"),
    "not writable primary (code)": lambda: OperationFailure("NotWritablePrimary", code=10107),
    "connection dropped": lambda: AutoReconnect("connection reset"),
    "timed out": lambda: NetworkTimeout("timed out"),
}


@pytest.mark.parametrize("fault", FAULTS.values(), ids=FAULTS.keys())
def test_a_database_fault_is_a_500_with_an_error_id_in_the_log_not_a_503(db, monkeypatch, caplog, fault):
    key = provisioned()
    broken = ThrottlingDatabase(db, {schema.BOTTLE_HEARTBEATS: float("inf")}, error=fault)
    monkeypatch.setattr(device_events, "get_database", lambda: broken)

    response = post_events("bottle-1", key, heartbeat(ago(minutes=1)))

    assert response.status == 500
    assert "Retry-After" not in response.headers  # not an outage: retrying soon repeats the fault
    assert set(response.body) == {"error", "error_id", "details"}
    logged = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert any(response.body["error_id"] in line and "post_events" in line for line in logged), logged
    assert len([c for c in broken.calls if c.startswith(schema.BOTTLE_HEARTBEATS)]) == 1  # never retried


@pytest.mark.parametrize("outage", OUTAGES.values(), ids=OUTAGES.keys())
def test_a_transient_database_error_that_persists_is_a_503_with_retry_after(db, monkeypatch, outage):
    key = provisioned()
    down = ThrottlingDatabase(db, {schema.BOTTLE_HEARTBEATS: float("inf")}, error=outage)
    monkeypatch.setattr(device_events, "get_database", lambda: down)

    response = post_events("bottle-1", key, heartbeat(ago(minutes=1)))

    assert response.status == 503
    assert int(response.headers["Retry-After"]) >= 1
    assert "error_id" not in response.body
    assert len([c for c in down.calls if c.startswith(schema.BOTTLE_HEARTBEATS)]) == 4  # the first try, 3 retries


def test_retry_policy_honours_retry_after_ms_and_gives_up():
    policy = retries.RetryPolicy(max_retries=2, base_ms=1, throttling=retries.RecentThrottling())
    attempts: list[int] = []
    sleeps: list[float] = []

    def always_throttled() -> None:
        attempts.append(1)
        raise throttled()

    with pytest.raises(retries.StoreUnavailable) as raised:
        retries.with_retries(always_throttled, policy, sleep=sleeps.append)

    assert len(attempts) == 3
    assert sleeps == [0.003, 0.003]  # RetryAfterMs=3 is longer than the 1-2 ms back-off
    assert 1 <= raised.value.retry_after_s <= 3  # the hint (at least 1 s) plus a jitter of up to 2 s


def test_connection_drops_are_retried_but_programming_errors_are_not():
    policy = retries.RetryPolicy(max_retries=3, base_ms=1)
    failures = [AutoReconnect("connection reset")]

    def flaky() -> str:
        if failures:
            raise failures.pop()
        return "ok"

    assert retries.with_retries(flaky, policy, sleep=lambda _: None) == "ok"

    calls = []

    def bad_query() -> None:
        calls.append(1)
        raise OperationFailure("unknown operator: $foo", code=2)

    with pytest.raises(OperationFailure) as raised:  # raised as it is: a fault, not an outage
        retries.with_retries(bad_query, policy, sleep=lambda _: None)
    assert raised.value.code == 2
    assert len(calls) == 1


def test_throttle_delay_is_read_from_bulk_write_errors_too():
    from pymongo.errors import BulkWriteError

    error = BulkWriteError({"writeErrors": [{"index": 0, "code": 16500, "errmsg": "RetryAfterMs=250"}]})
    assert cosmos.throttle_delay_ms(error) == 250
    assert retries.is_transient(error)
    assert cosmos.throttle_delay_ms(OperationFailure("duplicate", code=11000)) is None


@pytest.mark.parametrize("change", ["a key rotation", "a new owner"])
def test_a_throttled_heartbeat_document_write_of_a_put_is_retried_alone(db, monkeypatch, change):
    """The key copy (a rotation) or the owner's record (a reassignment) is throttled once: that write alone is
    retried, not the heartbeat document's upsert before it (a write, charged again), and the PUT answers."""
    key = provisioned()
    fake = ThrottlingDatabase(db, {f"{schema.BOTTLE_HEARTBEATS}.update_one": 1})
    monkeypatch.setattr(bottles, "get_database", lambda: fake)
    rotate = change == "a key rotation"

    response = put_bottle("bottle-1", SPEC if rotate else {**SPEC, "user_id": "u2"}, rotate_key=rotate)

    assert response.status == 200
    assert fake.calls.count(f"{schema.BOTTLE_HEARTBEATS}.update_one") == 2  # throttled, then applied
    assert fake.calls.count(f"{schema.BOTTLE_HEARTBEATS}.find_one_and_update") == 1  # the upsert, once
    device_key = response.body["device_key"] if rotate else key
    assert post_events("bottle-1", device_key, heartbeat(ago(minutes=1))).status == 202
    document = db[schema.BOTTLE_HEARTBEATS].find_one({"_id": "bottle-1"})
    assert document["user_id"] == ("willcross1024" if rotate else "u2")
