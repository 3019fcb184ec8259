"""A report feed's worker run (shared/feeds/worker.py) as a user sees its result: a Cosmos DB change stream
opened as Cosmos DB requires and its changes in the hourly reports, a late action of a day already rolled up in
that day's report at once, reports stamped with the time they were written, the run's count of what it wrote,
a throttled stream asked again up to the budget's very end, and an empty first page after a full one on Cosmos
DB."""

import json
import logging
from datetime import timedelta
from typing import Any

import pytest
from pymongo.errors import OperationFailure

from shared.consumers.plugged import dispatch, partition_of, process_partition
from shared.feeds.partitions import Partition
from shared.instants import set_clock, utc_now
from shared.reports.feeds import ACTIONS_FEED
from shared.settings import get_settings
from shared.store import schema
from tests.api import SPEC, iso, opened, post_events, provisioned
from tests.cosmos_fakes import CosmosTokens
from tests.fake_time import FakeTime
from tests.report_client import get_reports, set_setting
from tests.reports.feeds import CosmosStream, ServerStream, actions_partition_with_token, change, run_on_stream

MINUTE = timedelta(minutes=1)


def actions_partitions(db: Any, now: Any, **kwargs: Any) -> list[Partition]:
    messages: list[str] = []
    dispatch(db, now=now, settings=get_settings(), send=messages.extend, **kwargs)
    found = [partition_of(json.loads(m)) for m in messages]
    return [p for p in found if p.feed == ACTIONS_FEED]


def opened_in(granularity: str, start: Any, end: Any) -> int:
    response = get_reports(SPEC["user_id"], granularity=granularity, **{"from": iso(start), "to": iso(end)})
    assert response.status == 200, response.body
    return sum(report["opened"] for report in response.body["reports"])


# --- Cosmos DB's change stream ------------------------------------------------------------------------------------


class CosmosWatch:
    """A database whose `bottle_actions.watch` takes only what Cosmos DB for MongoDB takes: "The $match stage,
    $project stage, and fullDocument option are required to get the change streams"
    (https://learn.microsoft.com/azure/cosmos-db/mongodb/change-streams), with its example pipeline
    `[{$match: {operationType: {$in: ["insert", "update", "replace"]}}}, {$project: {_id: 1, fullDocument: 1,
    ns: 1, documentKey: 1}}]` and `{fullDocument: "updateLookup"}`. Its streams serve `batches`."""

    def __init__(self, db: Any, batches: list[list[dict[str, Any]]]) -> None:
        self._db, self.batches = db, batches

    def __getitem__(self, name: str) -> Any:
        return Watched(self, self._db[name]) if name == schema.BOTTLE_ACTIONS else self._db[name]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


class Watched:
    def __init__(self, cosmos: CosmosWatch, collection: Any) -> None:
        self._cosmos, self._collection = cosmos, collection

    def watch(self, pipeline: Any, full_document: Any = None, resume_after: Any = None, **_: Any) -> ServerStream:
        stages = [next(iter(stage)) for stage in pipeline or []]
        operations = (pipeline or [{}])[0].get("$match", {}).get("operationType")
        if stages != ["$match", "$project"] or operations is None or full_document != "updateLookup":
            raise OperationFailure("change streams need the $match and $project stages and fullDocument", code=2)
        return ServerStream(self._cosmos.batches, resume_after)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._collection, name)


def test_a_cosmos_partition_opens_its_change_stream_as_cosmos_db_requires_and_reports_its_changes(
    mock_db: Any, monkeypatch: Any
) -> None:
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    now = utc_now()
    at = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
    key = provisioned()
    assert post_events("bottle-1", key, opened(at + 10 * MINUTE)).status == 202
    document = mock_db[schema.BOTTLE_ACTIONS].find_one()
    entry = {"fullDocument": document, "documentKey": {"_id": document["_id"]}, "ns": {"coll": "bottle_actions"}}
    (partition,) = actions_partitions(CosmosTokens(mock_db, partitions=1), now, on_cosmos=True)
    mock_db[schema.LEASES].update_one({"_id": partition.lease_id}, {"$set": {"token": {"_data": "after-0"}}})

    run = process_partition(CosmosWatch(mock_db, [[entry]]), partition, now=now, settings=get_settings())

    assert (run.changes, run.caught_up) == (1, True)
    assert opened_in("hour", at, at + timedelta(hours=1)) == 1


