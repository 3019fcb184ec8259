"""What the report feeds' log says when something is wrong (shared/feeds/sources.py, dispatcher.py, worker.py,
changes.py), as an operator reads it to act: which partition, what the store answered, from where it carries on; which
GetChangeStreamTokens ranges were left out or named twice, and which leases are left over them; a lease a failed run
could not release."""

import logging
from datetime import datetime, timedelta
from typing import Any

import pytest
from pymongo.errors import AutoReconnect, OperationFailure

from shared.consumers.plugged import process_partition
from shared.feeds import worker
from shared.feeds.partitions import Partition
from shared.instants import format_instant, utc_now
from shared.settings import get_settings
from shared.store import schema
from tests.cosmos_fakes import CosmosTokens
from tests.fake_time import FakeTime
from tests.report_client import set_setting
from tests.reports.feeds import (
    ReplyLeavingOut,
    a_run_out_of_budget_after_a_full_page,
    actions_partition_with_token,
    change,
    dispatch_run,
    dispatched,
    run_on_stream,
)

MINUTE = timedelta(minutes=1)
# The feed machinery's modules that log: the pages' sources, the dispatcher, the worker and its reading of changes.
LOGGERS = {"shared.feeds.sources", "shared.feeds.dispatcher", "shared.feeds.worker", "shared.feeds.changes"}


def messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level and r.name in LOGGERS]


def errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno == logging.ERROR and r.name in LOGGERS]


def logged_fields(record: logging.LogRecord, *names: str) -> list[Any]:
    """A record's fields (`extra`), which Application Insights keeps as custom dimensions an operator filters by;
    None for one it lacks."""
    return [vars(record).get(name) for name in names]


class RefusingStream:
    """A stream that opens on the lease's token and refuses it at its first read."""

    def __init__(self, refusal: OperationFailure) -> None:
        self.resume_token: Any = {"_data": "saved"}
        self._refusal = refusal

    def next_change(self) -> None:
        raise self._refusal

    def at_batch_end(self) -> bool:
        return True

    def close(self) -> None:
        pass


def refused_position(mock_db: Any, known: bool, errmsg: str, code: int) -> tuple[Partition, datetime, OperationFailure]:
    """A change-stream partition with a saved token (and, if `known`, a checkpoint time 5 minutes back), and the
    refusal its stream answers: carrying the server's errmsg if `known`, else bare."""
    partition = actions_partition_with_token(mock_db, utc_now())
    checkpoint = (utc_now() - 5 * MINUTE).replace(microsecond=0)
    if known:
        mock_db[schema.LEASES].update_one({"_id": partition.lease_id}, {"$set": {"checkpoint_time": checkpoint}})
    details = {"errmsg": errmsg, "code": code} if known else None
    return partition, checkpoint, OperationFailure(errmsg, code=code, details=details)


def recovery_words(known: bool, refusal: OperationFailure, checkpoint: datetime) -> tuple[str, str, int]:
    """What a refused position's warning says: the server's answer, the checkpoint it recovers from, the overlap."""
    answer = str(refusal.details["errmsg"]) if known and refusal.details else str(refusal)
    since = format_instant(checkpoint) if known else "(none: from the start)"
    return answer, since, get_settings().reports_poll_overlap_seconds


@pytest.mark.parametrize("known", [True, False], ids=["with-checkpoint-and-errmsg", "from-the-start"])
def test_a_position_refused_at_the_first_read_is_logged_with_the_partition_the_answer_and_where_it_recovers_from(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, known: bool
) -> None:
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    partition, checkpoint, refusal = refused_position(mock_db, known, "PartitionKeyRangeGone", 280)

    with caplog.at_level(logging.WARNING):
        process_partition(
            mock_db, partition, now=utc_now(), settings=get_settings(), watch=lambda p, t: RefusingStream(refusal)
        )

    answer, since, overlap = recovery_words(known, refusal, checkpoint)
    assert messages(caplog, logging.WARNING) == [
        f"reports: {partition.lease_id}: the change stream refused its saved position at its first read (code 280: "
        f"{answer}); the next run recovers from the checkpoint time {since} minus {overlap}s"
    ]
    [record] = [r for r in caplog.records if r.levelno == logging.WARNING and r.name in LOGGERS]
    # its fields, as Application Insights' custom dimensions an operator filters the log by
    assert {k: vars(record)[k] for k in ("feed", "partition", "code")} == {
        "feed": partition.feed.key,
        "partition": partition.lease_id,
        "code": 280,
    }


