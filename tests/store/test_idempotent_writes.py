"""write_idempotent: per-op outcomes from unordered bulk writes, as Cosmos DB and MongoDB report them."""

from typing import Any

import pytest
from pymongo import InsertOne, UpdateOne
from pymongo.errors import BulkWriteError, OperationFailure

from shared.store.retries import RetryPolicy, StoreUnavailable, count_matched, write_idempotent

POLICY = RetryPolicy(max_retries=2, base_ms=1)


class ScriptedCollection:
    """Answers each bulk_write with the next scripted list of (op position, error code)."""

    def __init__(self, *rounds: list[tuple[int, int]]) -> None:
        self.rounds = list(rounds)
        self.sent: list[int] = []

    def bulk_write(self, ops: list[Any], ordered: bool) -> None:
        assert ordered is False
        self.sent.append(len(ops))
        errors = self.rounds.pop(0) if self.rounds else []
        if errors:
            raise BulkWriteError({"writeErrors": [{"index": i, "code": code, "errmsg": "x"} for i, code in errors]})


def upsert(n: int) -> UpdateOne:
    return UpdateOne({"_id": n, "times": {"$ne": n}}, {"$push": {"times": n}}, upsert=True)


def test_a_duplicate_insert_is_a_duplicate_without_asking_again():
    collection = ScriptedCollection([(1, 11000)])
    assert write_idempotent(collection, [InsertOne({"_id": 1}), InsertOne({"_id": 2})], POLICY) == [True, False]
    assert collection.sent == [2]


def test_a_duplicate_key_on_an_upsert_is_asked_once_more_because_it_may_be_a_race():
    # Two requests created the same document at once: the second answer shows the op now applies.
    collection = ScriptedCollection([(0, 11000)], [])
    assert write_idempotent(collection, [upsert(1), upsert(2)], POLICY) == [True, True]
    assert collection.sent == [2, 1]


def test_a_duplicate_key_twice_on_an_upsert_is_a_duplicate():
    collection = ScriptedCollection([(0, 11000)], [(0, 11000)])
    assert write_idempotent(collection, [upsert(1)], POLICY) == [False]


def test_only_throttled_ops_are_sent_again():
    # Ops 1 and 2 are throttled; on the resend op 1 turns out to be a duplicate and op 2 applies.
    collection = ScriptedCollection([(1, 16500), (2, 16500)], [(0, 11000)])
    outcome = write_idempotent(collection, [InsertOne({"_id": 0}), InsertOne({"_id": 1}), upsert(2)], POLICY)
    assert outcome == [True, False, True]
    assert collection.sent == [3, 2]


def test_an_unexpected_write_error_is_a_fault_not_an_outage():
    collection = ScriptedCollection([(0, 2)])
    with pytest.raises(OperationFailure) as raised:
        write_idempotent(collection, [InsertOne({"_id": 0})], POLICY)
    assert raised.value.code == 2
    assert collection.sent == [1]  # not retried


def test_throttling_beyond_the_retries_is_unavailable():
    collection = ScriptedCollection(*([[(0, 16500)]] * 3))
    with pytest.raises(StoreUnavailable):
        write_idempotent(collection, [InsertOne({"_id": 0})], POLICY)
    assert collection.sent == [1, 1, 1]


class MatchingCollection:
    """Answers each bulk_write with the next scripted (matched count, throttled op positions)."""

    def __init__(self, *rounds: tuple[int, list[int]]) -> None:
        self.rounds = list(rounds)
        self.sent: list[int] = []

    def bulk_write(self, ops: list[Any], ordered: bool) -> Any:
        self.sent.append(len(ops))
        matched, throttled = self.rounds.pop(0)
        if throttled:
            errors = [{"index": i, "code": 16500, "errmsg": "RetryAfterMs=1"} for i in throttled]
            raise BulkWriteError({"writeErrors": errors, "nMatched": matched})
        return type("Result", (), {"matched_count": matched})()


def guarded(n: int) -> UpdateOne:
    return UpdateOne({"_id": 1, "times": {"$ne": n}}, {"$push": {"times": n}})


def test_count_matched_adds_up_matches_across_throttled_resends():
    collection = MatchingCollection((1, [1, 2]), (1, []))
    assert count_matched(collection, [guarded(0), guarded(1), guarded(2)], POLICY) == 2
    assert collection.sent == [3, 2]


def test_count_matched_gives_up_after_the_retries():
    collection = MatchingCollection(*([(0, [0])] * 3))
    with pytest.raises(StoreUnavailable):
        count_matched(collection, [guarded(0)], POLICY)
