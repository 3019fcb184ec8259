"""The report feeds' test doubles and steps: a change stream that answers as Cosmos DB's does (CosmosStream,
ServerStream), the dispatcher's replies of GetChangeStreamTokens (ReplyLeavingOut), a dispatch, the leases it
leaves, and changes stored and read back, shared by the feed, lease and split tests."""

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from shared.consumers.plugged import dispatch, partition_of, process_partition
from shared.feeds.partitions import Partition
from shared.instants import utc_now
from shared.reports.feeds import ACTIONS_FEED
from shared.settings import get_settings
from shared.store import schema
from tests.cosmos_fakes import CosmosTokens
from tests.fake_time import FakeTime

MINUTE = timedelta(minutes=1)


def sent_by_dispatch(db: Any, **kwargs: Any) -> list[dict[str, Any]]:
    messages: list[str] = []
    dispatch(db, now=kwargs.pop("now", utc_now()), settings=get_settings(), send=messages.extend, **kwargs)
    return [json.loads(m) for m in messages]


class CosmosStream:
    """A change stream as Cosmos DB serves one: server batches whose documents all carry the batch's token (which
    points after the batch), no `operationType`, and empty batches while throttled."""

    def __init__(self, batches: list[list[dict[str, Any]] | None]) -> None:
        self._batches: Iterator[list[dict[str, Any]] | None] = iter(batches)
        self._current: list[dict[str, Any]] = []
        self._token: dict[str, Any] | None = None
        self._served = 0

    def _next_batch(self) -> bool:
        batch = next(self._batches, None)
        if batch is None:  # throttled, or nothing new: an empty batch, and the token stays
            return False
        self._served += 1
        token = {"_data": f"after-batch-{self._served}"}
        self._current = [{"_id": token, **entry} for entry in batch]
        return True

    @property
    def resume_token(self) -> dict[str, Any] | None:
        return self._token

    def next_change(self) -> dict[str, Any] | None:
        if not self._current and not self._next_batch():
            return None
        change = self._current.pop(0)
        self._token = change["_id"]  # every document of the batch carries the same token
        return {k: v for k, v in change.items() if k != "_id"}

    def at_batch_end(self) -> bool:
        return not self._current

    def close(self) -> None:
        pass


class ResumedStream(CosmosStream):
    """A CosmosStream resumed from a saved token, as pymongo's is: its resume token is that token until a batch
    moves it (pymongo's `ChangeStream.resume_token` starts as `resume_after`)."""

    def __init__(self, batches: list[list[dict[str, Any]] | None], token: dict[str, Any] | None) -> None:
        super().__init__(batches)
        self._token = token


def change(bottle_id: str, received_minutes_ago: int) -> dict[str, Any]:
    """A change of `bottle_actions` as Cosmos DB's stream gives it: the document, its key, no operationType."""
    received = utc_now() - timedelta(minutes=received_minutes_ago)
    document = {
        "_id": bottle_id,
        "bottle_id": bottle_id,
        "user_id": "willcross1024",
        "medication": "Cordrazine",
        "time": received - MINUTE,
        "action": "opened",
        "number_of_pills": 30,
        "mass_of_contents": 15.0,
        "event_id": "e1",
        ACTIONS_FEED.time_field: received,
    }
    return {"fullDocument": document, "documentKey": {"_id": bottle_id}, "ns": {"coll": schema.BOTTLE_ACTIONS}}


def actions_partition_with_token(db: Any, now: Any) -> Partition:
    partition = next(partition_of(m) for m in sent_by_dispatch(db, now=now) if m["feed"] == ACTIONS_FEED.collection)
    db[schema.LEASES].update_one({"_id": partition.lease_id}, {"$set": {"token": {"_data": "saved"}}})
    return partition


