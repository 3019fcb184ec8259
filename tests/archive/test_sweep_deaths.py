"""The archive's sweep of the actions (shared/archive/actions.py) through a worker that dies at each place it can:
before it wrote any of the chunk, after it wrote part of the chunk but not its position, after it wrote the whole
chunk but not its position, and after it saved its position. Whatever it left, the next runs, each cut by its
budget mid-chunk, move the position on, and the archive holds each event once (read back from its files,
checked against `bottle_actions` with tools/archive_truth.py). And a run that gives way to another worker writing
the same file says so, in the worker's log and its invocation's line."""

import json
import logging
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest

from shared.archive import actions
from shared.archive.actions import Sweep, SweepRun, run_actions_sweep
from shared.archive.current import use_archive
from shared.archive.feeds import ACTIONS_ARCHIVE
from shared.archive.storage import FolderArchive
from shared.consumers.plugged import dispatch, process_partition
from shared.feeds.leases import Lease
from shared.feeds.partitions import Partition
from shared.feeds.worker import _Worker
from shared.instants import format_instant
from shared.settings import Settings, get_settings
from shared.store import schema
from tests import invoke
from tests.archive.sweeps import opened
from tests.fake_time import clock_stopped_at
from tests.report_client import set_setting
from tests.tally_fleet import CLOCK, DAY, HOUR, Fleet
from tests.tally_runner import POLICY, out_of_time_after
from tools.archive_truth import check_archive

# The tests play their instants from a fixed day: the clock runs from a week after it (tests/tally_fleet.py).
pytestmark = pytest.mark.own_clock(CLOCK)

MINUTE = timedelta(minutes=1)
H = DAY + 9 * HOUR  # the receive hour swept
SWEPT_AT = H + HOUR + 10 * MINUTE  # when it has settled
EVENTS = 14  # in chunks of 6: two whole, one of 2
LATE = {2, 3, 8}  # the events uploaded a day after their time: a second file in their chunks

BEFORE_THE_CHUNK = "before it wrote any of the chunk"
AFTER_A_PARTIAL_CHUNK = "after a partial chunk, before its position"
AFTER_THE_CHUNK = "after the whole chunk, before its position"
AFTER_THE_POSITION = "after its position"


class Killed(BaseException):
    """The worker's process dies: nothing after it runs (no `finally` of the app's catches it)."""


