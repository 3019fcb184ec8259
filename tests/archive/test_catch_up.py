"""The heartbeat tally's hand-off to the archive and the archive's own position (shared/archive/catch_up.py), rule
by rule on mongomock: a pass handed whole moves the archive on only from where the archive is, and only if it looked
for late heartbeats from no later than the archive would; a newer record is never replaced by an older one; the
archive's own run applies a pass handed meanwhile without reading a heartbeat document, and, with its store down,
reads nothing, marks it down (the tally then hands nothing), says so with the fields an operator filters by, and is
sent again only after PROBE_EVERY. A catch-up cut short (by its budget, in a paced wait, or killed mid-bucket) saves
a position from which the next run archives every bottle-hour once, and a pass the tally hands while it runs moves
the archive past it when the run's own pass ends."""

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from shared.archive.catch_up import PROBE_EVERY, ArchiveHandOff, run_catch_up, trail
from shared.archive.current import use_archive
from shared.archive.feeds import HEARTBEATS_ARCHIVE
from shared.archive.heartbeats import HeartbeatArchiver
from shared.archive.storage import ArchiveUnavailable, FolderArchive
from shared.consumers.plugged import process_partition
from shared.feeds.leases import Lease
from shared.feeds.partitions import Partition
from shared.feeds.sweeps import LAST_BEGAN, LAST_PAGES, Pass, pass_token
from shared.instants import format_instant
from shared.reports.feeds import HEARTBEAT_TALLY
from shared.settings import Settings
from shared.store import schema
from shared.store.partitioning import bucket_of
from tests.fake_time import FakeTime
from tests.tally_fleet import CLOCK, DAY, HOUR, Fleet, user_in
from tests.tally_runner import POLICY
from tools.archive_truth import archived_bottle_hours

# The tests play their instants from a fixed day: the clock runs from a week after it (tests/tally_fleet.py).
pytestmark = pytest.mark.own_clock(CLOCK)

MINUTE = timedelta(minutes=1)
OVERLAP = timedelta(seconds=Settings().reports_poll_overlap_seconds)
TALLY, ARCHIVE = Partition(HEARTBEAT_TALLY, 0, 1), Partition(HEARTBEATS_ARCHIVE, 0, 1)
T = DAY + 5 * HOUR  # where the archive is
LAST = T + 10 * MINUTE  # when the pass that brought it there began


class Rows:
    """The archive's files as the archive's run sees them: calls counted, the store up or down."""

    def __init__(self, *, down: bool = False) -> None:
        self.down, self.checks, self.added = down, 0, 0

    def add(self, document: Mapping[str, Any], hours: Iterable[datetime], *, source_bucket: int) -> None:
        self.added += 1

    def flush(self, *, before: int | None = None) -> None:
        pass

    def holding(self) -> bool:
        return False

    def check(self) -> None:
        self.checks += 1
        if self.down:
            raise ArchiveUnavailable("container archive: cannot read: connection refused")


def leases(db: Any, *, archive: dict[str, Any], tally_at: datetime | None = None) -> None:
    base = {"owner": None, "expires_at": None, "version": 3, "retired_at": None, "created_at": DAY}
    db[schema.LEASES].insert_one({"_id": ARCHIVE.lease_id, "feed": HEARTBEATS_ARCHIVE.key, **base, **archive})
    db[schema.LEASES].insert_one(
        {"_id": TALLY.lease_id, "feed": HEARTBEAT_TALLY.key, **base, "checkpoint_time": tally_at}
    )


def archive_lease(db: Any) -> dict[str, Any]:
    found: dict[str, Any] = db[schema.LEASES].find_one({"_id": ARCHIVE.lease_id})
    return found


def a_pass(start: datetime, *, began: datetime, late_since: datetime | None) -> Pass:
    return Pass(start=start, end=start + HOUR, began=began, late_since=late_since)


def hand_off(db: Any, now: datetime) -> ArchiveHandOff:
    return ArchiveHandOff(db, TALLY, Rows(), overlap=OVERLAP, policy=POLICY, wall_clock=lambda: now)


