"""The heartbeat tally: what it counts where the ring, the cursor, the leases, the window
and the roll-ups meet (shared/reports/tally.py). Each test drives the app's own provisioning, ingestion, tally
and actions consumer on one store with chosen server clocks (tests/tally_fleet.py)."""

import json
import re
from datetime import datetime, timedelta
from typing import Any

import pytest

from shared.consumers.plugged import dispatch, partition_of, process_partition
from shared.devices.heartbeat_document import USER_BUCKET
from shared.feeds.leases import Lease
from shared.feeds.sweeps import UserPages
from shared.reports import aggregation
from shared.reports.aggregation import write_guarded
from shared.reports.feeds import HEARTBEAT_TALLY
from shared.reports.rebuild import rebuild
from shared.settings import Settings
from shared.store import schema
from shared.store.partitioning import BucketRange
from shared.store.setup import backfill_buckets
from tests.report_client import work
from tests.tally_fleet import CLOCK, DAY, HOUR, POLICY, Fleet, opened, user_in
from tools.host.worker import InvocationFailed

# The tests play their instants from a fixed day: the clock runs from a week after it (tests/tally_fleet.py).
pytestmark = pytest.mark.own_clock(CLOCK)


def every_half_hour(start: datetime, end: datetime) -> list[datetime]:
    moments, at = [], start
    while at < end:
        moments.append(at)
        at += timedelta(minutes=30)
    return moments


@pytest.mark.parametrize("retired", [schema.BOTTLE_HEARTBEATS, schema.USER_HOURLY_REPORTS])
def test_a_work_message_of_a_retired_feed_still_queued_after_the_upgrade_is_dropped(mock_db: Any, retired: str) -> None:
    """Messages for the heartbeat documents' change feed and the hourly reports' feed may sit in the queue when
    the tally's version is deployed: the worker drops them (docs/reports.md), rather than failing five times into the
    poison queue, where they would count as failures and alert."""
    message = json.dumps({"feed": retired, "partition": 0, "of": 4, "cosmos": False})

    work(message)  # no error

    assert mock_db[schema.LEASES].count_documents({}) == 0
    with pytest.raises(InvocationFailed, match="ValueError: not a report partition"):
        work(json.dumps({"feed": "bottles", "partition": 0, "of": 4, "cosmos": False}))


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("not json", "a work message is JSON, not b'not json'"),
        ("[1, 2]", "a work message is a JSON object, not [1, 2]"),
    ],
)
def test_a_report_work_message_that_is_not_a_json_object_fails_the_invocation_saying_so(
    mock_db: Any, body: str, problem: str
) -> None:
    """The host retries it and then moves it to the poison queue; the failure its log shows names what was
    wrong with the message (JSON that is no object failed with an AttributeError deep in the partition's parse)."""
    with pytest.raises(InvocationFailed, match=re.escape(f"ValueError: {problem}")):
        work(body)

    assert mock_db[schema.LEASES].count_documents({}) == 0


