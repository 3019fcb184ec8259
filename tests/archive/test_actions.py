"""The opened/closed events into the archive by a sweep of `bottle_actions` by receive time
(shared/archive/actions.py): each event once, in the file of its device date and of the chunk of its receive hour,
through hours not yet settled, events uploaded hours late, sweeps run again, runs cut by their budget or killed
mid-chunk, a worker killed after writing more than it saved, a stale worker writing after its successor, and the
actions' partitions splitting under the dispatcher; through the worker, the archive ARCHIVE_DIR names, the run's
counts and a paced pass waiting within the budget. On mongomock with chosen server clocks, checked against
`bottle_actions` with tools/archive_truth.py."""

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from shared.archive import actions
from shared.archive.current import use_archive
from shared.archive.feeds import ACTIONS_ARCHIVE
from shared.archive.storage import Archive, ArchiveUnavailable, FolderArchive
from shared.consumers.plugged import dispatch, partition_of, process_partition
from shared.feeds.leases import Lease
from shared.feeds.partitions import Partition
from shared.settings import Settings, get_settings
from shared.store import schema
from tests.archive.sweeps import Sweeper, closed, opened
from tests.cosmos_fakes import CosmosTokens
from tests.fake_time import FakeTime
from tests.report_client import set_setting
from tests.tally_fleet import CLOCK, DAY, HOUR, Fleet
from tools.archive_truth import archived_events, check_archive

# The tests play their instants from a fixed day: the clock runs from a week after it (tests/tally_fleet.py).
pytestmark = pytest.mark.own_clock(CLOCK)

MINUTE = timedelta(minutes=1)
H = DAY + 9 * HOUR  # the receive hour most tests play


@pytest.fixture
def archive(tmp_path: Path) -> FolderArchive:
    return FolderArchive(tmp_path / "archive")


def stored_doses(db: Any, hour: datetime, events: int) -> Fleet:
    """`events` opened/closed events received in `hour`, a request a minute, on two bottles."""
    fleet = Fleet(db, Settings())
    fleet.provision("b1", "u1", DAY)
    fleet.provision("b2", "u2", DAY)
    for n in range(events):
        at = hour + n * MINUTE
        fleet.send(f"b{n % 2 + 1}", (opened if n % 4 < 2 else closed)(at - 10 * MINUTE), now=at)
    return fleet


def assert_each_event_once(db: Any, archive: Archive, until: datetime) -> None:
    check = check_archive(db, archive, until=until, heartbeats=None)
    assert check.ok, check.problems
    assert check.events == db[schema.BOTTLE_ACTIONS].count_documents({"received_at": {"$lt": until}})


def test_every_event_of_a_settled_receive_hour_is_archived_once_in_the_file_of_its_device_date(
    mock_db: Any, archive: FolderArchive
) -> None:
    fleet = stored_doses(mock_db, H, 6)
    # Uploaded hours late: received in the hour, dated the day before.
    fleet.send("b1", opened(H - 20 * HOUR), closed(H - 20 * HOUR + MINUTE), now=H + 30 * MINUTE)
    fleet.send("b2", opened(H + HOUR + MINUTE), now=H + HOUR + 2 * MINUTE)  # the next hour's: not swept yet
    sweeper = Sweeper(mock_db, Settings(), archive)

    sweeper.run(H + HOUR + 9 * MINUTE)  # the hour settles 10 minutes after its end
    assert archived_events(archive) == []
    run = sweeper.run(H + HOUR + 10 * MINUTE)

    assert run.caught_up
    assert archive.names("actions/") == [
        f"actions/date={H - 20 * HOUR:%Y-%m-%d}/received-{H:%Y-%m-%dT%H}-0000.parquet",
        f"actions/date={H:%Y-%m-%d}/received-{H:%Y-%m-%dT%H}-0000.parquet",
    ]
    assert len(archived_events(archive)) == 8
    assert_each_event_once(mock_db, archive, H + HOUR)


