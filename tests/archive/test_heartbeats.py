"""Bottle-hours of heartbeats into the archive from the heartbeat tally's own pages (shared/archive/heartbeats.py,
shared/reports/tally.py `run_tally`): each hour the tally counts is archived with its ring's slots, once, in the file
of its hour and user, through late heartbeats, passes run again, runs cut by their budget or killed mid-bucket,
reassignments, stale writers and two writers merging into one file. Each test drives provisioning, ingestion and
the tally on mongomock with chosen server clocks (tests/tally_fleet.py's Fleet) and checks the archive against
the rings with tools/archive_truth.py."""

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from shared.archive import parquet
from shared.archive.heartbeats import HeartbeatArchiver, HourSlots, merged
from shared.archive.layout import heartbeat_file
from shared.archive.storage import Archive, FolderArchive
from shared.feeds.leases import Lease
from shared.feeds.sweeps import Pass
from shared.reports import tally
from shared.reports.tally import run_tally
from shared.settings import Settings
from shared.store.partitioning import BucketRange, bucket_of
from tests.tally_fleet import CLOCK, DAY, HOUR, Fleet, user_in
from tests.tally_runner import POLICY, Handing, TallyPartition, out_of_time_after
from tools.archive_truth import archived_bottle_hours, check_archive

# The tests play their instants from a fixed day: the clock runs from a week after it (tests/tally_fleet.py).
pytestmark = pytest.mark.own_clock(CLOCK)

MINUTE = timedelta(minutes=1)


@pytest.fixture
def archive(tmp_path: Path) -> FolderArchive:
    return FolderArchive(tmp_path / "archive")


def archiving(db: Any, settings: Settings, archive: Archive) -> Fleet:
    fleet = Fleet(db, settings)
    fleet.partition = TallyPartition(db, settings, archive)
    return fleet


def rows(archive: Archive) -> dict[tuple[str, str, datetime], list[tuple[int, ...]]]:
    """Every archived bottle-hour, by (bottle, user, hour): the slots of each row that has it."""
    found: dict[tuple[str, str, datetime], list[tuple[int, ...]]] = {}
    for _, key, slots in archived_bottle_hours(archive):
        found.setdefault(key, []).append(slots)
    return found


def assert_matches_rings(db: Any, archive: Archive, start: datetime, end: datetime) -> None:
    check = check_archive(db, archive, until=start, heartbeats=(start, end))
    assert check.ok, check.problems
    assert check.bottle_hours


def beats(fleet: Fleet, bottle_id: str, hour: datetime, minutes: tuple[int, ...]) -> None:
    for minute in minutes:
        fleet.beat(bottle_id, hour + minute * MINUTE)


def test_a_closed_hour_is_archived_with_its_ring_s_slots_in_the_file_of_its_hour_and_user(
    mock_db: Any, archive: FolderArchive
) -> None:
    fleet = archiving(mock_db, Settings(), archive)
    fleet.provision("b1", "willcross1024", DAY)
    hour = DAY + 7 * HOUR
    beats(fleet, "b1", hour, (2, 31, 33))  # two heartbeats in the 30-34 slot are one

    assert not rows(archive)  # nothing counted, nothing archived
    fleet.tally(hour + HOUR + 9 * MINUTE)  # not due yet: the hour closes 10 minutes after its end
    assert not rows(archive)
    fleet.tally(hour + HOUR + 10 * MINUTE)

    assert rows(archive) == {("b1", "willcross1024", hour): [(0, 30)]}
    assert archive.names("heartbeats/") == [heartbeat_file(hour, bucket_of("willcross1024"))]
    assert_matches_rings(mock_db, archive, hour, hour + HOUR)


def test_a_late_heartbeat_is_merged_into_its_hour_s_row_at_the_next_pass_not_added_beside_it(
    mock_db: Any, archive: FolderArchive
) -> None:
    fleet = archiving(mock_db, Settings(), archive)
    fleet.provision("b1", "u1", DAY)
    hour = DAY + 3 * HOUR
    beats(fleet, "b1", hour, (10,))
    fleet.tally(hour + HOUR + 15 * MINUTE)
    fleet.beat("b1", hour + 40 * MINUTE, received=hour + 5 * HOUR)  # buffered on the device for hours

    fleet.tally(hour + 5 * HOUR + 15 * MINUTE)

    assert rows(archive) == {("b1", "u1", hour): [(10, 40)]}
    assert_matches_rings(mock_db, archive, hour, hour + HOUR)