@pytest.mark.parametrize(
    ("start", "late_since", "owner", "moves"),
    [
        (T, LAST - OVERLAP, None, True),  # in step: the archive's next pass would read no more
        (T, LAST - OVERLAP - MINUTE, None, True),  # looked for late heartbeats from further back: more, not less
        (T, LAST - OVERLAP + MINUTE, None, False),  # from later: a late heartbeat in between would be missed
        (T - HOUR, LAST - OVERLAP, None, False),  # not where the archive is
        (T + HOUR, LAST - OVERLAP, None, False),  # ahead of it: the hour between is not archived
        (T, LAST - OVERLAP, "a-catch-up", False),  # the archive's own run holds its lease
    ],
)
def test_a_pass_handed_whole_moves_the_archive_only_from_where_it_is_and_with_no_late_heartbeat_missed(
    mock_db: Any, start: datetime, late_since: datetime, owner: str | None, moves: bool
) -> None:
    now = start + HOUR + 50 * MINUTE
    leases(mock_db, archive={"checkpoint_time": T, "token": {LAST_BEGAN: LAST}, "owner": owner, "expires_at": now})
    current = a_pass(start, began=start + HOUR + 10 * MINUTE, late_since=late_since)

    hand_off(mock_db, now).ended(current)

    lease = archive_lease(mock_db)
    assert lease["handed"]["end"] == current.end  # recorded either way: the archive's run applies it once there
    assert (lease["checkpoint_time"], lease["token"]) == (
        (current.end, {LAST_BEGAN: current.began}) if moves else (T, {LAST_BEGAN: LAST})
    )


def test_an_older_pass_handed_late_never_replaces_a_newer_record(mock_db: Any) -> None:
    """A stale tally worker ending a pass after its successor ended the next one."""
    leases(mock_db, archive={"checkpoint_time": T - 2 * HOUR})
    newer = a_pass(T, began=T + HOUR + 10 * MINUTE, late_since=LAST - OVERLAP)
    older = a_pass(T - HOUR, began=T + 10 * MINUTE, late_since=LAST - HOUR - OVERLAP)
    hand_off(mock_db, T + 2 * HOUR).ended(newer)
    hand_off(mock_db, T + 2 * HOUR).ended(older)
    assert archive_lease(mock_db)["handed"]["start"] == T


def test_a_newer_pass_handed_replaces_the_older_record(mock_db: Any) -> None:
    """Two passes handed in turn while the archive's own run holds its lease: the record is the later one."""
    leases(mock_db, archive={"checkpoint_time": T - 2 * HOUR, "owner": "a-catch-up", "expires_at": T + 3 * HOUR})
    older = a_pass(T - HOUR, began=T + 10 * MINUTE, late_since=LAST - HOUR - OVERLAP)
    newer = a_pass(T, began=T + HOUR + 10 * MINUTE, late_since=LAST - OVERLAP)
    hand_off(mock_db, T + HOUR).ended(older)
    hand_off(mock_db, T + 2 * HOUR).ended(newer)
    assert archive_lease(mock_db)["handed"]["start"] == T


def test_a_pass_handed_moves_an_archive_whose_own_run_s_lease_has_expired(mock_db: Any) -> None:
    """The archive's run that held the lease died: once its lease has expired, a pass handed from where the
    archive is moves it on, and says when and by whom."""
    now = T + HOUR + 50 * MINUTE
    archive = {"checkpoint_time": T, "token": {LAST_BEGAN: LAST}, "owner": "a-dead-run", "expires_at": now - MINUTE}
    leases(mock_db, archive=archive)
    current = a_pass(T, began=T + HOUR + 10 * MINUTE, late_since=LAST - OVERLAP)

    hand_off(mock_db, now).ended(current)

    lease = archive_lease(mock_db)
    assert (lease["checkpoint_time"], lease["token"]) == (current.end, {LAST_BEGAN: current.began})
    assert (lease["updated_at"], lease["source"]) == (now, "tally")


@pytest.mark.parametrize(
    ("archive", "hands"),
    [
        ({"checkpoint_time": T}, True),
        ({"checkpoint_time": T, "retired_at": T}, False),  # its layout replaced: the new one's leases take it
        ({"checkpoint_time": T, "unreachable_at": T}, False),  # found down: the archive reads the hours itself
    ],
    ids=["live", "retired", "down"],
)
def test_a_tally_pass_hands_its_rows_only_to_a_live_archive_lease_not_found_down(
    mock_db: Any, archive: dict[str, Any], hands: bool
) -> None:
    leases(mock_db, archive=archive)
    assert hand_off(mock_db, T + 2 * HOUR).begin(a_pass(T, began=T + HOUR + 10 * MINUTE, late_since=None)) is hands