def test_a_user_whose_bottles_move_away_between_the_reads_of_a_page_is_passed_over(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page full of one user's documents reads the user again whole; if the user's bottles were reassigned in
    between (to a user of another bucket), that read finds nothing, and the cursor still moves on."""
    first, second, moved_to = user_in(0, 100), user_in(400, 500), user_in(900, 1000)
    fleet = Fleet(mock_db, Settings(reports_page_size=2))
    for bottle_id in ("b1", "b2", "b3"):
        fleet.provision(bottle_id, first, DAY)
    fleet.provision("b4", second, DAY)
    pages = UserPages(mock_db[schema.BOTTLE_HEARTBEATS], BucketRange(0, 1), after=None, size=2, policy=POLICY)
    real_find = pages._find
    reads: list[dict[str, Any]] = []

    def find(query: dict[str, Any], *, limit: int) -> list[dict[str, Any]]:
        found = real_find(query, limit=limit)
        reads.append(query)
        if len(reads) == 1:  # the first page has read two of the first user's three bottles: now they move
            for bottle_id in ("b1", "b2", "b3"):
                fleet.provision(bottle_id, moved_to, DAY + HOUR)
        return found

    monkeypatch.setattr(pages, "_find", find)
    seen: set[str] = set()
    while (page := pages.next_page()) is not None:
        seen |= {str(d["_id"]) for d in page}

    assert seen == {"b1", "b2", "b3", "b4"}


def test_with_the_shortest_window_every_prompt_heartbeat_is_counted(mock_db: Any) -> None:
    """An hour must stay in the ring until the tally has counted it, some minutes after it closed."""
    shortest = min(int(getattr(c, "ge", 1 << 30)) for c in Settings.model_fields["heartbeat_window_hours"].metadata)
    fleet = Fleet(mock_db, Settings(heartbeat_window_hours=shortest))
    fleet.provision("b1", "u1", DAY)
    for at in every_half_hour(DAY + timedelta(minutes=2), DAY + 8 * HOUR):
        fleet.beat("b1", at)  # at :02 and :32
        fleet.tally(at + timedelta(minutes=10))  # a pass at :12 counts the hour that closed 12 minutes ago
    fleet.tally(DAY + 9 * HOUR)

    assert fleet.hourly("u1") == {DAY + h * HOUR: 2 for h in range(8)}


def test_a_tally_that_fell_behind_by_more_than_the_window_still_rolls_up_the_days_it_passed(mock_db: Any) -> None:
    """An action counted while its day was open is rolled up into the day by the tally's pass over the day's
    last block; a tally that comes back after a long stop must still roll those days up (a day of them a pass,
    oldest first, beside its last window's, so that no page's work grows with the stop). Every user's roll-up at
    the block's end (not staggered), so the passes that roll each day up are known."""
    fleet = Fleet(mock_db, Settings(daily_rollup_staggered=False))
    fleet.provision("b1", "u1", DAY)
    fleet.beat("b1", DAY + timedelta(hours=5, minutes=2))
    fleet.tally(DAY + timedelta(hours=6, minutes=10))  # counts up to 06:00, rolls the day's first block up
    for day in range(4):  # the actions' consumer counts each in its hour at once, while its day is open
        fleet.send("b1", opened(DAY + timedelta(days=day, hours=8)), now=DAY + timedelta(days=day, hours=8))
    # The tally stops (its workers failing, say) and comes back four days later; then runs every hour.
    back = DAY + timedelta(days=4, hours=1, minutes=10)
    assert fleet.tally(back)
    # The first pass back rolls up its last window of days and the oldest day it is behind: not yet the day
    # between them.
    assert fleet.daily("u1", DAY + timedelta(days=2)) is None
    for hours in range(1, 4):
        assert fleet.tally(back + hours * HOUR)

    days = [fleet.daily("u1", DAY + timedelta(days=day)) for day in range(4)]
    assert [None if d is None else (d.get("opened", 0), d.get("heartbeats", 0)) for d in days] == [
        (1, 1),
        (1, 0),
        (1, 0),
        (1, 0),
    ]


def test_a_first_pass_rolls_up_the_day_of_an_hour_it_finds_in_a_silent_bottles_ring(mock_db: Any) -> None:
    """A ring is cleared only by the bottle's own writes, so a bottle silent since keeps hours older than the
    window: the first pass counts them, and must roll their days up too, not only those of its last window."""
    fleet = Fleet(mock_db, Settings())
    fleet.provision("b1", "u1", DAY)
    fleet.beat("b1", DAY + timedelta(hours=21, minutes=54))  # then silent
    fleet.tally(DAY + timedelta(days=2, minutes=15))  # the partition's first pass (a new deployment, say)

    assert fleet.hourly("u1") == {DAY + 21 * HOUR: 1}
    day = fleet.daily("u1", DAY)
    assert day is not None
    assert day["heartbeats"] == 1


def test_a_first_pass_that_completes_days_after_its_lease_was_made_rolls_up_the_days_since(mock_db: Any) -> None:
    """Actions counted while their day was open reach the day only through the tally's roll-ups; a partition
    whose first pass failed for days (or was never run) rolls up every day since its lease was made."""
    fleet = Fleet(mock_db, Settings())
    fleet.partition.lease = Lease(created_at=DAY)  # dispatched at midnight; its first passes fail
    fleet.provision("b1", "u1", DAY)
    fleet.send("b1", opened(DAY + timedelta(hours=8)), now=DAY + timedelta(hours=8))
    assert fleet.tally(DAY + timedelta(days=2, hours=1, minutes=10))

    day = fleet.daily("u1", DAY)
    assert day is not None
    assert day["opened"] == 1


def test_a_tally_far_behind_leaves_the_daily_reports_of_days_whose_hours_may_have_expired(mock_db: Any) -> None:
    """The daily reports are the long-term history: a day whose hourly reports may have expired is never rolled
    up again from what is left of them (here, nothing), however far behind the tally's checkpoint is."""
    fleet = Fleet(mock_db, Settings())
    long_ago = DAY - timedelta(days=40)
    history = {"_id": f"u1|{long_ago:%Y-%m-%d}", "user_id": "u1", "day": long_ago, "opened": 3, "bottles": []}
    mock_db[schema.USER_DAILY_REPORTS].insert_one(history | {"updated_at": long_ago})
    fleet.partition.lease = Lease(checkpoint_time=long_ago + 5 * HOUR, created_at=long_ago)
    fleet.provision("b1", "u1", DAY)
    fleet.beat("b1", DAY + timedelta(minutes=2))
    assert fleet.tally(DAY + timedelta(hours=1, minutes=10))

    assert fleet.daily("u1", long_ago) == {k: v for k, v in history.items() if k != "_id"}
    assert fleet.hourly("u1") == {DAY: 1}


def test_heartbeats_of_a_document_stored_before_it_carried_ub_are_counted_once_it_is_backfilled(mock_db: Any) -> None:
    """A heartbeat document stored before documents carried `ub` is in no tally partition until `setup-store
    --backfill-buckets` gives it one (docs/local-development.md: run it after upgrading): the tally's passes
    meanwhile went on without it, so its next pass must count the hours its ring holds, not only those that closed
    since."""
    fleet = Fleet(mock_db, Settings())
    fleet.provision("b1", "u1", DAY)
    fleet.provision("b2", "u2", DAY)
    mock_db[schema.BOTTLE_HEARTBEATS].update_one({"_id": "b1"}, {"$unset": {USER_BUCKET: ""}})  # stored before
    for at in every_half_hour(DAY + timedelta(minutes=2), DAY + 3 * HOUR):
        fleet.beat("b1", at)
        fleet.beat("b2", at)
    fleet.tally(DAY + timedelta(hours=3, minutes=10))  # the upgraded app's first passes: b1 is in none
    assert fleet.hourly("u1") == {}

    backfill_buckets(mock_db, POLICY, now=DAY + timedelta(hours=3, minutes=30))
    fleet.tally(DAY + timedelta(hours=4, minutes=10))

    assert fleet.hourly("u1") == {DAY + h * HOUR: 2 for h in range(3)}
    assert fleet.hourly("u2") == {DAY + h * HOUR: 2 for h in range(3)}


def test_a_rebuild_whose_write_lost_a_race_to_the_consumer_keeps_the_consumers_newer_count(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rebuild command beside a running consumer: an event arrives, and the consumer counts it, after the
    rebuild read the hour's source and its report; the rebuild's guarded write fails, and the hour it then
    writes must be recomputed from the source as it is now, not merged again from what it read before."""
    fleet = Fleet(mock_db, Settings())
    fleet.provision("b1", "u1", DAY)
    first = opened(DAY + timedelta(hours=8, minutes=1)) | {"event_id": "e2"}
    fleet.send("b1", first, now=DAY + timedelta(hours=8, minutes=1))
    wrong = {"opened": 0, "bottles.0.opened": 0}  # what the rebuild is run for: a report gone wrong
    mock_db[schema.USER_HOURLY_REPORTS].update_one({"user_id": "u1"}, {"$set": wrong})
    raced: list[bool] = []

    def racing(collection: Any, writes: Any, policy: Any) -> Any:
        if collection.name == schema.USER_HOURLY_REPORTS and not raced:
            raced.append(True)  # the consumer counts a second event of the hour first
            # (before the rebuild's cursor, which reads the user's actions in `_id` order: its later pages do not
            # see it)
            later = opened(DAY + timedelta(hours=8, minutes=40)) | {"event_id": "e1"}
            fleet.send("b1", later, now=DAY + timedelta(hours=8, minutes=40))
        return write_guarded(collection, writes, policy)

    monkeypatch.setattr(aggregation, "write_guarded", racing)
    now = DAY + timedelta(hours=8, minutes=40)
    rebuild(mock_db, start=DAY, end=DAY + timedelta(days=1), user_id="u1", now=now, settings=fleet.settings)

    assert raced
    [report] = mock_db[schema.USER_HOURLY_REPORTS].find({"user_id": "u1"})
    assert report["opened"] == 2


def test_a_new_partition_layout_counts_what_the_old_one_left_and_the_late_heartbeats_since(mock_db: Any) -> None:
    """REPORTS_PARTITIONS changed while one old partition was an hour behind: the new layout's leases start from
    the feed's oldest checkpoint, and look for late heartbeats from it (a regression test: it held)."""
    first, second = user_in(0, 512, "a"), user_in(512, 1024, "b")
    two = Settings(reports_partitions=2, change_source="polling")
    fleet = Fleet(mock_db, two)
    for bottle_id, user_id in (("b1", first), ("b2", second)):
        fleet.provision(bottle_id, user_id, DAY)
    for at in every_half_hour(DAY + timedelta(minutes=2), DAY + 3 * HOUR):
        fleet.beat("b1", at)
        fleet.beat("b2", at)

    def passes(settings: Settings, now: datetime, only: str | None = None) -> None:
        sent: list[str] = []
        dispatch(mock_db, now=now, settings=settings, send=sent.extend)
        for partition in (partition_of(json.loads(body)) for body in sent):
            if partition.feed == HEARTBEAT_TALLY and only in (None, partition.lease_id):
                process_partition(mock_db, partition, now=now, settings=settings)

    passes(two, DAY + timedelta(hours=1, minutes=10))
    passes(two, DAY + timedelta(hours=2, minutes=10), only="reports:heartbeat_tally:buckets:0/2")  # 1/2 is behind
    for bottle_id in ("b1", "b2"):  # late, for an hour both partitions counted
        fleet.beat(bottle_id, DAY + timedelta(minutes=47), received=DAY + timedelta(hours=2, minutes=20))
    four = Settings(reports_partitions=4, change_source="polling")
    passes(four, DAY + timedelta(hours=3, minutes=10))

    assert fleet.hourly(first) == fleet.hourly(second) == {DAY: 3, DAY + HOUR: 2, DAY + 2 * HOUR: 2}
