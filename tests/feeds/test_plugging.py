"""The feed machinery with consumers of the tests' own (shared/feeds/consumers.py), none of the app's: the dispatcher
keeps the feeds of the active consumers only, sends an hourly feed's partitions when an hour is due and a trailing
feed's as its consumer says, with the lag it says; the worker hands a claimed partition to its consumer, saves what
the consumer checkpoints, and an error the consumer declares fails the run with the lease released at once. The lag
it reports: an hourly pass under way is on time for its spread and the clock's margin; on Cosmos DB, each feed read as
changes counts the leases over ranges its token reply left out."""

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from pymongo.database import Database

from shared.feeds.consumers import Consumer, Trail, Work
from shared.feeds.dispatcher import dispatch
from shared.feeds.leases import Lease, claim
from shared.feeds.partitions import Feed, Partition, Shape
from shared.feeds.settling import CLOCK_MARGIN, hours_due
from shared.feeds.worker import process_partition
from shared.settings import Settings
from shared.store import schema
from shared.store.retries import RetryPolicy
from tests.cosmos_fakes import EPK_TOP
from tests.reports.feeds import ReplyLeavingOut
from tests.tally_fleet import CLOCK

pytestmark = pytest.mark.own_clock(CLOCK)

NOW = CLOCK + timedelta(minutes=20)  # an hour is due: its end settled 10 minutes ago
SETTINGS = Settings(reports_partitions=2)
HOURLY = Feed(schema.BOTTLE_HEARTBEATS, "", name="plugged_hourly", shape=Shape.HOURLY)
TRAILING = Feed(schema.BOTTLE_HEARTBEATS, "", name="plugged_trailing", shape=Shape.TRAILING)


class TargetDown(Exception):
    """The consumer's own target does not answer."""


class HourlyCounter(Consumer):
    """Marks the hours due as done, and records what each run was given."""

    feed = HOURLY
    failures = (TargetDown,)

    def __init__(self, *, active: bool = True, down: bool = False) -> None:
        self._active, self._down = active, down
        self.runs: list[tuple[str, Lease]] = []

    @property
    def active(self) -> bool:
        return self._active

    def run(self, work: Work, held: Lease) -> Lease:
        self.runs.append((work.partition.lease_id, held))
        if self._down:
            raise TargetDown("the target refused the write")
        done = replace(held, checkpoint_time=hours_due(work.now))
        work.save(done, "plugged")
        work.run.pages += 1
        work.run.caught_up = True
        return done


class Trailer(Consumer):
    """A trailing feed whose due partitions and lag are what the test says."""

    feed = TRAILING

    def __init__(self, due: list[int], lag: timedelta) -> None:
        self._due, self._lag = due, lag

    def run(self, work: Work, held: Lease) -> Lease:
        return held

    def trail(self, db: Database[Any], partitions: Sequence[Partition], *, now: datetime, policy: RetryPolicy) -> Trail:
        return Trail(due=[p for p in partitions if p.index in self._due], lag=self._lag)


def sent(db: Any, consumers: Sequence[Consumer], now: datetime = NOW) -> list[str]:
    messages: list[str] = []
    dispatch(db, consumers, now=now, settings=SETTINGS, send=messages.extend, on_cosmos=False)
    return messages


def lease(db: Any, partition: Partition) -> dict[str, Any]:
    found: dict[str, Any] = db[schema.LEASES].find_one({"_id": partition.lease_id})
    return found


def test_an_hourly_consumers_partitions_are_sent_once_an_hour_is_due_and_its_runs_save_their_position(mock_db):
    consumer = HourlyCounter()

    assert len(sent(mock_db, [consumer])) == SETTINGS.reports_partitions
    for index in range(SETTINGS.reports_partitions):
        partition = Partition(HOURLY, index, SETTINGS.reports_partitions)
        run = process_partition(mock_db, partition, consumer=consumer, now=NOW, settings=SETTINGS)
        assert (run.claimed, run.pages, run.caught_up) == (True, 1, True)
        assert run.checkpoint_time == hours_due(NOW)

    assert [held.checkpoint_time for _, held in consumer.runs] == [None, None]  # each started from scratch
    assert lease(mock_db, Partition(HOURLY, 0, 2))["checkpoint_time"] == hours_due(NOW)
    assert lease(mock_db, Partition(HOURLY, 0, 2))["owner"] is None  # released
    assert sent(mock_db, [consumer], NOW + timedelta(minutes=30)) == []  # nothing due until the next hour
    assert len(sent(mock_db, [consumer], NOW + timedelta(hours=1))) == SETTINGS.reports_partitions


def test_a_failure_the_consumer_declares_fails_the_run_and_frees_the_lease_at_once(mock_db):
    sent(mock_db, [HourlyCounter()])
    partition = Partition(HOURLY, 0, 2)

    with pytest.raises(TargetDown):
        process_partition(mock_db, partition, consumer=HourlyCounter(down=True), now=NOW, settings=SETTINGS)

    assert lease(mock_db, partition)["owner"] is None
    assert lease(mock_db, partition)["checkpoint_time"] is None  # nothing saved
    retried = claim(mock_db, partition, "the retry", now=NOW, lease_for=timedelta(minutes=5), policy=RetryPolicy())
    assert retried is not None  # the retry claims it without waiting for the lease to expire