def test_an_empty_first_page_on_cosmos_after_a_full_one_ends_the_run_when_nothing_was_written_since(
    mock_db: Any, monkeypatch: Any
) -> None:
    """The check for documents received after the checkpoint names no buckets on Cosmos DB (its partitions have
    none): the run ends at once, without backing off."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    now = utc_now()
    (partition,) = actions_partitions(CosmosTokens(mock_db, partitions=1), now, on_cosmos=True)
    position = {"token": {"_data": "saved"}, "checkpoint_time": now - MINUTE, "behind": True}
    mock_db[schema.LEASES].update_one({"_id": partition.lease_id}, {"$set": position})

    run = run_on_stream(mock_db, partition, [None, None, [change("b0", 1)]], time_ := FakeTime())

    assert (run.changes, run.caught_up, run.empty_retries, time_.slept) == (0, True, 0, [])
    assert mock_db[schema.LEASES].find_one({"_id": partition.lease_id})["behind"] is False


def test_a_bucket_partition_backs_off_only_for_documents_of_its_own_buckets(mock_db: Any, monkeypatch: Any) -> None:
    """After a full page, an empty first page backs off only if the partition's own buckets received something
    since its checkpoint: another partition's documents are that partition's run's to read."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    now = utc_now()
    partition = actions_partition_with_token(mock_db, now)
    assert partition.buckets is not None
    assert partition.buckets.high < 1024  # another partition's buckets follow
    position = {"checkpoint_time": now - 10 * MINUTE, "behind": True}
    mock_db[schema.LEASES].update_one({"_id": partition.lease_id}, {"$set": position})
    elsewhere = {**change("b9", 1)["fullDocument"], "bucket": partition.buckets.high}
    mock_db[schema.BOTTLE_ACTIONS].insert_one(elsewhere)

    run = run_on_stream(mock_db, partition, [None, None, [change("b0", 1)]], time_ := FakeTime())

    assert (run.changes, run.caught_up, time_.slept) == (0, True, [])


# --- what a run writes --------------------------------------------------------------------------------------------


