"""Bulk writes as Cosmos DB throttles them, op by op: what ends up stored and counted, how long the retry waits,
the code the throttling metric counts, and what a refused write's error says (what a timer run that fails on it
logs)."""

from typing import Any

import mongomock
import pytest
from pymongo import InsertOne, UpdateOne
from pymongo.errors import BulkWriteError, OperationFailure

from shared.store.retries import RecentThrottling, RetryPolicy, StoreUnavailable, count_matched, write_idempotent
from shared.telemetry import metrics
from tests.draws import Lowest

THROTTLED, RAN_OUT_OF_TIME, INVALID = 16500, 50, 121


def refusal(code: int, retry_after_ms: int = 0) -> dict[str, Any]:
    if code == INVALID:  # the server's message quotes the document
        return {"code": code, "errmsg": "Document failed validation: { _id: 1, key: 'a-device-key' }"}
    return {"code": code, "errmsg": f"Error={code}, RetryAfterMs={retry_after_ms}, Details='Request rate is large.'"}


class CosmosBulk:
    """A collection (mongomock underneath) whose bulk writes refuse the ops each round names, by position, with
    the round's write error; the other ops apply. As the server does: ordered, it stops at the first refused op
    (the later ops are neither applied nor reported); unordered, it applies every op it does not refuse."""

    def __init__(self, *rounds: dict[int, dict[str, Any]]) -> None:
        self.collection: Any = mongomock.MongoClient().db.things
        for i in range(5):  # what marks() update
            self.collection.insert_one({"_id": i, "marked": False})
        self.rounds = list(rounds)
        self.sent: list[int] = []

    def bulk_write(self, ops: list[Any], ordered: bool = True) -> Any:
        self.sent.append(len(ops))
        refused = self.rounds.pop(0) if self.rounds else {}
        errors, matched = [], 0
        for i, op in enumerate(ops):
            if i in refused:
                errors.append({"index": i, **refused[i]})
                if ordered:
                    break
                continue
            matched += self.collection.bulk_write([op]).matched_count
        if errors:
            raise BulkWriteError({"writeErrors": errors, "writeConcernErrors": [], "nMatched": matched})
        return type("Result", (), {"matched_count": matched})()


def policy(max_retries: int = 3) -> RetryPolicy:
    return RetryPolicy(max_retries=max_retries, base_ms=1, throttling=RecentThrottling(), rng=Lowest())


def marks(n: int) -> list[UpdateOne]:
    return [UpdateOne({"_id": i, "marked": False}, {"$set": {"marked": True}}) for i in range(n)]


def send(write: str, bulk: CosmosBulk, n: int, sleep: Any = lambda _: None) -> Any:
    """`n` ops through `write`: inserts of new documents (write_idempotent), or marks (count_matched)."""
    if write == "write_idempotent":
        return write_idempotent(bulk, [InsertOne({"_id": f"new-{i}"}) for i in range(n)], policy(), sleep)
    return count_matched(bulk, marks(n), policy(), sleep)


def test_ops_after_a_throttled_one_are_applied_in_its_round_and_every_rounds_matches_are_counted():
    bulk = CosmosBulk({0: refusal(THROTTLED)}, {0: refusal(THROTTLED)})

    matched = send("count_matched", bulk, 3)

    assert matched == 3
    assert bulk.sent == [3, 1, 1]  # only the throttled op is sent again
    assert bulk.collection.count_documents({"marked": True}) == 3


@pytest.mark.parametrize("write", ["write_idempotent", "count_matched"])
def test_a_bulk_retry_waits_the_longest_hint_of_its_throttled_ops(write):
    bulk = CosmosBulk({0: refusal(THROTTLED, 40), 2: refusal(THROTTLED, 300), 3: refusal(THROTTLED, 120)})
    sleeps: list[float] = []

    outcome = send(write, bulk, 4, sleeps.append)

    assert outcome == ([True] * 4 if write == "write_idempotent" else 4)
    assert sleeps == [0.3]  # the server's longest RetryAfterMs: a shorter wait is throttled again


def test_a_bulk_write_throttled_through_its_retries_answers_its_longest_hint_as_retry_after():
    always = {0: refusal(THROTTLED, 200), 1: refusal(THROTTLED, 1500)}
    bulk = CosmosBulk(always, always)
    inserts = [InsertOne({"_id": "new-0"}), InsertOne({"_id": "new-1"})]

    with pytest.raises(StoreUnavailable) as raised:
        write_idempotent(bulk, inserts, policy(max_retries=1), lambda _: None)

    assert raised.value.retry_after_s == 2  # 1.5 s rounded up, no jitter drawn


@pytest.mark.parametrize(
    ("codes", "counted"),
    [
        ((RAN_OUT_OF_TIME, THROTTLED), [THROTTLED]),
        ((THROTTLED, RAN_OUT_OF_TIME), [THROTTLED]),
        ((RAN_OUT_OF_TIME, RAN_OUT_OF_TIME), [RAN_OUT_OF_TIME]),
    ],
)
@pytest.mark.parametrize("write", ["write_idempotent", "count_matched"])
def test_the_throttling_metric_counts_16500_for_a_bulk_write_with_any_op_throttled_else_50(
    monkeypatch, write, codes, counted
):
    """pillbottle.store.throttled tells Cosmos DB's throttling (16500) from its server-side retry running out
    (50): an operator raises RU/s for the one, looks at long requests for the other."""
    recorded: list[int] = []
    monkeypatch.setattr(metrics, "store_throttled", recorded.append)
    bulk = CosmosBulk({i: refusal(code) for i, code in enumerate(codes)})

    send(write, bulk, 2)

    assert recorded == counted


@pytest.mark.parametrize("write", ["write_idempotent", "count_matched"])
def test_a_refused_write_fails_naming_its_code_without_quoting_the_document(write):
    bulk = CosmosBulk({1: refusal(INVALID)})

    with pytest.raises(OperationFailure) as raised:
        send(write, bulk, 2)

    assert raised.value.code == INVALID
    assert str(raised.value) == "database rejected a write (code 121)"
    assert bulk.sent == [2]  # a fault: not sent again


class WriteConcernOnly(CosmosBulk):
    """A server that applies every op and then reports only a write-concern error (MongoDB can; a replica set
    member that did not acknowledge in time): no op was refused."""

    def bulk_write(self, ops: list[Any], ordered: bool = True) -> Any:
        matched = self.collection.bulk_write(list(ops)).matched_count
        raise BulkWriteError(
            {
                "writeErrors": [],
                "writeConcernErrors": [{"code": 64, "errmsg": "waiting for replication timed out"}],
                "nMatched": matched,
            }
        )


def test_a_guarded_bulk_write_with_only_a_write_concern_error_counts_what_it_matched():
    fake = WriteConcernOnly()
    assert count_matched(fake, marks(3), policy()) == 3
    assert fake.collection.count_documents({"marked": True}) == 3