def test_an_archive_with_no_position_yet_trails_its_tally_since_its_lease_was_made(mock_db: Any) -> None:
    leases(mock_db, archive={"checkpoint_time": None}, tally_at=T + HOUR)

    found = trail(mock_db, [ARCHIVE], follows=HEARTBEAT_TALLY, now=T + 2 * HOUR, policy=POLICY)

    assert (found.due, found.lag) == ([ARCHIVE], T + HOUR - DAY)  # `created_at`: DAY


def test_the_archive_s_trail_sends_each_partition_behind_its_tally_and_measures_the_furthest_behind(
    mock_db: Any,
) -> None:
    """Three partitions: the first caught up with its tally, the second two hours behind, the third's tally
    without a lease yet (nothing counted): only the second is sent, and the feed's lag is its two hours."""
    parts = [Partition(HEARTBEATS_ARCHIVE, i, 3) for i in range(3)]
    tallies = [Partition(HEARTBEAT_TALLY, i, 3) for i in range(3)]
    base = {"owner": None, "expires_at": None, "version": 3, "retired_at": None, "created_at": DAY}
    for archive_at, part in zip((T + 2 * HOUR, T, T), parts, strict=True):
        mock_db[schema.LEASES].insert_one({"_id": part.lease_id, **base, "checkpoint_time": archive_at})
    for tally in tallies[:2]:
        mock_db[schema.LEASES].insert_one({"_id": tally.lease_id, **base, "checkpoint_time": T + 2 * HOUR})

    found = trail(mock_db, parts, follows=HEARTBEAT_TALLY, now=T + 3 * HOUR, policy=POLICY)

    assert (found.due, found.lag) == ([parts[1]], 2 * HOUR)


def test_an_archive_with_no_position_yet_catches_up_every_hour_its_tally_has_counted(
    mock_db: Any, tmp_path: Path
) -> None:
    """A first pass: no late heartbeats to look for, every hour the rings hold up to the tally's position."""
    settings = Settings()
    fleet = Fleet(mock_db, settings)
    fleet.provision("b0", "u-a", DAY)
    fleet.beat("b0", T - HOUR + 5 * MINUTE)
    fleet.beat("b0", T + 20 * MINUTE)
    leases(mock_db, archive={"checkpoint_time": None, "token": None}, tally_at=T + HOUR)
    archive = FolderArchive(tmp_path / "archive")

    held, run = catch_up(mock_db, Lease(), HeartbeatArchiver(archive), settings=settings)

    assert (held.checkpoint_time, run.caught_up) == (T + HOUR, True)
    assert {key: slots for _, key, slots in archived_bottle_hours(archive)} == {
        ("b0", "u-a", T - HOUR): (5,),
        ("b0", "u-a", T): (20,),
    }


def test_the_archive_s_run_applies_a_pass_handed_meanwhile_without_reading_a_heartbeat_document(
    mock_db: Any,
) -> None:
    """The tally handed T..T+1 while the archive was still behind it (its lease held by its own run); the next run
    of the archive finds itself at T and moves past the handed pass, reading nothing, and is caught up."""
    handed = {"start": T, "end": T + HOUR, "began": T + HOUR + 10 * MINUTE, "late_since": LAST - OVERLAP}
    leases(mock_db, archive={"checkpoint_time": T, "token": {LAST_BEGAN: LAST}, "handed": handed}, tally_at=T + HOUR)
    rows, saved = Rows(), []

    def save(lease: Lease) -> bool:
        saved.append(lease)
        return True

    held, run = run_catch_up(
        mock_db,
        ARCHIVE,
        Lease(checkpoint_time=T, token={LAST_BEGAN: LAST}),
        follows=HEARTBEAT_TALLY,
        rows=rows,
        settings=Settings(),
        policy=POLICY,
        wall_clock=lambda: T + 2 * HOUR,
        out_of_time=lambda: False,
        save=save,
    )

    assert (held.checkpoint_time, held.token) == (T + HOUR, {LAST_BEGAN: handed["began"]})
    assert saved == [held]
    assert (run.caught_up, run.documents, rows.checks, rows.added) == (True, 0, 0, 0)