def test_ranges_a_token_reply_leaves_out_are_logged_with_the_leases_left_over_them(
    mock_db: Any, caplog: pytest.LogCaptureFixture
) -> None:
    cosmos = ReplyLeavingOut(mock_db, partitions=4)
    cosmos.left_out = {(0, 0x1000)}
    now = utc_now()
    with caplog.at_level(logging.ERROR):
        dispatch_run(cosmos, now)  # the first reply: no lease over the range yet
    cosmos.left_out = set()
    dispatch_run(cosmos, now + MINUTE)
    cosmos.left_out = {(0x1000, 0x2000), (0x2000, 0x3000)}
    with caplog.at_level(logging.ERROR):
        dispatch_run(cosmos, now + 2 * MINUTE)

    gap = (
        "reports: GetChangeStreamTokens gave bottle_actions no token for the feed ranges {}: nothing reads them "
        "until a reply covers them; their leases ({}) are kept, and count in the feed's lag"
    )
    stranded = "reports:bottle_actions:cosmos:1000-2000, reports:bottle_actions:cosmos:2000-3000"
    assert messages(caplog, logging.ERROR) == [
        gap.format("['', '1000')", "none yet"),
        gap.format("['1000', '3000')", stranded),
    ]
    # their fields, as Application Insights' custom dimensions an operator filters the log by
    assert [logged_fields(r, "feed", "problem", "ranges", "kept") for r in errors(caplog)] == [
        ["bottle_actions", "gap", "['', '1000')", ""],
        ["bottle_actions", "gap", "['1000', '3000')", stranded],
    ]


def test_ranges_a_token_reply_names_twice_are_logged_with_the_feed(
    mock_db: Any, caplog: pytest.LogCaptureFixture
) -> None:
    cosmos = ReplyLeavingOut(mock_db, partitions=2)
    cosmos.extra = [(0x1000, 0x3000)]

    with caplog.at_level(logging.ERROR):
        dispatch_run(cosmos, utc_now())

    assert messages(caplog, logging.ERROR) == [
        "reports: GetChangeStreamTokens gave bottle_actions tokens whose feed ranges overlap at "
        "['1000', '2000'), ['2000', '3000'); those keys are read twice"
    ]
    assert [logged_fields(r, "feed", "problem", "ranges") for r in errors(caplog)] == [
        ["bottle_actions", "overlap", "['1000', '2000'), ['2000', '3000')"]
    ]


class LeasesUnreachable:
    """A database whose leases collection stops answering once a run has claimed its lease."""

    def __init__(self, db: Any) -> None:
        self._db = db

    def __getitem__(self, name: str) -> Any:
        return Unreachable(self._db[name]) if name == schema.LEASES else self._db[name]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


class Unreachable:
    def __init__(self, collection: Any) -> None:
        self._collection = collection

    def update_one(self, *args: Any, **kwargs: Any) -> Any:
        raise AutoReconnect("connection closed")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._collection, name)


class Throttled(RefusingStream):
    def __init__(self) -> None:
        super().__init__(OperationFailure("Request rate is large", code=16500))


