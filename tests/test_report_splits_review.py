"""A hostile review of the report feeds through layout changes (shared/reports/leases.py): layouts that come back
(REPORTS_PARTITIONS 4 -> 8 -> 4, a Cosmos DB partition merged back), the leases the previous code left, and the
tally's pass state across a layout change. Each test plays the app's own dispatcher and workers."""

import json
from datetime import datetime, timedelta
from typing import Any

import pytest

from shared import instants
from shared.instants import utc_now
from shared.reports.change_feed import PartitionRun, dispatch, process_partition
from shared.reports.leases import ACTIONS_FEED, NoPartitionTokens, Partition
from shared.settings import Settings, get_settings
from shared.store import schema
from tests.api import opened, post_events, provisioned
from tests.cosmos_fakes import CosmosTokens, QuietStream
from tests.report_client import set_setting
from tests.test_tally import DAY as TALLY_DAY
from tests.test_tally import HOUR, Fleet
from tests.test_tally import opened as tally_opened

MINUTE = timedelta(minutes=1)
DAY = timedelta(days=1)


def round_at(db: Any, now: datetime, settings: Settings, *, on_cosmos: bool = False) -> list[PartitionRun]:
    """One dispatch at `now` and a worker run for each partition it sent (on Cosmos DB, of change streams
    where nothing new arrives: a partition without a token recovers by polling); the actions feed's runs."""
    messages: list[str] = []
    dispatch(db, now=now, settings=settings, send=messages.extend, on_cosmos=on_cosmos)
    partitions = [Partition.from_message(json.loads(m)) for m in messages]
    watch = QuietStream if on_cosmos else None
    runs = [process_partition(db, p, now=now, settings=settings, watch=watch) for p in partitions]
    return [run for run, p in zip(runs, partitions, strict=True) if p.feed == ACTIONS_FEED]


def action_at(bottle_id: str, at: datetime) -> None:
    instants.set_clock(lambda: at)
    try:
        assert post_events(bottle_id, provisioned(bottle_id), opened(at)).status == 202
    finally:
        instants.set_clock(None)


def opened_in_hour(db: Any, at: datetime) -> int:
    hour = at.replace(minute=0, second=0, microsecond=0)
    return sum(r.get("opened", 0) for r in db[schema.USER_HOURLY_REPORTS].find({"hour": hour}))


def live_leases(db: Any, feed: str) -> set[str]:
    return {doc["_id"] for doc in db[schema.LEASES].find({"feed": feed, "retired_at": None})}


# --- a layout that comes back ------------------------------------------------------------------------------------