def test_the_first_sweep_starts_at_the_oldest_event_and_an_empty_store_starts_at_the_hours_due(
    mock_db: Any, archive: FolderArchive
) -> None:
    sweeper = Sweeper(mock_db, Settings(), archive)
    sweeper.run(DAY + 2 * HOUR + 15 * MINUTE)
    assert sweeper.lease.checkpoint_time == DAY + 2 * HOUR  # nothing stored: nothing to sweep before it
    stored_doses(mock_db, H, 2)
    sweeper.run(H + 3 * HOUR + 15 * MINUTE)
    assert_each_event_once(mock_db, archive, H + 3 * HOUR)
    assert sweeper.lease.checkpoint_time == H + 3 * HOUR


def test_a_sweep_run_again_writes_the_same_files_byte_for_byte(mock_db: Any, archive: FolderArchive) -> None:
    """A redelivered work message, a retry after a failure: the same hour swept again."""
    stored_doses(mock_db, H, 5)
    sweeper = Sweeper(mock_db, Settings(), archive)
    sweeper.run(H + HOUR + 10 * MINUTE)
    first = {name: archive.read(name) for name in archive.names("")}

    sweeper.lease = Lease()
    sweeper.run(H + HOUR + 20 * MINUTE)

    assert {name: archive.read(name) for name in archive.names("")} == first
    assert_each_event_once(mock_db, archive, H + HOUR)


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(actions, "CHUNK_ROWS", 3)


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("pages", [1, 2])
def test_a_sweep_cut_by_its_budget_mid_chunk_carries_on_from_the_chunk_s_files(
    mock_db: Any, archive: FolderArchive, pages: int
) -> None:
    stored_doses(mock_db, H, 11)
    sweeper = Sweeper(mock_db, Settings(archive_page_size=2), archive)

    runs = [sweeper.run(H + HOUR + (10 + n) * MINUTE, pages=pages) for n in range(20)]

    assert runs[-1].caught_up
    assert sum(run.files_written for run in runs) > 4  # partial chunks written and written again whole
    assert_each_event_once(mock_db, archive, H + HOUR)
    assert [name.rsplit("-", 1)[1] for name in archive.names("actions/")] == [
        f"{chunk:04d}.parquet"
        for chunk in range(4)  # 11 events in chunks of 3 (a request each)
    ]


@pytest.mark.usefixtures("small_chunks")
def test_a_sweep_killed_mid_chunk_reads_that_chunk_again_and_archives_it_once(
    mock_db: Any, archive: FolderArchive
) -> None:
    stored_doses(mock_db, H, 7)
    sweeper = Sweeper(mock_db, Settings(archive_page_size=2), archive)
    pages = iter(range(100))

    def killed_at_the_fifth_page() -> bool:
        if next(pages) == 4:  # a chunk of 3 written whole, one event of the next held
            raise SystemExit("killed")  # nothing writes what it holds, as after a crash
        return False

    with pytest.raises(SystemExit):
        sweeper.run(H + HOUR + 10 * MINUTE, out_of_time=killed_at_the_fifth_page)
    assert sweeper.run(H + HOUR + 11 * MINUTE).caught_up
    assert_each_event_once(mock_db, archive, H + HOUR)