class Nested(HourlyCounter):
    """While its run holds the lease, a second run of the same partition (another worker given the same message)."""

    def __init__(self) -> None:
        super().__init__()
        self.second: list[bool] = []

    def run(self, work: Work, held: Lease) -> Lease:
        other = HourlyCounter()
        second = process_partition(work.db, work.partition, consumer=other, now=work.now, settings=SETTINGS)
        self.second.append(second.claimed)
        return super().run(work, held)


def test_a_partition_a_run_holds_is_not_claimed_by_a_second_run_meanwhile(mock_db):
    sent(mock_db, [HourlyCounter()])
    consumer = Nested()

    run = process_partition(mock_db, Partition(HOURLY, 0, 2), consumer=consumer, now=NOW, settings=SETTINGS)

    assert run.claimed
    assert consumer.second == [False]  # the lease names the first run as its owner


def test_an_inactive_consumers_feed_gets_no_lease_and_no_message(mock_db):
    assert sent(mock_db, [HourlyCounter(active=False)]) == []
    assert mock_db[schema.LEASES].count_documents({"feed": HOURLY.key}) == 0


def test_a_trailing_feed_is_sent_and_measured_as_its_consumer_says(mock_db):
    messages: list[str] = []
    run = dispatch(
        mock_db,
        [Trailer(due=[1], lag=timedelta(seconds=90))],
        now=NOW,
        settings=SETTINGS,
        send=messages.extend,
        on_cosmos=False,
    )

    assert run.sent == [Partition(TRAILING, 1, 2).lease_id]
    assert run.lag_seconds == {TRAILING.key: 90.0}
    assert run.partitions == 2  # both have leases; one was due


def test_a_feed_that_trails_nothing_says_so_when_asked_for_its_trail(mock_db):
    with pytest.raises(NotImplementedError, match="plugged_hourly is a hourly feed: it trails no other"):
        HourlyCounter().trail(mock_db, [], now=NOW, policy=RetryPolicy())


@pytest.mark.parametrize(
    ("began_before_spread_ended", "lag"),
    [(CLOCK_MARGIN - timedelta(seconds=1), 0.0), (CLOCK_MARGIN, 3600.0)],
    ids=["within-the-margin", "past-it"],
)
def test_an_hourly_pass_under_way_is_on_time_for_its_spread_and_the_clock_margin(
    mock_db: Any, began_before_spread_ended: timedelta, lag: float
) -> None:
    """The hour due is the one pass under way, paced over REPORTS_TALLY_SPREAD_MINUTES: its hours count as done
    (no lag, no alert) until the spread and CLOCK_MARGIN have passed since it began; then it is the hour behind."""
    sent(mock_db, [HourlyCounter()])
    due = hours_due(NOW)
    began = NOW - timedelta(minutes=SETTINGS.reports_tally_spread_minutes) - began_before_spread_ended
    under_way = {
        "checkpoint_time": due - timedelta(hours=1),
        "token": {"start": due - timedelta(hours=1), "end": due, "began": began},
    }
    mock_db[schema.LEASES].update_many({"feed": HOURLY.key}, {"$set": under_way})

    run = dispatch(mock_db, [HourlyCounter()], now=NOW, settings=SETTINGS, send=lambda m: None, on_cosmos=False)

    assert run.lag_seconds == {HOURLY.key: lag}


class ChangesOf(Consumer):
    """A feed read as changes, on Cosmos DB by physical partition; its runs are not the test's."""

    def __init__(self, name: str) -> None:
        self.feed = Feed(schema.BOTTLE_ACTIONS, "received_at", name=name, shape=Shape.CHANGES)

    def run(self, work: Work, held: Lease) -> Lease:
        return held


def test_each_change_feed_counts_in_its_own_lag_its_leases_over_ranges_a_token_reply_left_out(mock_db: Any) -> None:
    """Two feeds read as changes, each with a lease over the lower half of the key space, 30 and 40 minutes
    behind, the others a minute: a reply without that half leaves both leases reading nothing; each feed's lag is
    its own stranded lease's, not only the first feed's or the last's."""
    consumers = [ChangesOf("plugged_changes_a"), ChangesOf("plugged_changes_b")]
    cosmos = ReplyLeavingOut(mock_db, partitions=2)
    dispatch(cosmos, consumers, now=NOW, settings=SETTINGS, send=lambda m: None, on_cosmos=True)
    mock_db[schema.LEASES].update_many({}, {"$set": {"checkpoint_time": NOW - timedelta(minutes=1)}})
    for consumer, behind in zip(consumers, (30, 40), strict=True):
        mock_db[schema.LEASES].update_one(
            {"feed": consumer.feed.key, "_id": {"$regex": ":cosmos:-"}},
            {"$set": {"checkpoint_time": NOW - timedelta(minutes=behind)}},
        )
    cosmos.left_out = {(0, EPK_TOP // 2)}

    run = dispatch(cosmos, consumers, now=NOW, settings=SETTINGS, send=lambda m: None, on_cosmos=True)

    assert run.lag_seconds == {"plugged_changes_a": 30 * 60.0, "plugged_changes_b": 40 * 60.0}
