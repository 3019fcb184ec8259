"""The archive's store down for three hours on a small fleet (twelve bottles heard from every 30 minutes, a dose
each an hour), with the report dispatcher and its workers run as the host runs them: the reports count every
heartbeat and dose as usual while it is down, no report run fails or waits on it, and once the store is back the
archive catches up, each event and bottle-hour exactly once (checked against the source with
tools/archive_truth.py), then hands on from the tally again without reading the heartbeat documents itself; the
archive's lag says how far behind it is meanwhile. An outage longer than the rings' window loses those hours from
the archive, and says so. On mongomock, with the archive in a local folder that fails every call while down, and
with Azurite's blob service and a port nothing listens on (the app's own SDK client)."""

import json
import logging
import re
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from shared.archive.blob import BlobArchive, container_client
from shared.archive.current import use_archive
from shared.archive.storage import Archive, ArchiveUnavailable, FolderArchive, Stored
from shared.consumers.plugged import dispatch, partition_of, process_partition
from shared.feeds.sweeps import EPOCH
from shared.instants import format_instant
from shared.settings import Settings
from shared.store import schema
from tests import azurite
from tests.tally_fleet import CLOCK, DAY, HOUR, Fleet, opened, user_in
from tools.archive_truth import archived_bottle_hours, check_archive, swept_until, tallied_until

# The tests play their instants from a fixed day: the clock runs from a week after it (tests/tally_fleet.py).
pytestmark = pytest.mark.own_clock(CLOCK)

MINUTE = timedelta(minutes=1)
STEP = 30 * MINUTE  # a dispatch, and a run of each message it sent, every 30 minutes
START = DAY + 6 * HOUR
DOWN, UP = START + 2 * HOUR, START + 6 * HOUR  # 08:00-11:59: hours 08, 09, 10 counted while it is down
END = START + 8 * HOUR
BOTTLES = 12
SETTINGS = Settings(reports_partitions=2, reports_page_size=3, reports_tally_spread_minutes=0, change_source="polling")
# Six users, three in each of the two partitions' buckets.
USERS = [user_in(0, 512, f"user-{n}-") for n in range(3)] + [user_in(512, 1024, f"user-{n}-") for n in range(3, 6)]
ARCHIVED_HEARTBEATS = "heartbeats_archive"  # the feed of the archive's heartbeats (its own position, its own runs)


class Outage:
    """An archive whose store stops answering while `down`: every call fails as the app's stores fail."""

    def __init__(self, archive: Archive) -> None:
        self.archive, self.down = archive, False

    @property
    def where(self) -> str:
        return self.archive.where

    def _check(self, name: str) -> None:
        if self.down:
            raise ArchiveUnavailable(f"{self.where}: cannot reach the store for {name}")

    def read(self, name: str) -> Stored | None:
        self._check(name)
        return self.archive.read(name)

    def write(self, name: str, data: bytes) -> None:
        self._check(name)
        self.archive.write(name, data)

    def write_guarded(self, name: str, data: bytes, version: str | None) -> str | None:
        self._check(name)
        return self.archive.write_guarded(name, data, version)

    def names(self, prefix: str) -> list[str]:
        self._check(prefix)
        return self.archive.names(prefix)


@dataclass
class World:
    """The fleet, the settings, and how the archive's store goes down and up (`store(down)`)."""

    db: Any
    store: Callable[[bool], None]
    settings: Settings = SETTINGS
    bottles: int = BOTTLES
    outage: tuple[datetime, datetime] = (DOWN, UP)
    fleet: Fleet = field(init=False)

    def __post_init__(self) -> None:
        self.fleet = Fleet(self.db, self.settings)
        for n in range(self.bottles):
            self.fleet.provision(f"b{n}", USERS[n % len(USERS)], START - HOUR)


@dataclass
class Runs:
    """The work messages run, by feed, those that failed, what the archive's own runs read, and the lags."""

    ran: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)
    documents: int = 0  # heartbeat documents the archive's own runs read
    archive_lags: list[float] = field(default_factory=list)  # the archive's heartbeats, at each dispatch


