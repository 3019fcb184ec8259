"""What a polling report partition reads again (shared/feeds/sources.py `aggregated_before`): a run reads back
REPORTS_POLL_OVERLAP_SECONDS before its checkpoint time, for writes that commit late and for clock skew between
instances, but a partition that has gone quiet reads its last changes again only until the overlap has passed since
them, not at every dispatch for as long as it stays quiet (before, `./dev serve` re-read the same 333 changes every
minute, writing nothing). Writes that commit late within the overlap are still counted, and a change stream's empty
answer (no proof on Cosmos DB: a throttled stream answers empty pages) never moves a recovery's start."""

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from pymongo.errors import OperationFailure

from shared import instants
from shared.consumers.plugged import partition_of, process_partition
from shared.feeds import leases, worker
from shared.instants import set_clock, utc_now
from shared.reports.feeds import ACTIONS_FEED
from shared.settings import get_settings
from shared.store import schema
from tests.api import SPEC, closed, iso, opened, post_events, provisioned
from tests.report_client import Round, get_reports, run_round, set_setting
from tests.reports.feeds import CosmosStream, actions_partition_with_token, change, sent_by_dispatch, stored
from tests.tally_fleet import CLOCK, ticking

# The tests play their instants from a fixed day: the clock runs from a week after it (tests/tally_fleet.py).
pytestmark = pytest.mark.own_clock(CLOCK)

MINUTE = timedelta(minutes=1)
BOTTLES = 6
PAIRS = 5  # opened/closed pairs a bottle uploads in one request


@pytest.fixture(autouse=True)
def clock_put_back() -> Iterator[None]:
    """These tests stop the server clock at instants of their own: the next test gets the clock it had."""
    with instants.clock_restored():
        yield


@pytest.fixture(params=[10, 300], ids=["dev-serve-overlap", "default-overlap"])
def overlap(request: pytest.FixtureRequest, db: Any, monkeypatch: pytest.MonkeyPatch) -> timedelta:
    """Polling with `./dev serve`'s overlap (10 s) and the app's default (300 s)."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "polling")
    set_setting(monkeypatch, "REPORTS_POLL_OVERLAP_SECONDS", str(request.param))
    return timedelta(seconds=request.param)


def a_burst_instant() -> datetime:
    """Five past an hour two hours ago: the burst's buffered events (30 minutes before it) fall in one hour."""
    return utc_now().replace(minute=5, second=0, microsecond=0) - timedelta(hours=2)


def upload(bottle_id: str, key: str, start: datetime, tag: str = "") -> int:
    """A device's buffered opens and closes since `start`, in one request: how many were stored."""
    events = []
    for pair in range(PAIRS):
        at = start + pair * MINUTE
        events += [opened(at, event_id=f"o{tag}{pair}"), closed(at + timedelta(seconds=30), event_id=f"c{tag}{pair}")]
    response = post_events(bottle_id, key, {"events": events})
    assert response.status == 202, response.body
    stored: int = response.body["stored"]
    return stored


def actions_read(round_: Round) -> int:
    """The changes the actions' partitions read in a round (the `changes=` of their log lines)."""
    return sum(run.changes for run in round_.runs if run.lease_id.startswith(f"reports:{ACTIONS_FEED.key}:"))


def opened_in_hour(hour: datetime) -> int:
    span = {"from": iso(hour), "to": iso(hour + timedelta(hours=1))}
    response = get_reports(SPEC["user_id"], granularity="hour", **span)
    assert response.status == 200, response.body
    return sum(report["opened"] for report in response.body["reports"])


