"""Where a report feed's pages come from (shared/feeds/sources.py): polling pages that end on a whole
server-time instant within the partition's buckets, a pymongo change stream read to the end of its server batch
from the saved token, an empty page whose token moved, a recovery that hands over to its change stream, and a
polling query the store refuses, which fails the run."""

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from pymongo.errors import OperationFailure

from shared.consumers.plugged import partition_of, process_partition
from shared.feeds.partitions import Partition
from shared.feeds.sources import ChangeStreamSource, PollingSource, PyMongoReader
from shared.instants import utc_now
from shared.reports.feeds import ACTIONS_FEED
from shared.settings import get_settings
from shared.store import schema
from shared.store.partitioning import BucketRange
from shared.store.retries import RetryPolicy
from tests.report_client import set_setting
from tests.reports.feeds import (
    CosmosStream,
    ServerStream,
    actions_partition_with_token,
    change,
    sent_by_dispatch,
    stored,
)

POLICY = RetryPolicy(max_retries=0, base_ms=1)
SECOND = timedelta(seconds=1)


def action(key: str, received: Any, bucket: int) -> dict[str, Any]:
    return {"_id": key, "bottle_id": key, "time": received - SECOND, "received_at": received, "bucket": bucket}


def polled_pages(db: Any, buckets: BucketRange, page_size: int) -> list[list[str]]:
    source = PollingSource(db, ACTIONS_FEED, buckets, since=None, page_size=page_size, policy=POLICY)
    pages: list[list[str]] = []
    while (page := source.next_page()) is not None and len(pages) < 10:  # a source that goes back never ends
        pages.append(sorted(c.key for c in page.changes))  # the order within an instant is the store's
    return pages


def test_polling_pages_end_on_a_whole_instant_and_read_each_document_once(mock_db: Any) -> None:
    """A full page ends before its last instant (the next page starts strictly after the page's time), so every
    document is read once: none skipped past, none read again."""
    t0 = utc_now().replace(microsecond=0) - timedelta(hours=1)
    buckets = BucketRange(0, 1)
    times = {"a": 0, "b": 1, "c": 2, "d": 3, "e": 3, "f": 4}
    mock_db[schema.BOTTLE_ACTIONS].insert_many(
        [action(k, t0 + s * SECOND, bucket=0) for k, s in reversed(list(times.items()))]
    )

    assert polled_pages(mock_db, buckets, page_size=4) == [["a", "b", "c"], ["d", "e", "f"]]


def test_a_polling_page_of_one_instant_takes_all_of_it_within_its_buckets(mock_db: Any) -> None:
    """More documents at one instant than a page holds: the page takes them all (a page ending inside an instant
    would skip the rest of it), and only those of the partition's buckets (another partition reads the others)."""
    t0 = utc_now().replace(microsecond=0) - timedelta(hours=1)
    buckets = BucketRange(0, 2)  # the lower half of the buckets
    outside = buckets.high
    mock_db[schema.BOTTLE_ACTIONS].insert_many(
        [action(k, t0, bucket=0) for k in ("a", "b", "c")]
        + [action("other", t0, bucket=outside), action("d", t0 + SECOND, bucket=0)]
    )

    pages = polled_pages(mock_db, buckets, page_size=2)

    assert pages == [["a", "b", "c"], ["d"]]


# --- pymongo's change stream ------------------------------------------------------------------------------------


def test_a_pymongo_change_stream_page_resumes_at_the_saved_token_and_ends_with_its_server_batch() -> None:
    """The stream opens at the lease's token (not at the present, which would skip the backlog), and a page that
    reached its size mid-batch reads on to the batch's end: the token saved after it covers the whole batch."""
    batches = [[change("z", 40)], [change(k, 30) for k in ("a", "b", "c")], [change("d", 20)]]
    reader = PyMongoReader(lambda token: ServerStream(batches, token), {"_data": "after-1"}, POLICY)  # type: ignore[return-value]
    source = ChangeStreamSource(reader, ACTIONS_FEED, page_size=2)

    first, second = source.next_page(), source.next_page()

    assert first is not None
    assert second is not None
    assert ([c.key for c in first.changes], first.token) == (["a", "b", "c"], {"_data": "after-2"})
    assert ([c.key for c in second.changes], second.token) == (["d"], {"_data": "after-3"})
    assert source.next_page() is None


class MovingToken:
    """A stream with nothing new whose position still moves (an empty getMore's postBatchResumeToken)."""

    def __init__(self, token: dict[str, Any] | None, moved: dict[str, Any]) -> None:
        self.resume_token, self._moved = token, moved

    def next_change(self) -> None:
        self.resume_token = self._moved

    def at_batch_end(self) -> bool:
        return True

    def close(self) -> None:
        pass