@pytest.fixture
def polling(mock_db: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    set_setting(monkeypatch, "CHANGE_SOURCE", "polling")
    return mock_db


def test_a_late_action_of_a_day_already_rolled_up_is_in_that_days_report_after_the_feeds_run(polling: Any) -> None:
    """An open at 23:30 stored at 03:00 the next day, after that day's scheduled roll-up: the feed's run rolls the
    day up again at once, rather than leaving the daily report short until a rebuild."""
    base = (utc_now() + timedelta(days=2)).replace(hour=3, minute=0, second=0, microsecond=0)
    day = base.replace(hour=0) - timedelta(days=1)
    set_clock(lambda: base)
    key = provisioned()
    assert post_events("bottle-1", key, opened(base - timedelta(hours=3, minutes=30))).status == 202

    for partition in actions_partitions(polling, base):
        process_partition(polling, partition, now=base, settings=get_settings())

    assert opened_in("hour", day + timedelta(hours=23), day + timedelta(days=1)) == 1
    assert opened_in("day", day, day + timedelta(days=1)) == 1


def test_a_runs_reports_are_stamped_when_written_and_its_count_covers_every_page(
    polling: Any, monkeypatch: Any
) -> None:
    """Two pages, one per hour, a second of the worker's clock apart: each hourly report's `updated_at` is the time
    its page was written (a reader polling by it never misses a page written late in a long run), and the run
    counts both reports it wrote."""
    set_setting(monkeypatch, "REPORTS_PAGE_SIZE", "1")
    now = utc_now().replace(microsecond=0)
    hour = now.replace(minute=0, second=0) - timedelta(hours=3)
    key = provisioned()
    set_clock(lambda: now - 10 * MINUTE)
    assert post_events("bottle-1", key, opened(hour + MINUTE)).status == 202
    set_clock(lambda: now - 5 * MINUTE)
    assert post_events("bottle-1", key, opened(hour + timedelta(hours=1, minutes=1), event_id="second")).status == 202
    set_clock(None)
    ticks = iter(range(0, 10_000))  # a second a look at the clock

    runs = [
        process_partition(polling, p, now=now, settings=get_settings(), clock=lambda: next(ticks))
        for p in actions_partitions(polling, now)
    ]

    assert sum(run.hourly_written for run in runs) == 2
    assert max(run.hourly_written for run in runs) == 2  # both in one run: its count is of both pages
    stamps = sorted(doc["updated_at"] for doc in polling[schema.USER_HOURLY_REPORTS].find())
    assert len(stamps) == 2
    assert now < stamps[0] < stamps[1]  # the worker's clock had moved on past `now` when it wrote each


def test_a_throttled_stream_is_asked_again_up_to_the_very_end_of_the_budget(mock_db: Any, monkeypatch: Any) -> None:
    """The last wait is what the budget has left, however short: the stream is asked once more then."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    set_setting(monkeypatch, "REPORTS_PAGE_SIZE", "2")
    set_setting(monkeypatch, "REPORTS_TIME_BUDGET_SECONDS", "4")
    partition = actions_partition_with_token(mock_db, utc_now())
    time_ = FakeTime()

    run = run_on_stream(mock_db, partition, [[change("b0", 30), change("b1", 29)], *[None] * 100], time_)

    assert time_.slept == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 0.9])  # 0.1 s doubling; then the 0.9 s left
    assert (run.empty_retries, run.caught_up) == (6, False)


def test_a_first_run_on_cosmos_recovers_from_a_fresh_token_and_reads_on_from_the_stream(
    mock_db: Any, monkeypatch: Any
) -> None:
    """A Cosmos DB partition without a saved position polls from the start, then reads on from the change stream
    it opened (as Cosmos DB requires) at its range's present token."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    now = utc_now()
    cosmos = CosmosTokens(mock_db, partitions=1)
    (partition,) = actions_partitions(cosmos, now, on_cosmos=True)
    late = change("b1", 10)

    run = process_partition(CosmosWatch(cosmos, [[late]]), partition, now=now, settings=get_settings())

    assert (run.recovered, run.changes, run.caught_up) == (True, 1, True)
    saved = mock_db[schema.LEASES].find_one({"_id": partition.lease_id})
    assert saved["token"] == {"_data": "after-1"}


def test_polling_on_cosmos_db_partitions_by_buckets_without_asking_for_change_stream_tokens(
    mock_db: Any, monkeypatch: Any
) -> None:
    """An account with change streams off has no GetChangeStreamTokens to name physical partitions by: polling
    reads bucket ranges on any store, and its dispatch must not fail asking."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "polling")

    partitions = actions_partitions(mock_db, utc_now(), on_cosmos=True)  # mongomock: no such command

    assert partitions
    assert not any(p.cosmos for p in partitions)


@pytest.mark.parametrize(
    ("uri", "by_feed_range"),
    [
        ("mongodb://pillbottle:secret@pillbottle.mongo.cosmos.azure.com:10255/?ssl=true&replicaSet=globaldb", True),
        ("mongodb://localhost:27017/", False),
    ],
)
def test_the_timer_s_dispatch_tells_cosmos_db_by_its_connection_string(
    uri: str, by_feed_range: bool, mock_db: Any, monkeypatch: Any
) -> None:
    """The timer function passes no `on_cosmos`: a Cosmos DB account, known by its endpoint, is read by its
    physical partitions (one lease per feed range its GetChangeStreamTokens names), any other store by buckets."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    set_setting(monkeypatch, "MONGODB_CONNECTION_STRING", uri)

    partitions = actions_partitions(CosmosTokens(mock_db, partitions=3), utc_now())

    assert [p.cosmos for p in partitions] == [by_feed_range] * (
        3 if by_feed_range else get_settings().reports_partitions
    )


# --- an idle partition after a full page ---------------------------------------------------------------------------

CHANGE_STREAMS = "https://learn.microsoft.com/azure/cosmos-db/mongodb/change-streams"


class IdleStream(CosmosStream):
    """A partition's stream that has nothing new and answers each empty batch with its position moved on: a stream
    that answered (the store's, and MongoDB's, postBatchResumeToken moves past the writes the partition does not
    hold). A throttled stream's empty page keeps its position (CosmosStream's)."""

    def _next_batch(self) -> bool:
        if super()._next_batch():
            return True
        self._served += 1
        self._token = {"_data": f"idle-after-{self._served}"}
        return False


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_an_idle_cosmos_partition_after_a_full_page_ends_its_run_at_its_first_answered_empty_page(
    mock_db: Any, monkeypatch: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """CHANGE_STREAMS, Error handling: "HTTP error code 16500 - When the change stream is throttled, it returns an
    empty page." An empty page is a throttled one only while the stream's position stands still: one that moved
    it was answered, so nothing waits in the partition, however full its last page was. A physical partition with
    nothing new, whose last run ended on a full page (`behind`), while other partitions are written to (the check
    for documents after the checkpoint cannot name a physical partition): it spent its whole budget asking empty
    pages again and logged "throttled?" every run; now it ends at once, caught up, and the lease forgets the full
    page."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    now = utc_now()
    (partition,) = actions_partitions(CosmosTokens(mock_db, partitions=1), now, on_cosmos=True)
    position = {"token": {"_data": "saved"}, "checkpoint_time": now - 10 * MINUTE, "behind": True}
    mock_db[schema.LEASES].update_one({"_id": partition.lease_id}, {"$set": position})
    mock_db[schema.BOTTLE_ACTIONS].insert_one(change("elsewhere", 1)["fullDocument"])  # written after the checkpoint
    time_ = FakeTime()
    stream = IdleStream([None] * 1000)

    with caplog.at_level(logging.WARNING):
        run = process_partition(
            mock_db,
            partition,
            now=now,
            settings=get_settings(),
            clock=time_,
            sleep=time_.sleep,
            watch=lambda p, t: stream,
        )

    assert (run.changes, run.caught_up, run.empty_retries, time_.slept) == (0, True, 0, [])
    assert warnings_of(caplog) == []
    saved = mock_db[schema.LEASES].find_one({"_id": partition.lease_id})
    assert (saved["behind"], saved["token"]) == (False, {"_data": "idle-after-1"})


def test_a_partition_idle_after_a_full_page_within_a_run_stops_asking_at_its_first_answered_empty_page(
    mock_db: Any, monkeypatch: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The same within a run: a full page that happened to end the partition's backlog, then empty pages that move
    its position (CHANGE_STREAMS: a throttled stream "returns an empty page"; one that moves on was answered)."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    set_setting(monkeypatch, "REPORTS_PAGE_SIZE", "2")
    partition = actions_partition_with_token(mock_db, utc_now())
    time_ = FakeTime()
    stream = IdleStream([[change("b0", 30), change("b1", 29)], *[None] * 1000])

    with caplog.at_level(logging.WARNING):
        run = process_partition(
            mock_db, partition, now=utc_now(), settings=get_settings(), clock=time_, sleep=time_.sleep,
            watch=lambda p, t: stream,
        )  # fmt: skip

    assert (run.changes, run.caught_up, run.empty_retries, time_.slept) == (2, True, 0, [])
    assert warnings_of(caplog) == []
    assert mock_db[schema.LEASES].find_one({"_id": partition.lease_id})["behind"] is False


def test_empty_pages_that_never_move_after_a_full_one_are_asked_again_a_bounded_number_of_times_once(
    mock_db: Any, monkeypatch: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """CHANGE_STREAMS: "When the change stream is throttled, it returns an empty page." Empty pages whose position
    never moves may be throttling, or a partition with nothing new whose position stands still: asked again at most
    THROTTLED_RETRIES times (0.1 s doubling to 2 s, about 9 s), not for the whole 45 s budget; the run then ends,
    saying so, and the lease forgets the full page, so the next run does not wait again on its first empty page."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    set_setting(monkeypatch, "REPORTS_PAGE_SIZE", "2")
    partition = actions_partition_with_token(mock_db, utc_now())
    time_ = FakeTime()

    with caplog.at_level(logging.WARNING):
        run = run_on_stream(mock_db, partition, [[change("b0", 30), change("b1", 29)], *[None] * 1000], time_)
    saved = mock_db[schema.LEASES].find_one({"_id": partition.lease_id})
    later = run_on_stream(mock_db, partition, [None] * 1000, later_time := FakeTime())

    assert time_.slept == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0])
    assert (run.changes, run.empty_retries, run.caught_up) == (2, 8, False)
    assert warnings_of(caplog) == [
        f"reports: {partition.lease_id}: the change stream answered 8 empty pages in a row after a full one, its "
        "position unmoved (throttled, or nothing new and a position that stands still); the run ends and the next "
        "run carries on"
    ]
    [record] = [r for r in caplog.records if r.levelno == logging.WARNING]
    # its fields, as Application Insights' custom dimensions an operator filters the log by
    assert {k: vars(record)[k] for k in ("feed", "partition", "asked_again")} == {
        "feed": partition.feed.key,
        "partition": partition.lease_id,
        "asked_again": 8,
    }
    assert (saved["behind"], saved["token"]) == (False, {"_data": "after-batch-1"})
    assert (later.caught_up, later.empty_retries, later_time.slept) == (True, 0, [])