def test_a_worker_killed_after_writing_more_than_it_saved_leaves_no_event_twice_or_lost(
    mock_db: Any, archive: FolderArchive, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next run reads the chunk's files back only as far as the saved position says they go: past it, the dead
    worker may have written events into files of dates the position does not name, which that run reads again."""
    monkeypatch.setattr(actions, "CHUNK_ROWS", 6)
    fleet = stored_doses(mock_db, H, 0)
    for n, late in enumerate((False, False, True, False, True, False)):  # late: uploaded a day after its time
        at = H + n * MINUTE
        fleet.send("b1", opened(at - (25 * HOUR if late else MINUTE)), now=at)
    sweeper = Sweeper(mock_db, Settings(archive_page_size=1), archive)
    sweeper.run(H + HOUR + 10 * MINUTE, pages=2)  # two events written, and saved so
    saved = sweeper.lease
    sweeper.run(H + HOUR + 11 * MINUTE, pages=2, keep=False)  # wrote two more, one of another date; died unsaved
    sweeper.lease = saved

    assert sweeper.run(H + HOUR + 12 * MINUTE).caught_up
    assert_each_event_once(mock_db, archive, H + HOUR)


@pytest.mark.usefixtures("small_chunks")
def test_a_stale_worker_s_partial_write_after_its_successor_finished_the_chunk_changes_nothing(
    mock_db: Any, archive: FolderArchive
) -> None:
    """A worker whose lease was taken over while it read (its clock behind, or it stalled) reaches the end of its
    budget after the successor wrote the chunk whole: its half chunk is merged into the whole one, which holds it
    all already, so no file is written again and no event is lost or doubled."""
    stored_doses(mock_db, H, 8)
    settings = Settings(archive_page_size=1)
    stale, successor = Sweeper(mock_db, settings, archive), Sweeper(mock_db, settings, archive)
    calls = iter(range(100))
    whole: dict[str, Any] = {}

    def successor_runs_meanwhile() -> bool:
        if next(calls) == 2:
            successor.run(H + HOUR + 12 * MINUTE)
            whole.update({name: archive.read(name) for name in archive.names("")})
            return True
        return False

    run = stale.run(H + HOUR + 11 * MINUTE, out_of_time=successor_runs_meanwhile)

    assert (run.files_written, run.stopped_by_another) == (0, False)
    assert {name: archive.read(name) for name in archive.names("")} == whole
    assert_each_event_once(mock_db, archive, H + HOUR)


# --- the dispatcher and the worker -----------------------------------------------------------------------------


def sent(db: Any, now: datetime, **kwargs: Any) -> list[dict[str, Any]]:
    messages: list[str] = []
    dispatch(db, now=now, settings=get_settings(), send=messages.extend, **kwargs)
    return [json.loads(message) for message in messages]


def archive_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m["feed"] == ACTIONS_ARCHIVE.key]


def test_the_dispatcher_sends_the_sweep_only_with_an_archive_and_an_hour_due(
    mock_db: Any, archive: FolderArchive
) -> None:
    stored_doses(mock_db, H, 2)
    assert archive_messages(sent(mock_db, H + HOUR + 15 * MINUTE)) == []  # no archive: no sweep
    use_archive(archive)
    [message] = archive_messages(sent(mock_db, H + HOUR + 15 * MINUTE))
    assert message == {"feed": "actions_archive", "partition": 0, "of": 1, "cosmos": False}
    process_partition(mock_db, partition_of(message), now=H + HOUR + 16 * MINUTE, settings=get_settings())
    assert archive_messages(sent(mock_db, H + HOUR + 50 * MINUTE)) == []  # swept: nothing due until the next hour
    assert len(archive_messages(sent(mock_db, H + 2 * HOUR + 10 * MINUTE))) == 1
    assert_each_event_once(mock_db, archive, H + HOUR)


def test_on_cosmos_db_the_sweep_is_one_partition_whatever_the_actions_physical_partitions_do(
    mock_db: Any, archive: FolderArchive
) -> None:
    """Splits and merges of `bottle_actions` change the actions feed's leases, never the sweep's: it reads by
    receive time across the collection, and its files are named by what they hold."""
    stored_doses(mock_db, H, 4)
    use_archive(archive)
    cosmos = CosmosTokens(mock_db, partitions=2)
    sweeps: list[dict[str, Any]] = []
    layouts = [lambda: None, lambda: cosmos.split(0), lambda: setattr(cosmos, "partitions", 1)]  # a split, a merge
    for minutes, change in zip((15, 16, 17), layouts, strict=True):
        change()
        sweeps += archive_messages(sent(cosmos, H + HOUR + minutes * MINUTE, on_cosmos=True))
        mock_db[schema.LEASES].update_many({}, {"$set": {"dispatched_until": None, "owner": None}})
    assert sweeps == [{"feed": "actions_archive", "partition": 0, "of": 1, "cosmos": False}] * 3
    process_partition(mock_db, partition_of(sweeps[0]), now=H + HOUR + 18 * MINUTE, settings=get_settings())
    assert_each_event_once(mock_db, archive, H + HOUR)


def test_an_archive_that_fails_fails_the_run_after_releasing_its_lease(
    mock_db: Any, archive: FolderArchive, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host then retries the message, which claims the lease at once; nothing was saved past what landed."""
    stored_doses(mock_db, H, 2)
    use_archive(archive)

    def unavailable(name: str, data: bytes) -> None:
        raise ArchiveUnavailable(f"folder: cannot write {name}")

    monkeypatch.setattr(archive, "write", unavailable)
    partition = Partition(ACTIONS_ARCHIVE, 0, 1)
    now = H + HOUR + 15 * MINUTE
    sent(mock_db, now)
    with pytest.raises(ArchiveUnavailable):
        process_partition(mock_db, partition, now=now, settings=get_settings())
    lease = mock_db[schema.LEASES].find_one({"_id": partition.lease_id})
    assert lease["owner"] is None
    assert lease["checkpoint_time"] is None
    monkeypatch.undo()
    use_archive(archive)
    process_partition(mock_db, partition, now=now + MINUTE, settings=get_settings())
    assert_each_event_once(mock_db, archive, H + HOUR)


def test_the_worker_sweeps_into_the_folder_archive_dir_names_and_says_what_it_read(
    mock_db: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The function app installs no archive: the worker's sweep finds the one its settings name (ARCHIVE_DIR here,
    as ./dev serve sets it), and its run (the invocation's log line) counts the pages and events it read and says
    it caught up."""
    stored_doses(mock_db, H, 4)
    set_setting(monkeypatch, "ARCHIVE_DIR", str(tmp_path / "named"))
    now = H + HOUR + 15 * MINUTE
    [message] = archive_messages(sent(mock_db, now))

    run = process_partition(mock_db, partition_of(message), now=now, settings=get_settings())

    assert (run.pages, run.changes, run.caught_up) == (2, 4, True)  # the hour's 4 events, then its end
    assert_each_event_once(mock_db, FolderArchive(tmp_path / "named"), H + HOUR)


def test_a_paced_sweep_waits_within_the_workers_budget_for_its_next_page(
    mock_db: Any, archive: FolderArchive, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass is paced over REPORTS_TALLY_SPREAD_MINUTES by the pages of the last one (autoscale bills each hour at
    its peak): the last pass read 5 pages (pages of 2 end on a whole receive instant: an event each, then the
    hour's end), so this one's pages are due 24 s apart over 2 minutes. A worker run with a 45 s budget waits for
    its first page and reads it, stops before a wait past its budget, and the next runs finish the pass, each event
    archived once."""
    set_setting(monkeypatch, "ARCHIVE_PAGE_SIZE", "2")
    set_setting(monkeypatch, "REPORTS_TALLY_SPREAD_MINUTES", "2")
    fleet = stored_doses(mock_db, H, 4)
    for n in range(4):
        at = H + HOUR + n * MINUTE
        fleet.send(f"b{n % 2 + 1}", opened(at - 10 * MINUTE), now=at)
    use_archive(archive)
    partition = Partition(ACTIONS_ARCHIVE, 0, 1)

    def run_at(now: datetime) -> tuple[Any, list[float]]:
        time_ = FakeTime()
        sent(mock_db, now)
        done = process_partition(mock_db, partition, now=now, settings=get_settings(), clock=time_, sleep=time_.sleep)
        return done, time_.slept

    first, _ = run_at(H + HOUR + 15 * MINUTE)  # unpaced: no pass before it
    assert (first.pages, first.caught_up) == (5, True)
    paced, waited = run_at(H + 2 * HOUR + 15 * MINUTE)
    later = [run_at(H + 2 * HOUR + (16 + n) * MINUTE)[0] for n in range(5)]

    assert (paced.pages, paced.caught_up, waited) == (1, False, [24.0])
    assert later[-1].caught_up
    assert paced.pages + sum(run.pages for run in later) == 5
    assert_each_event_once(mock_db, archive, H + 2 * HOUR)