def test_a_partition_count_changed_back_reads_again_rather_than_stall_on_its_retired_leases(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """REPORTS_PARTITIONS 4 -> 8 -> 4: the 4-partition leases were retired when the 8 ran. Changed back, their ids
    are current again: they must read again (from the 8's positions), and the 8 must then retire."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "polling")
    now = utc_now() - 2 * DAY
    for count in ("4", "8", "4"):
        set_setting(monkeypatch, "REPORTS_PARTITIONS", count)
        for _ in range(2):  # the new layout's first runs, then its parents retire
            now += 10 * MINUTE
            round_at(mock_db, now, get_settings())

    action_at("bottle-1", now + MINUTE)
    for _ in range(2):
        now += 10 * MINUTE
        round_at(mock_db, now, get_settings())

    assert opened_in_hour(mock_db, now - 19 * MINUTE) == 1  # the action was aggregated
    assert live_leases(mock_db, ACTIONS_FEED.key) == {Partition(ACTIONS_FEED, i, 4).lease_id for i in range(4)}


def test_a_cosmos_partition_merged_back_reads_again_rather_than_stall_on_its_retired_lease(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cosmos DB merges partitions too (partition merge): two ranges split and merged back are the range they were,
    the same lease id, retired when its children ran. It must read again, and its children must then retire."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    cosmos = CosmosTokens(mock_db, partitions=2)
    now = utc_now() - 2 * DAY
    for layout in (2, 4, 2):
        if layout == 2 and cosmos.asked:  # an action the 4 did not read before the merge
            action_at("bottle-1", now + MINUTE)
        cosmos.partitions = layout
        for _ in range(2):
            now += 10 * MINUTE
            round_at(cosmos, now, get_settings(), on_cosmos=True)

    assert opened_in_hour(mock_db, now - 19 * MINUTE) == 1
    assert len(live_leases(mock_db, ACTIONS_FEED.key)) == 2


# --- the leases the previous code left ---------------------------------------------------------------------------


def legacy_lease(partition: int, of: int, checkpoint_time: datetime, at: datetime) -> dict[str, Any]:
    """A Cosmos DB lease as the code before feed ranges wrote it: `cosmos:<index>/<count>`, no kind, range or
    retired_at; every layout's leases kept, the earlier ones frozen where their layout ended."""
    return {
        "_id": f"reports:{ACTIONS_FEED.key}:cosmos:{partition}/{of}",
        "feed": ACTIONS_FEED.key,
        "partition": partition,
        "of": of,
        "start_token": None,
        "token": None,
        "checkpoint_time": checkpoint_time,
        "owner": None,
        "expires_at": None,
        "version": 3,
        "dispatched_until": None,
        "created_at": checkpoint_time,
        "updated_at": at,
        "released_at": at,
        "source": "change_stream",
    }


def test_after_the_upgrade_a_cosmos_feed_starts_from_the_layout_the_old_code_ran_not_its_frozen_first(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old code kept every layout's leases: layout 1 (one partition) frozen when it split 30 days ago, layout 2
    running since, a minute behind. Upgraded, the feed-range leases must start from layout 2's position: starting
    from layout 1's frozen checkpoint re-reads 30 days of the whole collection per new lease (the issue's case)."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    now = utc_now()
    t0 = now - 30 * DAY
    written = [t0 + i * DAY + MINUTE for i in range(30)] + [now - 30 * MINUTE]  # an action a day, and one lately
    for i, at in enumerate(written):
        action_at(f"bottle-{i}", at)
    leases = [legacy_lease(0, 1, t0, t0), *(legacy_lease(i, 2, now - 40 * MINUTE, now - 40 * MINUTE) for i in (0, 1))]
    mock_db[schema.LEASES].insert_many(leases)
    cosmos = CosmosTokens(mock_db, partitions=2)

    runs = round_at(cosmos, now, get_settings(), on_cosmos=True)

    assert len(runs) == 2
    assert all(run.caught_up for run in runs)
    # Each recovers by polling what arrived since layout 2's checkpoint less the overlap (on Cosmos DB from every
    # physical partition): the action of 30 minutes ago, not the month's 31.
    assert [run.changes for run in runs] == [1, 1]


# --- the tally's pass state across a layout change ---------------------------------------------------------------


def test_a_tally_behind_by_more_than_a_window_still_rolls_up_the_days_it_passed_across_a_partition_change(
    mock_db: Any,
) -> None:
    """The tally catches up on the roll-ups of a long stop a day a pass (`rollups_from` in its lease's token). The
    days it has yet to roll up when REPORTS_PARTITIONS changes must still be rolled up by the new layout: their
    hours were counted by the old one, so no new pass finds them changed."""
    one = Settings(reports_partitions=1, change_source="polling")
    two = Settings(reports_partitions=2, change_source="polling")
    fleet = Fleet(mock_db, one)
    fleet.provision("b1", "u1", TALLY_DAY)
    fleet.beat("b1", TALLY_DAY + timedelta(hours=5, minutes=2))
    tally_passes(mock_db, one, TALLY_DAY + timedelta(hours=6, minutes=10))
    for day in range(4):  # the actions' consumer counts each in its hour at once, while its day is open
        at = TALLY_DAY + timedelta(days=day, hours=8)
        fleet.send("b1", tally_opened(at), now=at)
    back = TALLY_DAY + timedelta(days=4, hours=1, minutes=10)
    tally_passes(mock_db, one, back)  # the first pass back: its last window, and the oldest day it is behind

    for hours in range(1, 6):  # the layout changes; passes every hour
        tally_passes(mock_db, two, back + hours * HOUR)

    days = [fleet.daily("u1", TALLY_DAY + timedelta(days=day)) for day in range(4)]
    assert [None if d is None else (d["opened"], d["heartbeats"]) for d in days] == [(1, 1), (1, 0), (1, 0), (1, 0)]


def tally_passes(db: Any, settings: Settings, now: datetime) -> None:
    """A dispatch at `now` and a run of each tally partition it sent (the actions' feed is run by the Fleet)."""
    sent: list[str] = []
    dispatch(db, now=now, settings=settings, send=sent.extend)
    for partition in (Partition.from_message(json.loads(body)) for body in sent):
        if partition.feed.tally:
            process_partition(db, partition, now=now, settings=settings)


def test_a_tally_whose_first_pass_never_ran_still_rolls_up_the_days_since_its_lease_across_a_partition_change(
    mock_db: Any,
) -> None:
    """A first pass rolls up every day since its lease was made (actions counted while their day was open reach
    the day only through the roll-ups). Its partition replaced before it ever ran, the new layout's first pass
    must roll up the days since the old lease was made, not only since its own."""
    one = Settings(reports_partitions=1, change_source="polling")
    fleet = Fleet(mock_db, one)
    dispatch(mock_db, now=TALLY_DAY, settings=one, send=lambda _: None)  # the tally's lease; its passes fail
    fleet.provision("b1", "u1", TALLY_DAY)
    fleet.send("b1", tally_opened(TALLY_DAY + 8 * HOUR), now=TALLY_DAY + 8 * HOUR)

    tally_passes(mock_db, Settings(reports_partitions=2, change_source="polling"), TALLY_DAY + 2 * DAY + 70 * MINUTE)

    day = fleet.daily("u1", TALLY_DAY)
    assert day is not None
    assert day["opened"] == 1


# --- polling on Cosmos DB ----------------------------------------------------------------------------------------


class ChangeStreamsOff(CosmosTokens):
    """A Cosmos DB account with change streams off (README: it takes CHANGE_SOURCE=polling): no tokens."""

    def command(self, command: Any) -> dict[str, Any]:
        return {"ok": 1}


@pytest.mark.parametrize("tokens", [CosmosTokens, ChangeStreamsOff])
def test_polling_on_cosmos_reads_each_action_once_a_round_by_bucket_ranges(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch, tokens: type[CosmosTokens]
) -> None:
    """Polling reads by a server time and a bucket range: a partition per physical partition has no bucket range, so
    each of them would poll the whole collection (every action read and aggregated once per physical partition),
    and an account without change streams, which has no tokens, would get no actions dispatched at all."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "polling")
    cosmos = tokens(mock_db, partitions=4)
    now = utc_now()
    action_at("bottle-1", now - 5 * MINUTE)

    messages: list[str] = []
    dispatch(cosmos, now=now, settings=get_settings(), send=messages.extend, on_cosmos=True)
    actions = [p for p in (Partition.from_message(json.loads(m)) for m in messages) if p.feed == ACTIONS_FEED]
    runs = [process_partition(cosmos, p, now=now, settings=get_settings()) for p in actions]

    assert len(runs) == get_settings().reports_partitions
    assert sum(run.changes for run in runs) == 1
    assert opened_in_hour(mock_db, now - 5 * MINUTE) == 1


# --- a worker whose tokens are gone ------------------------------------------------------------------------------


def test_a_worker_that_finds_no_partition_tokens_fails_loudly_and_releases_its_lease(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recovering Cosmos DB partition asks GetChangeStreamTokens for a fresh token; a reply without tokens fails
    the run (as it fails the dispatch), and like any failed run it releases the lease, so the retry can claim it at
    once rather than after the lease expires."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    cosmos = CosmosTokens(mock_db, partitions=2)
    now = utc_now()
    messages: list[str] = []
    dispatch(cosmos, now=now, settings=get_settings(), send=messages.extend, on_cosmos=True)
    partition = next(p for p in (Partition.from_message(json.loads(m)) for m in messages) if p.feed == ACTIONS_FEED)
    lease_id = partition.lease_id
    mock_db[schema.LEASES].update_one({"_id": lease_id}, {"$set": {"checkpoint_time": now - MINUTE}})  # recovering

    with pytest.raises(NoPartitionTokens):
        process_partition(ChangeStreamsOff(mock_db, 2), partition, now=now, settings=get_settings(), watch=QuietStream)

    assert mock_db[schema.LEASES].find_one({"_id": lease_id})["owner"] is None
    assert process_partition(cosmos, partition, now=now, settings=get_settings(), watch=QuietStream).claimed