def test_with_its_store_down_the_archive_s_run_reads_nothing_marks_it_down_and_waits_to_be_sent_again(
    mock_db: Any, caplog: pytest.LogCaptureFixture
) -> None:
    leases(mock_db, archive={"checkpoint_time": T, "token": {LAST_BEGAN: LAST}}, tally_at=T + 2 * HOUR)
    now = T + 2 * HOUR + 15 * MINUTE
    assert trail(mock_db, [ARCHIVE], follows=HEARTBEAT_TALLY, now=now, policy=POLICY).due == [ARCHIVE]
    down = Rows(down=True)

    def run_at(at: datetime, rows: Rows) -> tuple[Lease, Any]:
        return run_catch_up(
            mock_db,
            ARCHIVE,
            Lease(checkpoint_time=T, token={LAST_BEGAN: LAST}),
            follows=HEARTBEAT_TALLY,
            rows=rows,
            settings=Settings(),
            policy=POLICY,
            wall_clock=lambda: at,
            out_of_time=lambda: False,
            save=lambda lease: True,
        )

    with caplog.at_level(logging.WARNING, logger="shared.archive.catch_up"):
        held, run = run_at(now, down)  # does not raise: an outage is not a failed invocation

    assert (held.checkpoint_time, run.caught_up, run.documents, down.checks) == (T, False, 0, 1)
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.getMessage() == (
        f"archive: {ARCHIVE.lease_id}: the archive's store does not answer (ArchiveUnavailable: container archive: "
        f"cannot read: connection refused); the heartbeat hours from {format_instant(T)} stay to be read from the "
        f"rings once it does (tried again in {PROBE_EVERY // MINUTE} minutes), and the tally hands nothing meanwhile"
    )
    assert {name: getattr(warning, name, None) for name in ("partition", "feed", "error")} == {
        "partition": ARCHIVE.lease_id,
        "feed": HEARTBEATS_ARCHIVE.key,
        "error": "ArchiveUnavailable",
    }
    assert archive_lease(mock_db)["unreachable_at"] == now
    current = a_pass(T + 2 * HOUR, began=now, late_since=None)
    assert not hand_off(mock_db, now).begin(current)  # the tally's passes hand nothing meanwhile
    assert trail(mock_db, [ARCHIVE], follows=HEARTBEAT_TALLY, now=now + PROBE_EVERY - MINUTE, policy=POLICY).due == []
    assert trail(mock_db, [ARCHIVE], follows=HEARTBEAT_TALLY, now=now + PROBE_EVERY, policy=POLICY).due == [ARCHIVE]

    up = Rows()
    held, run = run_at(now + PROBE_EVERY, up)

    assert (held.checkpoint_time, run.caught_up, up.checks) == (T + 2 * HOUR, True, 1)
    assert archive_lease(mock_db)["unreachable_at"] is None
    assert hand_off(mock_db, now + PROBE_EVERY).begin(current)


def test_a_paced_catch_up_run_waits_for_each_page_and_reports_its_pages_documents_and_that_it_caught_up(
    mock_db: Any, tmp_path: Path
) -> None:
    """The worker's run of the archive's heartbeats partition (the consumer plugged in), an hour behind the tally
    whose last pass read 100 pages: its pages are paced like the tally's (one every 6 s over a 10-minute spread),
    waited for within the run's budget, and its invocation's line says what it read and that it caught up."""
    settings = Settings(reports_page_size=1, reports_tally_spread_minutes=10)
    fleet = Fleet(mock_db, settings)
    for n in range(3):
        fleet.provision(f"b{n}", f"user{n}", DAY)
        fleet.beat(f"b{n}", T + 20 * MINUTE)
    leases(mock_db, archive={"checkpoint_time": T, "token": {LAST_BEGAN: LAST}}, tally_at=T + HOUR)
    tally_token = {LAST_BEGAN: T + HOUR + 10 * MINUTE, LAST_PAGES: 100}
    mock_db[schema.LEASES].update_one({"_id": TALLY.lease_id}, {"$set": {"token": tally_token}})
    use_archive(FolderArchive(tmp_path / "archive"))
    time_ = FakeTime()

    run = process_partition(
        mock_db, ARCHIVE, now=T + HOUR + 15 * MINUTE, settings=settings, clock=time_, sleep=time_.sleep
    )

    assert (run.pages, run.changes, run.caught_up) == (3, 3, True)
    assert time_.slept == [6.0] * 4  # before each read, the last finding nothing more
    assert archive_lease(mock_db)["checkpoint_time"] == T + HOUR