def stored(db: Any, partition: Partition, changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The changes' documents in `bottle_actions` within the partition's buckets, as the collection a stream of
    the partition reads holds them."""
    assert partition.buckets is not None
    bucket = {"bucket": partition.buckets.low}
    db[schema.BOTTLE_ACTIONS].insert_many([{**c["fullDocument"], **bucket} for c in changes])
    return changes


def dispatched(db: Any, now: Any) -> list[Partition]:
    messages: list[str] = []
    dispatch(db, now=now, settings=get_settings(), send=messages.extend, on_cosmos=True)
    return [p for p in map(partition_of, map(json.loads, messages)) if p.feed == ACTIONS_FEED]


def actions_leases(db: Any, *, live: bool = True) -> dict[tuple[str, str], dict[str, Any]]:
    query: dict[str, Any] = {"feed": ACTIONS_FEED.key, "kind": "cosmos"}
    if live:
        query["retired_at"] = None
    return {(doc["range"][0], doc["range"][1]): doc for doc in db[schema.LEASES].find(query)}


def checkpoint_all(db: Any, at: Any) -> None:
    """Every live actions lease checkpointed at `at`, as workers that ran would leave them."""
    db[schema.LEASES].update_many(
        {"feed": ACTIONS_FEED.key, "retired_at": None}, {"$set": {"checkpoint_time": at, "updated_at": at}}
    )


class ReplyLeavingOut(CosmosTokens):
    """A `GetChangeStreamTokens` reply that leaves the ranges in `left_out` out, or adds those in `extra`."""

    def __init__(self, db: Any, partitions: int) -> None:
        super().__init__(db, partitions)
        self.left_out: set[tuple[int, int]] = set()
        self.extra: list[tuple[int, int]] = []

    def tokens(self) -> list[dict[str, Any]]:
        whole = self.ranges
        self.ranges = [r for r in whole if r not in self.left_out] + self.extra
        try:
            return super().tokens()
        finally:
            self.ranges = whole


def dispatch_run(db: Any, now: Any) -> Any:
    return dispatch(db, now=now, settings=get_settings(), send=lambda messages: None, on_cosmos=True)


class Cursor:
    def __init__(self, stream: "ServerStream") -> None:
        self._stream = stream

    def _has_next(self) -> bool:
        return bool(self._stream.batch)


def after(token: dict[str, Any]) -> int:
    """The batch a stream opened at `token` reads first: the one after `after-<i>`'s batch, else the first."""
    data = token["_data"]
    return int(data.removeprefix("after-")) if isinstance(data, str) and data.startswith("after-") else 0


class ServerStream:
    """A pymongo ChangeStream over Cosmos DB's server batches: every change of a batch carries the batch's token,
    pymongo keeps the rest of a batch in its cursor (`_cursor._has_next()`), and a stream opened without a token
    starts at the present (after every batch there is)."""

    def __init__(self, batches: list[list[dict[str, Any]]], token: dict[str, Any] | None) -> None:
        self._batches = batches
        self._next = len(batches) if token is None else after(token)
        self.batch: list[dict[str, Any]] = []
        self.resume_token = token
        self.alive = True
        self._cursor = Cursor(self)

    def try_next(self) -> dict[str, Any] | None:
        if not self.batch:
            if self._next >= len(self._batches):
                return None
            self.batch = list(self._batches[self._next])
            self._next += 1
        self.resume_token = {"_data": f"after-{self._next}"}
        return self.batch.pop(0)

    def close(self) -> None:
        self.alive = False


def run_on_stream(db: Any, partition: Partition, batches: list[Any], time_: FakeTime) -> Any:
    now = utc_now()
    stream = CosmosStream(batches)
    return process_partition(
        db, partition, now=now, settings=get_settings(), clock=time_, sleep=time_.sleep, watch=lambda p, t: stream
    )


class SlowStream(CosmosStream):
    """A stream each of whose server batches takes `seconds` of the worker's clock to come."""

    def __init__(self, batches: list[list[dict[str, Any]] | None], time_: FakeTime, seconds: float) -> None:
        super().__init__(batches)
        self._time, self._seconds = time_, seconds

    def _next_batch(self) -> bool:
        self._time.now += self._seconds
        return super()._next_batch()


def a_run_out_of_budget_after_a_full_page(db: Any, partition: Partition, full: list[dict[str, Any]]) -> Any:
    time_ = FakeTime()
    stream = SlowStream([full, full], time_, get_settings().reports_time_budget_seconds)
    run = process_partition(
        db, partition, now=utc_now(), settings=get_settings(), clock=time_, sleep=time_.sleep, watch=lambda p, t: stream
    )
    assert (run.changes, run.caught_up) == (2, False)
    return run