def run_a_while(world: World, since: datetime, until: datetime) -> Runs:
    """From `since` to `until`: each bottle's heartbeats (bottle n at minutes 2n and 30 + 2n) and a dose an hour,
    and every STEP a dispatch and a run of each work message it sent; the archive's store down in the outage."""
    runs = Runs()
    now = since
    while now < until:
        world.store(world.outage[0] <= now < world.outage[1])
        for n in range(world.bottles):
            for beat in (now - STEP + m * MINUTE for m in range(STEP // MINUTE)):
                if beat.minute % 30 == 2 * n:
                    world.fleet.beat(f"b{n}", beat)
            if now.minute == 0:
                world.fleet.send(f"b{n}", opened(now - (n + 1) * MINUTE), now=now)
        messages: list[str] = []
        sent = dispatch(world.db, now=now + MINUTE, settings=world.settings, send=messages.extend, on_cosmos=False)
        runs.archive_lags.append(sent.lag_seconds.get(ARCHIVED_HEARTBEATS, 0.0))
        for body in messages:
            partition = partition_of(json.loads(body))
            runs.ran[partition.feed.key] += 1
            try:
                done = process_partition(world.db, partition, now=now + MINUTE, settings=world.settings)
            except ArchiveUnavailable:
                runs.failed[partition.feed.key] += 1
                continue
            if partition.feed.key == ARCHIVED_HEARTBEATS:
                runs.documents += done.changes
        now += STEP
    return runs


def counted(db: Any, field_name: str, hours: tuple[datetime, datetime]) -> int:
    """The sum of a counter over the hourly reports of `hours`."""
    found = db[schema.USER_HOURLY_REPORTS].find({"hour": {"$gte": hours[0], "$lt": hours[1]}})
    return sum(report.get(field_name, 0) for report in found)


def a_three_hour_outage(db: Any, store: Callable[[bool], None], archive: Archive) -> None:
    world = World(db, store)
    outage_hours = (DOWN, DOWN + 3 * HOUR)

    before = run_a_while(world, START, DOWN)
    during = run_a_while(world, DOWN, UP)

    # While the store is down every report run succeeds and counts every heartbeat and dose of its hours.
    assert counted(db, "heartbeats", outage_hours) == 3 * BOTTLES * 2  # 72
    assert counted(db, "opened", outage_hours) == 3 * BOTTLES
    assert not before.failed
    # The events' sweep fails its runs (the host retries them); the archive's heartbeats try the store, find it
    # down and end their runs without reading anything.
    assert during.failed.keys() <= {"actions_archive"}, during.failed
    assert during.documents == 0
    assert during.ran["heartbeat_tally"] >= 3 * 2  # each hour, each partition
    # Before it, the tally handed every hour to the archive: no run of the archive's own, no lag.
    assert (before.ran[ARCHIVED_HEARTBEATS], max(before.archive_lags)) == (0, 0.0)
    assert max(during.archive_lags) >= 2 * 3600  # behind the tally by the hours it could not hand over

    after = run_a_while(world, UP, END)

    assert not after.failed
    tallied, swept = tallied_until(db), swept_until(db)
    assert (tallied, swept) == (END - HOUR, END - HOUR)
    archived = db[schema.LEASES].find({"feed": ARCHIVED_HEARTBEATS, "retired_at": None})
    assert {lease["checkpoint_time"] for lease in archived} == {tallied}
    check = check_archive(db, archive, until=swept, heartbeats=(START, tallied))
    assert check.ok, check.problems
    assert check.events == 7 * BOTTLES  # a dose an hour, from 06:00 to 12:00 (13:00's is not due yet)
    assert check.bottle_hours == 7 * BOTTLES
    # The archive read the heartbeat documents again only for the passes the tally could not hand it (each
    # partition's documents once or twice), then the tally handed it every hour again.
    assert 0 < after.documents <= 2 * BOTTLES
    assert after.archive_lags[-1] == 0.0
    later = run_a_while(world, END, END + HOUR)
    assert (later.ran[ARCHIVED_HEARTBEATS], later.documents, max(later.archive_lags)) == (0, 0, 0.0)


def test_the_reports_count_through_a_three_hour_outage_of_the_archive_which_then_catches_up_once(
    mock_db: Any, tmp_path: Path
) -> None:
    outage = Outage(FolderArchive(tmp_path / "archive"))
    use_archive(outage)

    def store(down: bool) -> None:
        outage.down = down

    a_three_hour_outage(mock_db, store, outage.archive)


@pytest.fixture
def no_sdk_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shared.archive.blob.RETRIES", 0)  # the SDK's retries would only make each failure slower


@pytest.mark.azurite
@pytest.mark.usefixtures("no_sdk_retries")
def test_with_azurite_s_blob_service_unreachable_for_three_hours_the_reports_count_and_the_archive_catches_up(
    mock_db: Any, azurite_blob_port: int
) -> None:
    """The app's own client of a container of its own: pointed at a port nothing listens on while the store is
    down."""
    container = f"outage{uuid.uuid4().hex[:12]}"
    up_there = azurite.blob_connection_string(azurite_blob_port)
    live = BlobArchive(container_client(Settings(AzureWebJobsStorage=up_there, ARCHIVE_CONTAINER=container)))
    nowhere = azurite.blob_connection_string(azurite.free_port())
    dead = BlobArchive(container_client(Settings(AzureWebJobsStorage=nowhere, ARCHIVE_CONTAINER=container)))

    def store(down: bool) -> None:
        use_archive(dead if down else live)

    a_three_hour_outage(mock_db, store, live)


def test_an_outage_longer_than_the_rings_keep_loses_those_hours_from_the_archive_only_and_says_so(
    mock_db: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Rings of 4 hours (HEARTBEAT_WINDOW_HOURS) and the store down from 08:00 to 14:29: the reports count every
    hour; the archive's catch-up finds the rings no longer hold the first hour it missed, archives the others, logs
    an error naming the hours past the window, and catches up with the tally."""
    outage = Outage(FolderArchive(tmp_path / "archive"))
    use_archive(outage)

    def store(down: bool) -> None:
        outage.down = down

    settings = SETTINGS.model_copy(update={"heartbeat_window_hours": 4})
    world = World(mock_db, store, settings=settings, bottles=2, outage=(DOWN, DOWN + 6 * HOUR + 30 * MINUTE))
    run_a_while(world, START, DOWN)
    with caplog.at_level(logging.ERROR):
        # To 16:30: the dispatch at 16:01 counts no new hour (15:00 closes for the tally at 16:10), so whichever
        # order the 15:31 round's messages ran in, the archive's partitions have caught up with the tally by then.
        run_a_while(world, DOWN, DOWN + 8 * HOUR + STEP)

    assert counted(mock_db, "heartbeats", (DOWN, DOWN + 6 * HOUR)) == 6 * 2 * 2
    tallied = tallied_until(mock_db)
    assert tallied == DOWN + 7 * HOUR
    archived = mock_db[schema.LEASES].find({"feed": ARCHIVED_HEARTBEATS, "retired_at": None})
    assert {lease["checkpoint_time"] for lease in archived} == {tallied}
    # The tally could not hand 07:00 (counted at 08:10); at 14:31 the window starts at 11:00, and the rings keep
    # its whole 4-hour field, 08:00 on: only 07:00 is lost, from the archive only.
    behind, window = DOWN - HOUR, DOWN + 3 * HOUR
    lost = [r.getMessage() for r in caplog.records if "lost from the archive" in r.getMessage()]
    assert lost
    assert all(f"bottle-hours of {format_instant(behind)} to {format_instant(window)} the rings" in m for m in lost)
    hours = {key[2] for _, key, slots in archived_bottle_hours(outage.archive) if len(slots) == 2}
    assert hours == {START, *(DOWN + n * HOUR for n in range(7))}  # 06:00, and 08:00 to 14:00: not 07:00
    assert counted(mock_db, "heartbeats", (behind, DOWN)) == 2 * 2
    held_now = DOWN + 4 * HOUR  # what the rings hold at the end, 12:00 on, matches the archive
    check = check_archive(mock_db, outage.archive, until=swept_until(mock_db), heartbeats=(held_now, tallied))
    assert check.ok, check.problems
    assert check.bottle_hours == 3 * 2


def test_a_tally_partition_calls_a_store_that_is_down_once_per_outage_not_once_per_page_or_pass(
    mock_db: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Three hours of tally passes with the store down, pages of three documents: each partition's first pass
    fails one call (its first merge), logs one warning, and hands nothing more; the passes that begin while the
    archive is marked down call it not at all. The reports count every heartbeat."""
    outage = Outage(FolderArchive(tmp_path / "archive"))
    calls: list[str] = []
    real_check = outage._check

    def counted_check(name: str) -> None:
        calls.append(name)
        real_check(name)

    outage._check = counted_check  # type: ignore[method-assign]
    use_archive(outage)
    world = World(mock_db, lambda down: setattr(outage, "down", down), settings=SETTINGS.model_copy())
    run_a_while(world, START, DOWN)
    calls.clear()
    outage.down = True
    now = DOWN
    with caplog.at_level(logging.WARNING):
        while now < DOWN + 3 * HOUR + 15 * MINUTE:
            for n in range(BOTTLES):
                world.fleet.beat(f"b{n}", now + 2 * n * MINUTE)
            messages: list[str] = []
            dispatch(mock_db, now=now + 11 * MINUTE, settings=SETTINGS, send=messages.extend, on_cosmos=False)
            for partition in (partition_of(json.loads(body)) for body in messages):
                if partition.feed.key == "heartbeat_tally":
                    process_partition(mock_db, partition, now=now + 11 * MINUTE, settings=SETTINGS)
            now += 30 * MINUTE

    assert len(calls) == SETTINGS.reports_partitions
    stopped = [r for r in caplog.records if "stops handing bottle-hours to the archive" in r.getMessage()]
    assert len(stopped) == SETTINGS.reports_partitions
    said = (
        "reports: the heartbeat tally of buckets {} stops handing bottle-hours to the archive for its pass of "
        f"{format_instant(DOWN - HOUR)} to {format_instant(DOWN)}: ArchiveUnavailable: folder {tmp_path / 'archive'}: "
        "cannot reach the store for heartbeats/date=2027-01-04/hour-07-users-BUCKET.parquet. The reports are counted "
        "as usual; the archive reads those hours from the heartbeat documents once it answers again (docs/archive.md, "
        "When the archive is down)"
    )
    file_bucket = re.compile(r"(?<=hour-07-users-)\d{4}(?=\.parquet)")
    by_buckets = sorted(stopped, key=lambda r: int(vars(r)["buckets"].split("-")[0]))
    assert [file_bucket.sub("BUCKET", r.getMessage()) for r in by_buckets] == [
        said.format("0-511"),
        said.format("512-1023"),
    ]
    first, second = (int(file_bucket.findall(r.getMessage())[0]) for r in by_buckets)
    assert first < 512 <= second  # the file whose merge failed: one of the partition's own buckets
    # their fields, as Application Insights' custom dimensions an operator filters the log by
    assert sorted((vars(r)["buckets"], vars(r)["error"]) for r in stopped) == [
        ("0-511", "ArchiveUnavailable"),
        ("512-1023", "ArchiveUnavailable"),
    ]
    assert counted(mock_db, "heartbeats", (DOWN, DOWN + 3 * HOUR)) == 3 * BOTTLES * 2


def test_a_store_that_fails_a_pass_s_last_merge_stops_the_hand_off_and_never_the_tally(
    mock_db: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One bottle, so a tally pass's rows are all of one bucket, held until the pass's end and merged then: the
    store failing that merge is logged with the pass and the error, marks the archive down (its own run reads those
    hours once it answers), and the tally's run ends as usual with its hours counted."""
    outage = Outage(FolderArchive(tmp_path / "archive"))
    use_archive(outage)
    fleet = Fleet(mock_db, SETTINGS)
    fleet.provision("b0", USERS[0], START - HOUR)
    for minute in (5, 35):
        fleet.beat("b0", START + minute * MINUTE)
    now = START + HOUR + 11 * MINUTE
    messages: list[str] = []
    dispatch(mock_db, now=now, settings=SETTINGS, send=messages.extend, on_cosmos=False)
    tally = [p for p in (partition_of(json.loads(body)) for body in messages) if p.feed.key == "heartbeat_tally"]
    outage.down = True

    with caplog.at_level(logging.WARNING):
        runs = [process_partition(mock_db, partition, now=now, settings=SETTINGS) for partition in tally]

    assert all(run.caught_up for run in runs)
    assert counted(mock_db, "heartbeats", (START, START + HOUR)) == 2
    [stopped] = [r for r in caplog.records if "stops handing bottle-hours to the archive" in r.getMessage()]
    # the first pass: from the start of time
    assert f"pass of {format_instant(EPOCH)} to {format_instant(START + HOUR)}: ArchiveUnavailable: " in (
        stopped.getMessage()
    )
    assert vars(stopped)["error"] == "ArchiveUnavailable"
    archive_leases = mock_db[schema.LEASES].find({"feed": ARCHIVED_HEARTBEATS})
    assert [lease.get("unreachable_at") is not None for lease in archive_leases] == [True, False]