@pytest.mark.parametrize(("behind", "logged"), [(3 * HOUR, False), (3 * HOUR + MINUTE, True)])
def test_an_archive_behind_further_than_the_rings_window_logs_an_error_with_the_hours_lost_and_its_fields(
    mock_db: Any, caplog: pytest.LogCaptureFixture, behind: timedelta, logged: bool
) -> None:
    """Rings of 4 hours (HEARTBEAT_WINDOW_HOURS): a run beginning in the hour from T + 10 hours finds the rings
    hold T + 7 hours on. An archive at T + 7 hours has lost nothing; one a minute further back has lost those
    hours, which its error names, with the fields an operator filters by (partition, feed, lost_from, lost_to)."""
    start, oldest = T + 10 * HOUR - behind, T + 7 * HOUR
    now = T + 10 * HOUR + 15 * MINUTE
    leases(mock_db, archive={"checkpoint_time": start, "token": {LAST_BEGAN: LAST}}, tally_at=T + 10 * HOUR)

    with caplog.at_level(logging.ERROR, logger="shared.archive.catch_up"):
        run_catch_up(
            mock_db,
            ARCHIVE,
            Lease(checkpoint_time=start, token={LAST_BEGAN: LAST}),
            follows=HEARTBEAT_TALLY,
            rows=Rows(),
            settings=Settings(heartbeat_window_hours=4),
            policy=POLICY,
            wall_clock=lambda: now,
            out_of_time=lambda: True,
            save=lambda lease: True,
        )

    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    if not logged:
        assert errors == []
        return
    [error] = errors
    assert error.getMessage() == (
        f"archive: {ARCHIVE.lease_id}: the archive's heartbeats fell behind at {format_instant(start)}, further "
        f"back than the rings' window (HEARTBEAT_WINDOW_HOURS 4, from {format_instant(oldest)}): the bottle-hours "
        f"of {format_instant(start)} to {format_instant(oldest)} the rings no longer hold are lost from the archive "
        "(the reports keep their counts); it archives those they still hold"
    )
    assert {name: getattr(error, name, None) for name in ("partition", "feed", "lost_from", "lost_to")} == {
        "partition": ARCHIVE.lease_id,
        "feed": HEARTBEATS_ARCHIVE.key,
        "lost_from": start.isoformat(),
        "lost_to": oldest.isoformat(),
    }


def test_a_catch_up_longer_than_a_run_s_budget_resumes_its_pass_where_the_last_run_stopped_and_ends(
    mock_db: Any,
) -> None:
    """Three users a page each, and runs with a budget of one page: each run reads on from the user the last one
    saved, none from the first again, so the fourth run finds nothing more and the archive is caught up."""
    settings = Settings(reports_page_size=1)
    fleet = Fleet(mock_db, settings)
    for n in range(3):
        fleet.provision(f"b{n}", f"user{n}", DAY)
        fleet.beat(f"b{n}", T + 20 * MINUTE)
    leases(mock_db, archive={"checkpoint_time": T, "token": {LAST_BEGAN: LAST}}, tally_at=T + HOUR)
    held = Lease(checkpoint_time=T, token={LAST_BEGAN: LAST})
    read: list[int] = []
    for _ in range(4):
        rows, budget = Rows(), iter([False, True])
        held, run = catch_up(mock_db, held, rows, settings=settings, out_of_time=budget.__next__)
        read.append(rows.added)

    assert read == [1, 1, 1, 0]
    assert (held.checkpoint_time, run.caught_up) == (T + HOUR, True)


def catch_up(
    db: Any,
    held: Lease,
    rows: Any,
    *,
    settings: Settings,
    out_of_time: Callable[[], bool] = lambda: False,
    save: Callable[[Lease], bool] = lambda lease: True,
    pause: Callable[[float], bool] = lambda seconds: True,
) -> tuple[Lease, Any]:
    """One run of the archive's catch-up of ARCHIVE an hour behind the tally, at T + 1 hour 15 minutes."""
    return run_catch_up(
        db,
        ARCHIVE,
        held,
        follows=HEARTBEAT_TALLY,
        rows=rows,
        settings=settings,
        policy=POLICY,
        wall_clock=lambda: T + HOUR + 15 * MINUTE,
        out_of_time=out_of_time,
        save=save,
        pause=pause,
    )