@pytest.fixture(autouse=True)
def chunks_of_six(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(actions, "CHUNK_ROWS", 6)


@pytest.fixture
def archive(tmp_path: Path) -> FolderArchive:
    return FolderArchive(tmp_path / "archive")


def stored_events(db: Any) -> None:
    """EVENTS opened events received in H, a minute apart, on one bottle; those of LATE dated the day before."""
    fleet = Fleet(db, Settings())
    fleet.provision("b1", "u1", DAY)
    for n in range(EVENTS):
        at = H + n * MINUTE
        fleet.send("b1", opened(at - (25 * HOUR if n in LATE else MINUTE)), now=at)


class Worker:
    """The sweep's partition driven by hand: its lease kept here; a run may die at one of the places above."""

    def __init__(self, db: Any, archive: FolderArchive) -> None:
        self.db, self.archive = db, archive
        self.settings = Settings(archive_page_size=1)  # an event a page: a run of n pages reads n events
        self.lease = Lease()

    def run(self, now: datetime, pages: int, dies: str | None = None) -> SweepRun:
        """A run at `now` out of time after `pages` pages, dying at `dies` (None: it lives)."""
        read = [0]
        budget = out_of_time_after(pages)

        def out_of_time() -> bool:
            if dies == BEFORE_THE_CHUNK and read[0] == 3:
                raise Killed(dies)  # three pages read into the chunk, nothing of them written
            read[0] += 1
            return budget()

        def save(lease: Lease) -> bool:
            before, after = Sweep.resumed(self.lease.token), Sweep.resumed(lease.token)
            whole = after is not None and (before is None or after.chunk > before.chunk)
            partial = after is not None and after.written is not None and after.written != (before and before.written)
            if (dies == AFTER_THE_CHUNK and whole) or (dies == AFTER_A_PARTIAL_CHUNK and partial):
                raise Killed(dies)
            self.lease = lease
            if dies == AFTER_THE_POSITION and partial:
                raise Killed(dies)
            return True

        _, done = run_actions_sweep(
            self.db,
            self.lease,
            settings=self.settings,
            archive=self.archive,
            policy=POLICY,
            wall_clock=lambda: now,
            out_of_time=out_of_time,
            save=save,
        )
        return done


def reached(lease: Lease) -> tuple[datetime, int, datetime]:
    """How far a saved position goes: the receive hour, the chunk, the last event archived of it (nothing saved:
    the day before the hour)."""
    sweep = Sweep.resumed(lease.token)
    if sweep is None:
        done = lease.checkpoint_time or DAY - HOUR
        return done, 0, done
    return sweep.hour, sweep.chunk, sweep.read_from or sweep.hour


def assert_each_event_once(db: Any, archive: FolderArchive) -> None:
    """Each stored event in the archive once, in its file (tools/archive_truth.py), and DuckDB reads as many."""
    check = check_archive(db, archive, until=H + HOUR, heartbeats=None)
    assert check.ok, check.problems
    assert check.events == EVENTS
    files = f"{archive.root}/actions/*/*.parquet"
    counted = duckdb.sql(f"SELECT count(*), count(DISTINCT time) FROM read_parquet('{files}')")
    assert counted is not None
    assert counted.fetchall() == [(EVENTS, EVENTS)]


@pytest.mark.parametrize("dies", [BEFORE_THE_CHUNK, AFTER_A_PARTIAL_CHUNK, AFTER_THE_CHUNK, AFTER_THE_POSITION])
@pytest.mark.parametrize("from_event", [0, 2])
def test_whatever_a_dying_worker_left_the_next_runs_cut_mid_chunk_move_on_and_archive_each_event_once(
    mock_db: Any, archive: FolderArchive, dies: str, from_event: int
) -> None:
    """The worker that dies starts at the hour's start (`from_event` 0) or after a run saved two events of the
    first chunk (2). It reads up to five events: into a second date's file, and past the first chunk's end
    (chunks of 6) when it lives long enough. Each later run reads two events and stops mid-chunk, writing what it
    read; the first of them must already save a position past the one before the death."""
    stored_events(mock_db)
    worker = Worker(mock_db, archive)
    if from_event:
        worker.run(SWEPT_AT, pages=from_event)
    before = reached(worker.lease)

    with pytest.raises(Killed):
        worker.run(SWEPT_AT + MINUTE, pages=5, dies=dies)

    runs = [worker.run(SWEPT_AT + 2 * MINUTE, pages=2)]
    assert reached(worker.lease) > before, "the first run after the death saved no progress"
    while not runs[-1].caught_up and len(runs) < 12:
        runs.append(worker.run(SWEPT_AT + (len(runs) + 2) * MINUTE, pages=2))
    assert runs[-1].caught_up
    assert not any(run.stopped_by_another for run in runs)
    assert worker.lease.checkpoint_time == H + HOUR
    assert_each_event_once(mock_db, archive)


def test_a_dead_worker_s_partial_chunk_is_never_taken_for_a_live_worker_s_run_after_run(
    mock_db: Any, archive: FolderArchive
) -> None:
    """The stall as it was met: a worker died after writing the first five events of a chunk, before its position.
    Every later run is cut by its budget within that chunk; each must save a position further than the last."""
    stored_events(mock_db)
    worker = Worker(mock_db, archive)
    with pytest.raises(Killed):
        worker.run(SWEPT_AT, pages=5, dies=AFTER_A_PARTIAL_CHUNK)

    positions = [reached(worker.lease)]
    for n in range(4):
        done = worker.run(SWEPT_AT + (n + 1) * MINUTE, pages=2)
        assert not done.stopped_by_another
        positions.append(reached(worker.lease))

    assert positions == sorted(set(positions)), positions  # each run a step further
    worker.run(SWEPT_AT + 10 * MINUTE, pages=100)
    assert_each_event_once(mock_db, archive)


# --- giving way ------------------------------------------------------------------------------------------------


def test_a_sweep_run_that_gives_way_to_another_writer_logs_it_and_its_invocation_says_so(
    mock_db: Any, archive: FolderArchive, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Another worker keeps changing the chunk's file between this run's read and its guarded write (two workers
    at once, each sure it holds the lease): after MERGE_ATTEMPTS refusals the run gives way and saves nothing past
    its last position; the worker logs one warning that names the partition, the receive hour, the chunk and the
    file, and the invocation's line of aggregate_report_partition says `gave_way`. The next run, alone, carries on
    and archives each event once."""
    stored_events(mock_db)
    use_archive(archive)
    set_setting(monkeypatch, "ARCHIVE_PAGE_SIZE", "1")
    dispatch(mock_db, now=SWEPT_AT, settings=get_settings(), send=lambda messages: None)
    partition = Partition(ACTIONS_ARCHIVE, 0, 1)
    checks = iter(range(100))
    monkeypatch.setattr(_Worker, "out_of_time", lambda self: next(checks) >= 3)  # three pages: mid-chunk
    refused: list[str] = []

    def another_writer_got_there_first(name: str, data: bytes, version: str | None) -> str | None:
        refused.append(name)
        return None

    monkeypatch.setattr(archive, "write_guarded", another_writer_got_there_first)
    with clock_stopped_at(SWEPT_AT), caplog.at_level(logging.INFO):
        invoke.queue("aggregate_report_partition", json.dumps(partition.message()))

    assert refused == [refused[0]] * actions.MERGE_ATTEMPTS
    [warning] = [r for r in caplog.records if "gave way" in r.getMessage()]
    assert warning.levelno == logging.WARNING
    assert warning.getMessage() == (
        f"archive: {partition.lease_id} gave way to another writer: {refused[0]} (receive hour {format_instant(H)}, "
        f"chunk 0) changed between each of this run's reads and guarded writes, {actions.MERGE_ATTEMPTS} times; the "
        "run saved nothing past its last position, and the next run carries on from it"
    )
    # its fields, as Application Insights' custom dimensions an operator filters the log by
    assert {k: vars(warning)[k] for k in ("feed", "partition", "file", "hour", "chunk", "gave_way")} == {
        "feed": partition.feed.key,
        "partition": partition.lease_id,
        "file": refused[0],
        "hour": H.isoformat(),
        "chunk": 0,
        "gave_way": True,
    }
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("invocation aggregate_report_part")]
    logged = json.loads(line.split(" ", 2)[2])
    assert (logged["gave_way"], logged["caught_up"], logged["changes"]) == (True, False, 3)
    lease = mock_db[schema.LEASES].find_one({"_id": partition.lease_id})
    assert lease["owner"] is None  # released: the next dispatch sends it again
    saved = Sweep.resumed(lease["token"])
    assert saved is not None
    assert saved.written is None  # nothing saved past the position it started from

    monkeypatch.undo()
    use_archive(archive)
    later = process_partition(mock_db, partition, now=SWEPT_AT + MINUTE, settings=get_settings())
    assert (later.caught_up, later.gave_way) == (True, False)
    assert_each_event_once(mock_db, archive)