def test_a_failed_run_whose_lease_cannot_be_released_logs_which_lease_and_why(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    set_setting(monkeypatch, "STORE_RETRY_BASE_MS", "1")
    partition = actions_partition_with_token(mock_db, utc_now())

    with caplog.at_level(logging.WARNING), pytest.raises(OperationFailure):
        process_partition(
            LeasesUnreachable(mock_db),
            partition,
            now=utc_now(),
            settings=get_settings(),
            watch=lambda p, t: Throttled(),
        )

    assert messages(caplog, logging.WARNING)[-1] == f"reports: could not release {partition.lease_id}: StoreUnavailable"
    released = [r for r in caplog.records if r.name in LOGGERS and "could not release" in r.getMessage()]
    assert logged_fields(released[-1], "feed", "partition", "error") == [
        partition.feed.key,
        partition.lease_id,
        "StoreUnavailable",
    ]


def test_a_failed_run_releases_its_lease_at_the_time_it_gave_it_up(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    partition = actions_partition_with_token(mock_db, utc_now())
    now = utc_now().replace(microsecond=0)

    with pytest.raises(OperationFailure):
        process_partition(
            mock_db, partition, now=now, settings=get_settings(), clock=lambda: 7.0, watch=lambda p, t: Throttled()
        )

    lease = mock_db[schema.LEASES].find_one({"_id": partition.lease_id})
    assert (lease["owner"], lease["released_at"]) == (None, now)


class RejectingWatch:
    """A store that rejects the lease's saved token when the stream opens (expired), and opens any other."""

    def __init__(self, refusal: OperationFailure) -> None:
        self._refusal = refusal

    def __call__(self, partition: Any, token: Any) -> Any:
        if token == {"_data": "saved"}:
            raise self._refusal
        return RecoveredStream()


class RecoveredStream(RefusingStream):
    def __init__(self) -> None:
        super().__init__(OperationFailure("unused"))
        self.resume_token = {"_data": "fresh"}

    def next_change(self) -> None:
        return None


@pytest.mark.parametrize("known", [True, False], ids=["with-checkpoint-and-errmsg", "from-the-start"])
def test_a_rejected_resume_token_is_logged_with_the_partition_the_answer_and_where_it_recovers_from(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, known: bool
) -> None:
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    partition, checkpoint, refusal = refused_position(mock_db, known, "resume token expired", 286)

    with caplog.at_level(logging.INFO):
        run = process_partition(
            mock_db, partition, now=utc_now(), settings=get_settings(), watch=RejectingWatch(refusal)
        )

    assert run.recovered
    answer, since, overlap = recovery_words(known, refusal, checkpoint)
    assert messages(caplog, logging.WARNING) == [
        f"reports: the resume token of {partition.lease_id} was rejected (code 286: {answer}); recovering from its "
        f"checkpoint time {since} minus {overlap}s, then continuing on a new change stream"
    ]
    assert messages(caplog, logging.INFO) == []  # it had a saved position
    [warned] = [r for r in caplog.records if r.levelno == logging.WARNING and r.name in LOGGERS]
    assert logged_fields(warned, "feed", "partition", "code") == [partition.feed.key, partition.lease_id, 286]


@pytest.mark.parametrize("known", [True, False], ids=["after-a-checkpoint", "first-run"])
def test_a_store_without_change_streams_is_logged_as_needing_polling(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, known: bool
) -> None:
    """A first run says it builds from the start; a store that cannot open a change stream at all says what to
    set (the run fails)."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    partition = actions_partition_with_token(mock_db, utc_now())
    position = {"token": None, "checkpoint_time": utc_now() - MINUTE if known else None}
    mock_db[schema.LEASES].update_one({"_id": partition.lease_id}, {"$set": position})
    unsupported = OperationFailure("The $changeStream stage is only supported on replica sets", code=40573)

    def watch(p: Any, token: Any) -> Any:
        raise unsupported

    with caplog.at_level(logging.INFO), pytest.raises(OperationFailure):
        process_partition(mock_db, partition, now=utc_now(), settings=get_settings(), watch=watch)

    first = f"reports: {partition.lease_id} has no saved position; building from the start of its source"
    assert messages(caplog, logging.INFO) == ([] if known else [first])
    infos = [r for r in caplog.records if r.levelno == logging.INFO and r.name in LOGGERS]
    expected = [] if known else [[partition.feed.key, partition.lease_id]]
    assert [logged_fields(r, "feed", "partition") for r in infos] == expected
    assert messages(caplog, logging.ERROR) == [
        f"reports: {partition.lease_id} has no change stream here ({unsupported}); a store without change streams "
        "(a standalone mongod, a Cosmos DB account with them off) needs CHANGE_SOURCE=polling"
    ]
    assert [logged_fields(r, "feed", "partition") for r in errors(caplog)] == [[partition.feed.key, partition.lease_id]]


def test_a_throttled_recovery_stream_fails_the_run_without_calling_the_store_unable_to_stream(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    partition = actions_partition_with_token(mock_db, utc_now())
    mock_db[schema.LEASES].update_one({"_id": partition.lease_id}, {"$set": {"token": None}})

    def watch(p: Any, token: Any) -> Any:
        raise OperationFailure("Request rate is large", code=16500)

    with caplog.at_level(logging.ERROR), pytest.raises(OperationFailure):
        process_partition(mock_db, partition, now=utc_now(), settings=get_settings(), watch=watch)

    assert messages(caplog, logging.ERROR) == []


def test_a_partition_of_an_old_layout_is_logged_with_the_range_cosmos_db_no_longer_has(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    cosmos = CosmosTokens(mock_db, partitions=2)
    now = utc_now()
    partition = dispatched(cosmos, now)[0]
    cosmos.partitions = 3  # Cosmos DB split a physical partition: the old ranges are gone

    with caplog.at_level(logging.INFO):
        run = process_partition(
            cosmos, partition, now=now, settings=get_settings(), watch=lambda p, t: RecoveredStream()
        )

    assert run.layout_changed
    assert messages(caplog, logging.INFO)[-1] == (
        f"reports: {partition.lease_id} belongs to an old partition layout (bottle_actions has no physical "
        f"partition {partition.feed_range} now); leaving it"
    )
    [info] = [r for r in caplog.records if r.levelno == logging.INFO and "old partition layout" in r.getMessage()]
    assert logged_fields(info, "feed", "partition") == [partition.feed.key, partition.lease_id]


def test_a_stream_throttled_past_the_budget_is_logged_with_the_partition_and_how_often_it_was_asked_again(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    set_setting(monkeypatch, "REPORTS_PAGE_SIZE", "2")
    set_setting(monkeypatch, "REPORTS_TIME_BUDGET_SECONDS", "4")
    partition = actions_partition_with_token(mock_db, utc_now())

    with caplog.at_level(logging.WARNING):
        run_on_stream(mock_db, partition, [[change("b0", 30), change("b1", 29)], *[None] * 100], FakeTime())

    assert messages(caplog, logging.WARNING) == [
        f"reports: {partition.lease_id}: the change stream kept answering empty pages after a full one (6 asked "
        "again, throttled?); the run ends with its budget and the next run carries on"
    ]
    [warned] = [r for r in caplog.records if r.levelno == logging.WARNING and r.name in LOGGERS]
    assert logged_fields(warned, "feed", "partition", "asked_again") == [partition.feed.key, partition.lease_id, 6]


def test_a_run_out_of_budget_mid_backlog_without_empty_pages_logs_no_throttling(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    set_setting(monkeypatch, "REPORTS_PAGE_SIZE", "2")
    partition = actions_partition_with_token(mock_db, utc_now())

    with caplog.at_level(logging.WARNING):
        a_run_out_of_budget_after_a_full_page(mock_db, partition, [change("b0", 30), change("b1", 29)])

    assert messages(caplog, logging.WARNING) == []


def test_a_run_that_lost_its_lease_logs_which_one(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    partition = actions_partition_with_token(mock_db, utc_now())
    monkeypatch.setattr(worker, "checkpoint", lambda *args, **kwargs: False)  # taken over: the fence fails

    with caplog.at_level(logging.WARNING):
        run = run_on_stream(mock_db, partition, [[change("b0", 30)]], FakeTime())

    assert run.lost_lease
    assert messages(caplog, logging.WARNING) == [
        f"reports: lost the lease of {partition.lease_id} to another worker; stopping unsaved"
    ]
    [warned] = [r for r in caplog.records if r.levelno == logging.WARNING and r.name in LOGGERS]
    assert logged_fields(warned, "feed", "partition") == [partition.feed.key, partition.lease_id]