def one_bucket(db: Any, settings: Settings) -> list[str]:
    """Two users of one bucket, a bottle each, each beating once in the hour from T; the archive at T, the tally an
    hour on."""
    fleet = Fleet(db, settings)
    first = "u-a"
    users = [first, user_in(bucket_of(first), bucket_of(first) + 1, prefix="u-b")]
    for n, user_id in enumerate(users):
        fleet.provision(f"b{n}", user_id, DAY)
        fleet.beat(f"b{n}", T + 20 * MINUTE)
    leases(db, archive={"checkpoint_time": T, "token": {LAST_BEGAN: LAST}}, tally_at=T + HOUR)
    return users


def archived_users(archive: FolderArchive) -> list[str]:
    return sorted(user for _, (_, user, _), _ in archived_bottle_hours(archive))


class Saves:
    """A run's `save`, recording each position it is given; with `dying`, the process dies right after the first
    (nothing flushes, as after a crash)."""

    def __init__(self, *, dying: bool = False) -> None:
        self.leases: list[Lease] = []
        self._dying = dying

    def __call__(self, lease: Lease) -> bool:
        self.leases.append(lease)
        if self._dying:
            raise SystemExit("killed")
        return True


def test_a_catch_up_killed_mid_bucket_leaves_its_held_rows_to_be_read_again_by_the_next(
    mock_db: Any, tmp_path: Path
) -> None:
    """Pages of one user, both users in one bucket: the process dies right after the first page's position is
    saved, with that user's rows held, not merged. The position saved is the bucket's start, so the next run reads
    that user again and the archive ends with both users' hours."""
    settings = Settings(reports_page_size=1)
    users = one_bucket(mock_db, settings)
    archive = FolderArchive(tmp_path / "archive")
    dying = Saves(dying=True)

    with pytest.raises(SystemExit):
        catch_up(
            mock_db,
            Lease(checkpoint_time=T, token={LAST_BEGAN: LAST}),
            HeartbeatArchiver(archive),
            settings=settings,
            save=dying,
        )
    assert archived_users(archive) == []  # held, not merged: the bucket was not read to its end

    held, run = catch_up(mock_db, dying.leases[-1], HeartbeatArchiver(archive), settings=settings)

    assert (held.checkpoint_time, run.caught_up) == (T + HOUR, True)
    assert archived_users(archive) == sorted(users)


def test_a_catch_up_out_of_budget_mid_bucket_merges_what_it_holds_and_saves_its_position_past_it(
    mock_db: Any, tmp_path: Path
) -> None:
    """Budget for one page, both users in one bucket: the run merges the first user's rows it holds, saves the
    position past that user and returns it, so the next run reads only the second user and the archive ends with
    both users' hours once."""
    settings = Settings(reports_page_size=1)
    users = one_bucket(mock_db, settings)
    archive = FolderArchive(tmp_path / "archive")
    save = Saves()
    budget = iter([False, True])
    held, run = catch_up(
        mock_db,
        Lease(checkpoint_time=T, token={LAST_BEGAN: LAST}),
        HeartbeatArchiver(archive),
        settings=settings,
        out_of_time=lambda: next(budget),
        save=save,
    )

    assert (run.pages, run.caught_up) == (1, False)
    assert archived_users(archive) == users[:1]
    assert save.leases[-1] == held
    assert pass_token(held.token)["after"] == [bucket_of(users[0]), users[0]]

    held, run = catch_up(mock_db, held, HeartbeatArchiver(archive), settings=settings)

    assert (run.pages, run.caught_up) == (1, True)
    found = list(archived_bottle_hours(archive))
    assert len(found) == len(set(found))  # each bottle-hour in one row
    assert archived_users(archive) == sorted(users)