def test_a_quiet_partition_reads_its_last_changes_again_only_until_the_overlap_has_passed(
    db: Any, overlap: timedelta, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A burst of changes, then a dispatch every minute for the overlap and four minutes more: each run reads
    the burst again only while the run before it began within the overlap after the burst (a write stamped
    before the burst may commit until then); later runs read nothing. A change arriving after the quiet spell is
    then read on its own. Lease writes, which every run of every partition would cost: one a page read, none
    more at a run's end, and none once quiet."""
    lease_writes: list[str] = []

    def counted(*args: Any, **kwargs: Any) -> bool:
        lease_writes.append(args[1].lease_id)
        return leases.checkpoint(*args, **kwargs)

    monkeypatch.setattr(worker, "checkpoint", counted)
    burst = a_burst_instant()
    set_clock(lambda: burst)
    sent = sum(upload(f"bottle-{i}", provisioned(f"bottle-{i}"), burst - 30 * MINUTE) for i in range(BOTTLES))
    assert sent == BOTTLES * PAIRS * 2
    starts = [burst + timedelta(seconds=5) + i * MINUTE for i in range(overlap // MINUTE + 4)]

    read, written, pages, saved = [], [], [], []
    for start in starts:
        set_clock(lambda at=start: at)  # type: ignore[misc]
        lease_writes.clear()
        done = run_round(db)
        assert done.caught_up
        read.append(actions_read(done))
        written.append(done.hourly_written)
        pages.append(sum(run.pages for run in done.runs if run.lease_id.startswith(f"reports:{ACTIONS_FEED.key}:")))
        saved.append(sum(lease_id.startswith(f"reports:{ACTIONS_FEED.key}:") for lease_id in lease_writes))
    later = starts[-1] + 10 * MINUTE
    set_clock(lambda: later)
    assert post_events("bottle-new", provisioned("bottle-new"), {"events": [opened(later - MINUTE)]}).status == 202
    set_clock(lambda: later + timedelta(seconds=5))
    read_after = actions_read(run_round(db))

    again = [sent if i == 0 or starts[i - 1] - overlap < burst else 0 for i in range(len(starts))]
    assert read == again, f"changes read per run, a run a minute from 5 s after the burst (overlap {overlap})"
    assert written[1:] == [0] * (len(starts) - 1)
    assert saved == pages, "actions' lease writes per round: one a page, none more"
    assert pages[-2:] == [0, 0]  # quiet: nothing read, nothing written
    assert read_after == 1
    assert opened_in_hour((burst - 30 * MINUTE).replace(minute=0)) == BOTTLES * PAIRS


def test_a_write_committing_late_within_the_overlap_is_counted_after_runs_that_read_nothing_new(
    db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guarantee the overlap is for holds after quiet runs: a write stamped 30 s before the partition's newest
    change (its instance's clock behind, or its commit slow) that commits four minutes later, after runs that
    read nothing new, is counted by the next run (the default overlap, 300 s)."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "polling")
    burst = a_burst_instant()
    set_clock(lambda: burst)
    key = provisioned()
    assert post_events("bottle-1", key, {"events": [opened(burst - 10 * MINUTE)]}).status == 202
    for minutes in range(4):
        set_clock(lambda m=minutes: burst + timedelta(seconds=5) + m * MINUTE)  # type: ignore[misc]
        run_round(db)
    set_clock(lambda: burst - timedelta(seconds=30))  # the other instance's stamp
    assert post_events("bottle-1", key, {"events": [opened(burst - 20 * MINUTE, event_id="late")]}).status == 202
    set_clock(lambda: burst + timedelta(seconds=5) + 4 * MINUTE)
    run_round(db)

    assert opened_in_hour((burst - 20 * MINUTE).replace(minute=0)) == 2


def test_a_change_streams_empty_answer_never_moves_where_a_recovery_starts(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a polling run's queries prove what had committed when it began: a Cosmos DB change stream answers
    empty pages while throttled. A document stamped 20 s before the checkpoint, which the stream had yet to give
    when its run found nothing an hour later, is read by the recovery from a rejected token (which polls from the
    checkpoint time less the overlap)."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    now = utc_now()
    partition = actions_partition_with_token(mock_db, now)
    newest = stored(mock_db, partition, [change("b0", 10)])
    run = process_partition(
        mock_db, partition, now=now, settings=get_settings(), watch=lambda p, t: CosmosStream([newest])
    )
    assert run.changes == 1
    late = change("b1", 10)
    late["fullDocument"][ACTIONS_FEED.time_field] -= timedelta(seconds=20)
    stored(mock_db, partition, [late])
    quiet = process_partition(
        mock_db, partition, now=now + timedelta(hours=1), settings=get_settings(), watch=lambda p, t: CosmosStream([])
    )
    assert quiet.changes == 0

    opened_streams: list[Any] = []

    def rejecting_the_token(p: Any, token: Any) -> CosmosStream:
        opened_streams.append(token)
        if len(opened_streams) == 1:
            raise OperationFailure("resume token expired", code=280)
        return CosmosStream([])

    recovery = process_partition(
        mock_db, partition, now=now + timedelta(hours=1, minutes=1), settings=get_settings(), watch=rejecting_the_token
    )

    assert recovery.recovered
    assert recovery.changes == 2  # b0 again (within the overlap) and the late b1
    assert mock_db[schema.USER_HOURLY_REPORTS].count_documents({}) >= 1


def test_a_polling_run_stopped_by_its_budget_keeps_when_it_began_so_the_next_run_reads_on_after_its_last_page(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three uploads a minute apart, read ten minutes later by a polling run whose budget lets it read one page (a
    page a change): its saved position keeps when it began as well as the page's checkpoint time, so the next run
    reads the two changes after that page, not the last overlap (300 s) again from the checkpoint time."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "polling")
    set_setting(monkeypatch, "REPORTS_PAGE_SIZE", "1")
    set_setting(monkeypatch, "REPORTS_TIME_BUDGET_SECONDS", "4")  # on a clock that moves a second a look: one page
    burst = a_burst_instant()
    key = provisioned()
    for minute in range(3):
        set_clock(lambda m=minute: burst + m * MINUTE)  # type: ignore[misc]
        event = opened(burst - (10 - minute) * MINUTE, event_id=f"o{minute}")
        assert post_events("bottle-1", key, event).status == 202

    def actions_runs(now: datetime, *, cut_short: bool) -> list[Any]:
        set_clock(lambda: now)
        runs = []
        partitions = map(partition_of, sent_by_dispatch(mock_db, now=now))
        for partition in (p for p in partitions if p.feed == ACTIONS_FEED):
            clock = {"clock": ticking(1)} if cut_short else {}
            runs.append(process_partition(mock_db, partition, now=now, settings=get_settings(), **clock))
        return runs

    first = actions_runs(burst + 10 * MINUTE, cut_short=True)
    assert (sum(run.changes for run in first), all(run.caught_up for run in first)) == (1, False)
    set_setting(monkeypatch, "REPORTS_TIME_BUDGET_SECONDS", "45")
    second = actions_runs(burst + 11 * MINUTE, cut_short=False)

    assert sum(run.changes for run in second) == 2
    assert not any(run.recovered for run in first + second)  # polling is no recovery: its lines say recovered=false
    assert opened_in_hour((burst - 10 * MINUTE).replace(minute=0)) == 3


def test_a_polling_run_out_of_budget_before_its_first_read_keeps_the_overlap_for_the_next_run(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A position a second past an action received in it (a parent's checkpoint time, inherited), and a run
    whose budget is spent before its first read (its claim took it): the run read nothing, so it must not record
    when it began, and the next run still reads back the overlap from the checkpoint time and counts the action."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "polling")
    set_setting(monkeypatch, "REPORTS_TIME_BUDGET_SECONDS", "4")
    burst = a_burst_instant()
    set_clock(lambda: burst)
    assert post_events("bottle-1", provisioned(), opened(burst - 10 * MINUTE)).status == 202
    now = burst + 20 * MINUTE
    set_clock(lambda: now)
    partitions = [p for p in map(partition_of, sent_by_dispatch(mock_db, now=now)) if p.feed == ACTIONS_FEED]
    inherited = {"checkpoint_time": burst + timedelta(seconds=1), "polled_at": None, "token": None}
    mock_db[schema.LEASES].update_many({"feed": ACTIONS_FEED.key}, {"$set": inherited})

    spent = [process_partition(mock_db, p, now=now, settings=get_settings(), clock=ticking(10)) for p in partitions]
    assert [run.pages for run in spent] == [0] * len(partitions)  # nothing read
    for partition in partitions:
        process_partition(mock_db, partition, now=now + MINUTE, settings=get_settings())

    assert opened_in_hour((burst - 10 * MINUTE).replace(minute=0)) == 1