def test_a_pass_run_again_writes_no_file_again_and_duplicates_nothing(
    mock_db: Any, archive: FolderArchive, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A redelivered work message, or a retry after a failure past the merges: the same pass again."""
    fleet = archiving(mock_db, Settings(), archive)
    for bottle_id, user_id in (("b1", "u1"), ("b2", "u2")):
        fleet.provision(bottle_id, user_id, DAY)
        beats(fleet, bottle_id, DAY + HOUR, (5, 35))
    lease_before = fleet.partition.lease
    fleet.tally(DAY + 2 * HOUR + 15 * MINUTE)
    first = {name: archive.read(name) for name in archive.names("")}
    writes: list[str] = []
    real_write = archive.write_guarded

    def counted_write(name: str, data: bytes, version: str | None) -> str | None:
        writes.append(name)
        return real_write(name, data, version)

    monkeypatch.setattr(archive, "write_guarded", counted_write)

    fleet.partition.lease = lease_before  # the position before the pass: it runs again whole
    fleet.tally(DAY + 2 * HOUR + 16 * MINUTE)

    assert writes == []
    assert {name: archive.read(name) for name in archive.names("")} == first
    assert_matches_rings(mock_db, archive, DAY, DAY + 2 * HOUR)


def three_users_of_one_bucket(db: Any, archive: Archive) -> tuple[Fleet, list[str]]:
    """Pages of one user; three users of one bucket, a bottle each, each heard from once in the hour from
    DAY + 2 hours (at minutes 0, 5 and 10)."""
    fleet = archiving(db, Settings(reports_page_size=1), archive)
    bucket = bucket_of("u-a")
    users = ["u-a", *(user_in(bucket, bucket + 1, prefix=f"u{i}-") for i in range(2))]
    for n, user_id in enumerate(users):
        fleet.provision(f"b{n}", user_id, DAY)
        beats(fleet, f"b{n}", DAY + 2 * HOUR, (n * 5,))
    return fleet, users


@pytest.mark.parametrize("pages", [1, 2])
def test_a_pass_cut_short_by_its_budget_mid_bucket_archives_every_bottle_hour_once(
    mock_db: Any, archive: FolderArchive, pages: int
) -> None:
    """Pages of one user, three users in one bucket: each run ends mid-bucket, merges what it holds, and the next
    run merges the rest into the same files."""
    fleet, users = three_users_of_one_bucket(mock_db, archive)
    at = DAY + 3 * HOUR + 15 * MINUTE

    done = [fleet.partition.run(at + n * MINUTE, pages=pages) for n in range(4)]

    assert done[-1]
    assert sorted(rows(archive)) == sorted((f"b{n}", u, DAY + 2 * HOUR) for n, u in enumerate(users))
    assert_matches_rings(mock_db, archive, DAY + 2 * HOUR, DAY + 3 * HOUR)


# User ids are [A-Za-z0-9_-]: one of capitals or digits sorts before any of small letters.
@pytest.mark.parametrize("first", ["u-a", "A-1"])
def test_a_run_killed_mid_bucket_leaves_its_held_rows_to_be_read_again_by_the_next(
    mock_db: Any, archive: FolderArchive, monkeypatch: pytest.MonkeyPatch, first: str
) -> None:
    """The worker dies after saving a page whose bucket goes on: the saved position stays at the bucket's start
    (before its first user, whatever the user's id), so the next run reads those documents again and archives
    them."""
    fleet = archiving(mock_db, Settings(reports_page_size=1), archive)
    bucket = bucket_of(first)
    users = [first, user_in(bucket, bucket + 1, prefix="u-b")]
    for n, user_id in enumerate(users):
        fleet.provision(f"b{n}", user_id, DAY)
        beats(fleet, f"b{n}", DAY + 2 * HOUR, (20,))
    real_count = tally.count_page
    calls = iter(range(100))

    def dying(*args: Any, **kwargs: Any) -> tuple[int, int]:
        if next(calls) == 1:
            raise SystemExit("killed")  # not a database error: nothing releases or flushes, as after a crash
        return real_count(*args, **kwargs)

    monkeypatch.setattr(tally, "count_page", dying)
    at = DAY + 3 * HOUR + 15 * MINUTE
    with pytest.raises(SystemExit):
        fleet.tally(at)
    assert not rows(archive)  # the first user's rows were held, not merged: its bucket was not done
    monkeypatch.setattr(tally, "count_page", real_count)

    assert fleet.tally(at + MINUTE)
    assert_matches_rings(mock_db, archive, DAY + 2 * HOUR, DAY + 3 * HOUR)


def test_a_reassigned_bottle_s_hours_stay_with_each_owner_once_whichever_partition_reads_it(
    mock_db: Any, archive: FolderArchive
) -> None:
    """A bottle moves between users of other buckets mid-hour: the earlier owner's slots stay in its file, the
    new owner's go into its own, and a late heartbeat of the earlier owner's hour, read by the new owner's
    bucket, is merged into the earlier owner's file."""
    first, second = user_in(0, 100), user_in(900, 1000)
    fleet = archiving(mock_db, Settings(), archive)
    fleet.provision("b1", first, DAY)
    hour = DAY + 4 * HOUR
    beats(fleet, "b1", hour - HOUR, (0, 30))
    fleet.tally(hour + 10 * MINUTE)
    beats(fleet, "b1", hour, (1,))
    fleet.provision("b1", second, hour + 20 * MINUTE)  # the reassignment, counted from the start of its slot
    beats(fleet, "b1", hour, (21, 50))
    fleet.tally(hour + HOUR + 15 * MINUTE)
    fleet.beat("b1", hour - HOUR + 45 * MINUTE, received=hour + 2 * HOUR)  # the earlier owner's, late

    fleet.tally(hour + 2 * HOUR + 15 * MINUTE)

    assert rows(archive) == {
        ("b1", first, hour - HOUR): [(0, 30, 45)],
        ("b1", first, hour): [(0,)],
        ("b1", second, hour): [(20, 50)],
    }
    assert_matches_rings(mock_db, archive, hour - HOUR, hour + HOUR)


# --- the merge ---------------------------------------------------------------------------------------------


def test_a_merge_keeps_a_sole_owner_s_slots_and_takes_a_shared_hour_s_as_recomputed() -> None:
    stored = {("b1", "u1"): (0, 30), ("b2", "u2"): (5,), ("b3", "u3"): (10,)}
    recomputed = {
        ("b1", "u1"): HourSlots((0,), sole_owner=True),  # read before the 30 arrived: keeps it
        ("b2", "u2"): HourSlots((), sole_owner=False),  # its heartbeat moved to the bottle's other owner
        ("b4", "u4"): HourSlots((55,), sole_owner=True),
    }
    assert merged(stored, recomputed) == {("b1", "u1"): (0, 30), ("b3", "u3"): (10,), ("b4", "u4"): (55,)}


def test_a_stale_worker_s_merge_after_a_newer_one_takes_no_slot_away(archive: FolderArchive) -> None:
    """A worker that read the ring before a late heartbeat, stalled, and merges after its successor did."""
    hour = DAY + 5 * HOUR
    newer, stale = HeartbeatArchiver(archive), HeartbeatArchiver(archive)
    newer.merge((hour, 7), {("b1", "u1"): HourSlots((0, 40), sole_owner=True)})
    stale.merge((hour, 7), {("b1", "u1"): HourSlots((0,), sole_owner=True)})

    assert rows(archive) == {("b1", "u1", hour): [(0, 40)]}


def test_two_writers_merging_into_one_file_at_once_both_land(
    archive: FolderArchive, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another partition merges an earlier owner's row into the file between this merge's read and its write:
    the guarded write is refused, and the merge reads the file again."""
    hour, unit = DAY + 6 * HOUR, (DAY + 6 * HOUR, 3)
    other = HeartbeatArchiver(archive)
    real_write = archive.write_guarded
    interleaved = iter([True])

    def write_after_the_other(name: str, data: bytes, version: str | None) -> str | None:
        if next(interleaved, False):
            other.merge(unit, {("b2", "u2"): HourSlots((15,), sole_owner=True)})
        return real_write(name, data, version)

    monkeypatch.setattr(archive, "write_guarded", write_after_the_other)
    HeartbeatArchiver(archive).merge(unit, {("b1", "u1"): HourSlots((0,), sole_owner=True)})

    assert rows(archive) == {("b1", "u1", hour): [(0,)], ("b2", "u2", hour): [(15,)]}


def test_the_file_holds_the_documented_columns_sorted_by_bottle_and_user(archive: FolderArchive) -> None:
    hour = DAY + 8 * HOUR
    HeartbeatArchiver(archive).merge(
        (hour, 9),
        {("b2", "u1"): HourSlots((5,), sole_owner=True), ("b1", "u1"): HourSlots((0, 55), sole_owner=True)},
    )
    stored = archive.read(heartbeat_file(hour, 9))
    assert stored is not None
    assert parquet.decode(stored.data) == [
        {"bottle_id": "b1", "user_id": "u1", "hour": hour, "slots": [0, 55]},
        {"bottle_id": "b2", "user_id": "u1", "hour": hour, "slots": [5]},
    ]


def test_a_run_killed_after_resuming_mid_bucket_leaves_the_next_to_read_on_from_where_the_last_merge_left(
    mock_db: Any, archive: FolderArchive, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three users of one bucket, a page each. The first run's budget ends after the first user: it merges what it
    holds and saves the position past that user. The second run reads the next user and dies: the position it
    saved goes back no further than the first run's, so the third reads the two users after it, not the first
    again, and the archive ends with every user's hour."""
    fleet, _ = three_users_of_one_bucket(mock_db, archive)
    at = DAY + 3 * HOUR + 15 * MINUTE
    assert not fleet.partition.run(at, pages=1)
    real_count = tally.count_page
    counted: list[int] = []

    def counting(*args: Any, **kwargs: Any) -> tuple[int, int]:
        counted.append(len(args[1]))
        return real_count(*args, **kwargs)

    def dying(*args: Any, **kwargs: Any) -> tuple[int, int]:
        if counted:
            raise SystemExit("killed")  # after the first page's position was saved: nothing flushes
        return counting(*args, **kwargs)

    monkeypatch.setattr(tally, "count_page", dying)
    with pytest.raises(SystemExit):
        fleet.tally(at + MINUTE)
    monkeypatch.setattr(tally, "count_page", counting)
    counted.clear()

    assert fleet.tally(at + 2 * MINUTE)
    assert sum(counted) == 2  # the two users after the first run's merge
    assert_matches_rings(mock_db, archive, DAY + 2 * HOUR, DAY + 3 * HOUR)


class Refusing(Handing):
    """An archive known to be down: the tally's passes hand it nothing."""

    def begin(self, current: Pass) -> bool:
        return False


def test_a_run_that_hands_nothing_and_ends_out_of_budget_saves_its_position_once_a_page(
    mock_db: Any, archive: FolderArchive
) -> None:
    """The archive down, so the pass hands nothing and holds no rows: a run cut short by its budget after a page
    has saved its position after that page, and writes its lease no more at its end."""
    three_users_of_one_bucket(mock_db, archive)
    saved: list[Lease] = []

    def save(lease: Lease) -> bool:
        saved.append(lease)
        return True

    _, run = run_tally(
        mock_db,
        BucketRange(0, 1),
        Lease(),
        settings=Settings(reports_page_size=1),
        policy=POLICY,
        wall_clock=lambda: DAY + 3 * HOUR + 15 * MINUTE,
        out_of_time=out_of_time_after(1),
        save=save,
        archive=Refusing(archive),
    )

    assert (run.pages, run.caught_up, len(saved)) == (1, False, 1)
    assert not rows(archive)