def test_a_paced_catch_up_whose_budget_ends_in_a_wait_stops_there_with_the_position_of_the_pages_it_read(
    mock_db: Any,
) -> None:
    """Pages paced 6 s apart (the tally's last pass read 100 pages over a 10-minute spread): the run reads the first
    page, then the wait for the second would pass its budget (the worker's pause says no), so it ends there: one
    page read and saved, not caught up."""
    settings = Settings(reports_page_size=1, reports_tally_spread_minutes=10)
    users = one_bucket(mock_db, settings)
    tally_token = {LAST_BEGAN: T + HOUR + 10 * MINUTE, LAST_PAGES: 100}
    mock_db[schema.LEASES].update_one({"_id": TALLY.lease_id}, {"$set": {"token": tally_token}})
    rows, waits = Rows(), iter([True, False])
    asked: list[float] = []

    def pause(seconds: float) -> bool:
        asked.append(seconds)
        return next(waits)

    held, run = catch_up(
        mock_db, Lease(checkpoint_time=T, token={LAST_BEGAN: LAST}), rows, settings=settings, pause=pause
    )

    assert len(asked) == 2  # before the first page, and before the second: declined
    assert asked[0] == 6.0
    assert (run.pages, rows.added, run.caught_up) == (1, 1, False)
    assert (held.checkpoint_time, pass_token(held.token)["after"]) == (T, [bucket_of(users[0]), users[0]])


def test_a_pass_the_tally_hands_while_the_archive_catches_up_moves_the_archive_past_it_when_the_run_ends(
    mock_db: Any,
) -> None:
    """The archive's run catches up the hour from T; meanwhile the tally ends its pass of the next hour and hands
    it whole (not applied then: the archive's run holds its lease and is not there yet). At the end of its own
    pass the run applies it: the archive is two hours on, at the handed pass's end, without reading that hour."""
    settings = Settings(reports_page_size=1)
    one_bucket(mock_db, settings)
    began = T + HOUR + 15 * MINUTE  # the run's clock: its own pass began then
    handed = a_pass(T + HOUR, began=began - MINUTE, late_since=began - MINUTE - OVERLAP)
    saved: list[Lease] = []

    def save(lease: Lease) -> bool:
        if not saved:  # the tally's pass of the next hour ends while the run reads
            hand_off(mock_db, began).ended(handed)
        saved.append(lease)
        return True

    rows = Rows()
    held, run = catch_up(
        mock_db, Lease(checkpoint_time=T, token={LAST_BEGAN: LAST}), rows, settings=settings, save=save
    )

    assert (run.caught_up, rows.added) == (True, 2)  # the two users' documents of its own pass, no more
    assert (held.checkpoint_time, held.token) == (T + 2 * HOUR, {LAST_BEGAN: handed.began})
    assert saved[-1] == held
    assert [lease.checkpoint_time for lease in saved[-2:]] == [T + HOUR, T + 2 * HOUR]


@pytest.mark.parametrize(
    "token",
    [{LAST_BEGAN: LAST}, None],
    ids=["after-a-pass", "a-checkpoint-time-alone"],
)
def test_a_heartbeat_that_reached_an_earlier_hour_late_is_archived_by_the_catch_up(
    mock_db: Any, tmp_path: Path, token: dict[str, Any] | None
) -> None:
    """The archive at T, its last pass begun at T + 10 minutes (or a position with a checkpoint time alone): a
    heartbeat of the hour before T received an hour later reached an hour the archive had closed. The catch-up
    looks for late heartbeats from its last pass's start (or its checkpoint time) less the overlap, so it archives
    that slot in the earlier hour's row, beside the hour it catches up."""
    settings = Settings()
    fleet = Fleet(mock_db, settings)
    fleet.provision("b0", "u-a", DAY)
    fleet.beat("b0", T + 20 * MINUTE)
    fleet.beat("b0", T - HOUR + 45 * MINUTE, received=T + HOUR)
    leases(mock_db, archive={"checkpoint_time": T, "token": token}, tally_at=T + HOUR)
    archive = FolderArchive(tmp_path / "archive")

    held, run = catch_up(mock_db, Lease(checkpoint_time=T, token=token), HeartbeatArchiver(archive), settings=settings)

    assert (held.checkpoint_time, run.caught_up) == (T + HOUR, True)
    assert {key: slots for _, key, slots in archived_bottle_hours(archive)} == {
        ("b0", "u-a", T - HOUR): (45,),
        ("b0", "u-a", T): (20,),
    }