def test_an_empty_page_whose_token_moved_saves_the_new_position(mock_db: Any, monkeypatch: Any) -> None:
    """A lease that has a token but no checkpoint time yet (nothing read so far) and a stream with nothing new
    whose position moved: the run ends caught up and saves the new position, with no checkpoint time."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    partition = actions_partition_with_token(mock_db, utc_now())
    moved = {"_data": "moved"}

    run = process_partition(
        mock_db, partition, now=utc_now(), settings=get_settings(), watch=lambda p, t: MovingToken(t, moved)
    )

    assert run.caught_up
    saved = mock_db[schema.LEASES].find_one({"_id": partition.lease_id})
    assert (saved["token"], saved["checkpoint_time"]) == (moved, None)


# --- recovery -----------------------------------------------------------------------------------------------------


class OpenedAt(CosmosStream):
    """A CosmosStream whose position starts at the token it was opened with."""

    def __init__(self, batches: list[list[dict[str, Any]] | None], token: dict[str, Any]) -> None:
        super().__init__(batches)
        self._token = token


def recovering_partition(db: Any) -> Partition:
    """A partition whose lease has a checkpoint time but no token (a rejected one was dropped): it recovers."""
    partition = actions_partition_with_token(db, utc_now())
    checkpoint = utc_now() - timedelta(hours=1)
    db[schema.LEASES].update_one({"_id": partition.lease_id}, {"$set": {"token": None, "checkpoint_time": checkpoint}})
    return partition


def test_a_recovery_on_an_idle_stream_saves_the_streams_opening_token_and_the_next_run_streams(
    mock_db: Any, monkeypatch: Any
) -> None:
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    partition = recovering_partition(mock_db)
    stored(mock_db, partition, [change("b0", 30)])
    opened = {"_data": "opened"}
    watched: list[Any] = []

    def watch(p: Partition, token: Any) -> Any:
        watched.append(token)
        return OpenedAt([], token or opened)

    recovered = process_partition(mock_db, partition, now=utc_now(), settings=get_settings(), watch=watch)
    streamed = process_partition(mock_db, partition, now=utc_now(), settings=get_settings(), watch=watch)

    assert (recovered.recovered, recovered.changes, recovered.caught_up) == (True, 1, True)
    assert (streamed.recovered, watched[-1]) == (False, opened)  # resumed where the recovery's stream began


def test_a_recovery_reads_on_from_its_stream_once_the_polling_caught_up(mock_db: Any, monkeypatch: Any) -> None:
    """The stream, opened before the polling began, has a change: the run reads it as soon as the polling has
    caught up, and saves the position after it."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    partition = recovering_partition(mock_db)
    stored(mock_db, partition, [change("b0", 30)])
    late = change("b1", 10)
    stream: Iterator[Any] = iter([OpenedAt([[late]], {"_data": "opened"})])

    run = process_partition(mock_db, partition, now=utc_now(), settings=get_settings(), watch=lambda p, t: next(stream))

    assert (run.recovered, run.changes, run.pages) == (True, 2, 2)
    saved = mock_db[schema.LEASES].find_one({"_id": partition.lease_id})
    assert saved["token"] == {"_data": "after-batch-1"}
    assert saved["checkpoint_time"] == late["fullDocument"][ACTIONS_FEED.time_field]


class FailingAfterAPage(CosmosStream):
    """A stream that serves one page, then fails with an error that is no refusal of its first read."""

    def next_change(self) -> dict[str, Any] | None:
        if self._served and not self._current:
            raise OperationFailure("cursor killed", code=237)
        return super().next_change()


def test_a_stream_failing_after_a_page_fails_the_run_and_keeps_the_position_of_that_page(
    mock_db: Any, monkeypatch: Any
) -> None:
    """Only a refusal at the first read drops the saved position (the next run recovers by polling); an error
    after a page fails the run, which the host retries from that page's token."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    set_setting(monkeypatch, "REPORTS_PAGE_SIZE", "1")
    partition = actions_partition_with_token(mock_db, utc_now())

    with pytest.raises(OperationFailure):
        process_partition(
            mock_db,
            partition,
            now=utc_now(),
            settings=get_settings(),
            watch=lambda p, t: FailingAfterAPage([[change("b0", 30)], [change("b1", 20)]]),
        )

    assert mock_db[schema.LEASES].find_one({"_id": partition.lease_id})["token"] == {"_data": "after-batch-1"}


class RefusingQueries:
    """A database whose `bottle_actions` refuses every query, as Cosmos DB refuses a sort its indexing excludes."""

    def __init__(self, db: Any) -> None:
        self._db = db

    def __getitem__(self, name: str) -> Any:
        return Refusing(self._db[name]) if name == schema.BOTTLE_ACTIONS else self._db[name]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


class Refusing:
    def __init__(self, collection: Any) -> None:
        self._collection = collection

    def find(self, *args: Any, **kwargs: Any) -> Any:
        raise OperationFailure("The index path corresponding to the specified order-by item is excluded.", code=2)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._collection, name)


def test_a_polling_query_the_store_refuses_fails_the_run_and_frees_its_lease(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A polling run has no stream position to drop: a query the store refuses fails the run (the host retries
    it, and its error is in the invocation's log) rather than end as if the partition were read, and the lease is
    released for the retry."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "polling")
    partition = next(p for p in map(partition_of, sent_by_dispatch(mock_db, now=utc_now())) if p.feed == ACTIONS_FEED)

    with pytest.raises(OperationFailure, match="order-by item is excluded"):
        process_partition(RefusingQueries(mock_db), partition, now=utc_now(), settings=get_settings())

    assert mock_db[schema.LEASES].find_one({"_id": partition.lease_id})["owner"] is None