def test_an_archive_partition_whose_tally_partition_has_no_lease_yet_has_nothing_to_catch_up(mock_db: Any) -> None:
    """The tally's lease is made by the same dispatch as the archive's; until it is, the tally has counted
    nothing, so there is nothing for the archive to read."""
    mock_db[schema.LEASES].insert_one({"_id": ARCHIVE.lease_id, "feed": HEARTBEATS_ARCHIVE.key, "checkpoint_time": T})
    rows = Rows()

    held, run = catch_up(mock_db, Lease(checkpoint_time=T), rows, settings=Settings())

    assert (held.checkpoint_time, run.caught_up, run.pages, rows.checks) == (T, True, 0, 0)


def test_a_pass_handed_to_another_partition_s_archive_is_not_applied_to_this_one(mock_db: Any) -> None:
    """The lease of the archive's other partition records a pass handed from T: this partition's run reads its own
    hours, and moves only as far as its own tally."""
    settings = Settings(reports_page_size=1)
    other = Partition(HEARTBEATS_ARCHIVE, 1, 2)
    handed = {"start": T, "end": T + 2 * HOUR, "began": LAST + HOUR, "late_since": LAST - OVERLAP}
    mock_db[schema.LEASES].insert_one({"_id": other.lease_id, "feed": HEARTBEATS_ARCHIVE.key, "handed": handed})
    users = one_bucket(mock_db, settings)
    rows = Rows()

    held, run = catch_up(mock_db, Lease(checkpoint_time=T, token={LAST_BEGAN: LAST}), rows, settings=settings)

    assert (held.checkpoint_time, run.caught_up, rows.added) == (T + HOUR, True, len(users))


def test_a_run_that_lost_its_lease_as_it_applied_a_handed_pass_does_not_say_it_caught_up(mock_db: Any) -> None:
    """A pass handed from where the archive is, and a run whose lease another worker has taken (every save
    refused): it moves nowhere, reads what it would have read, and its invocation's line does not say caught up."""
    settings = Settings(reports_page_size=1)
    one_bucket(mock_db, settings)
    handed = {"start": T, "end": T + HOUR, "began": LAST + HOUR, "late_since": LAST - OVERLAP}
    mock_db[schema.LEASES].update_one({"_id": ARCHIVE.lease_id}, {"$set": {"handed": handed}})
    start = Lease(checkpoint_time=T, token={LAST_BEGAN: LAST})

    held, run = catch_up(mock_db, start, Rows(), settings=settings, save=lambda lease: False)

    assert (held.checkpoint_time, run.caught_up) == (T, False)


class CountingArchiver(HeartbeatArchiver):
    """The archive's rows, counting the heartbeat documents added."""

    def __init__(self, archive: FolderArchive) -> None:
        super().__init__(archive)
        self.added = 0

    def add(self, document: Mapping[str, Any], hours: Iterable[datetime], *, source_bucket: int) -> None:
        self.added += 1
        super().add(document, hours, source_bucket=source_bucket)


def test_a_catch_up_killed_after_resuming_mid_bucket_leaves_the_next_to_read_on_from_the_last_merge(
    mock_db: Any, tmp_path: Path
) -> None:
    """Three users of one bucket, a page each. The first run's budget ends after the first user: it merges what it
    holds and saves the position past that user. The second reads the next user and dies: the position it saved
    goes back no further than the first run's, so the third reads the two users after it, not the first again."""
    settings = Settings(reports_page_size=1)
    users = one_bucket(mock_db, settings)
    users.append(user_in(bucket_of(users[0]), bucket_of(users[0]) + 1, prefix="u-c"))
    fleet = Fleet(mock_db, settings)
    fleet.provision("b2", users[2], DAY)
    fleet.beat("b2", T + 20 * MINUTE)
    archive = FolderArchive(tmp_path / "archive")
    budget = iter([False, True])
    held, _ = catch_up(
        mock_db,
        Lease(checkpoint_time=T, token={LAST_BEGAN: LAST}),
        HeartbeatArchiver(archive),
        settings=settings,
        out_of_time=lambda: next(budget),
    )
    dying = Saves(dying=True)

    with pytest.raises(SystemExit):
        catch_up(mock_db, held, HeartbeatArchiver(archive), settings=settings, save=dying)
    rows = CountingArchiver(archive)

    held, run = catch_up(mock_db, dying.leases[-1], rows, settings=settings)

    assert (held.checkpoint_time, run.caught_up, rows.added) == (T + HOUR, True, 2)
    assert archived_users(archive) == sorted(users)
