"""The report feeds through layout changes (shared/feeds/layouts.py): layouts that come back
(REPORTS_PARTITIONS 4 -> 8 -> 4, a Cosmos DB partition merged back), the leases the previous code left, and the
tally's pass state across a layout change. Each test plays the app's own dispatcher and workers."""

import json
import random
import zlib
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from pymongo.errors import OperationFailure

from shared.bottles.provisioning import provision
from shared.bottles.spec import BottleSpec
from shared.consumers.plugged import dispatch, partition_of, process_partition
from shared.feeds.consumers import PartitionRun
from shared.feeds.partitions import NoPartitionTokens, Partition
from shared.ingestion.receive import receive
from shared.instants import utc_now
from shared.reports.feeds import ACTIONS_FEED
from shared.settings import Settings, get_settings
from shared.store import schema
from shared.store.cosmos import feed_range
from tests.api import SPEC, opened, post_events, provisioned
from tests.cosmos_fakes import EPK_TOP, CosmosTokens, QuietStream, epk
from tests.fake_time import clock_stopped_at
from tests.report_client import set_setting, work
from tests.tally_fleet import CLOCK, HOUR, Fleet, tally_passes, ticking, user_in
from tests.tally_fleet import DAY as TALLY_DAY
from tests.tally_fleet import opened as tally_opened
from tools.host.worker import InvocationFailed

# The tests play their instants from a fixed day: the clock runs from a week after it (tests/tally_fleet.py).
pytestmark = pytest.mark.own_clock(CLOCK)

MINUTE = timedelta(minutes=1)
DAY = timedelta(days=1)


def round_at(db: Any, now: datetime, settings: Settings, *, on_cosmos: bool = False) -> list[PartitionRun]:
    """One dispatch at `now` and a worker run for each partition it sent (on Cosmos DB, of change streams
    where nothing new arrives: a partition without a token recovers by polling); the actions feed's runs."""
    messages: list[str] = []
    dispatch(db, now=now, settings=settings, send=messages.extend, on_cosmos=on_cosmos)
    partitions = [partition_of(json.loads(m)) for m in messages]
    watch = QuietStream if on_cosmos else None
    runs = [process_partition(db, p, now=now, settings=settings, watch=watch) for p in partitions]
    return [run for run, p in zip(runs, partitions, strict=True) if p.feed == ACTIONS_FEED]


def action_at(bottle_id: str, at: datetime) -> None:
    with clock_stopped_at(at):
        assert post_events(bottle_id, provisioned(bottle_id), opened(at)).status == 202


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
    from layout 1's frozen checkpoint re-reads 30 days of the whole collection per new lease (the failure this pins)."""
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
    assert [None if d is None else (d.get("opened", 0), d.get("heartbeats", 0)) for d in days] == [
        (1, 1),
        (1, 0),
        (1, 0),
        (1, 0),
    ]


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
    actions = [p for p in (partition_of(json.loads(m)) for m in messages) if p.feed == ACTIONS_FEED]
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
    partition = next(p for p in (partition_of(json.loads(m)) for m in messages) if p.feed == ACTIONS_FEED)
    lease_id = partition.lease_id
    mock_db[schema.LEASES].update_one({"_id": lease_id}, {"$set": {"checkpoint_time": now - MINUTE}})  # recovering

    with pytest.raises(NoPartitionTokens):
        process_partition(ChangeStreamsOff(mock_db, 2), partition, now=now, settings=get_settings(), watch=QuietStream)

    assert mock_db[schema.LEASES].find_one({"_id": lease_id})["owner"] is None
    assert process_partition(cosmos, partition, now=now, settings=get_settings(), watch=QuietStream).claimed


# --- splits and merges at any moment, against what was written -------------------------------------------------


def span_token(span: tuple[str, str], state: str) -> dict[str, Any]:
    """A resume token of the documented shape for a feed range, at a position (`state`: the receive time of the
    last action it has read, ISO; "" before the first)."""
    continuation = {
        "FeedRange": {"type": "Effective Partition Key Range", "value": {"min": span[0], "max": span[1]}},
        "State": {"type": "continuation", "value": json.dumps(state)},
    }
    return {"_data": json.dumps({"V": 2, "Rid": "PxUaALn0SKE=", "Continuation": [continuation]}).encode(), "_kind": 1}


def state_of(token: dict[str, Any]) -> str:
    return str(json.loads(json.loads(token["_data"])["Continuation"][0]["State"]["value"]))


def key_of(boundary: str) -> int:
    return 0 if boundary == "" else EPK_TOP if boundary == "FF" else int(boundary, 16)


def epk_of(document: dict[str, Any]) -> int:
    return zlib.crc32(str(document["bottle_id"]).encode()) % EPK_TOP


class CosmosFeed(CosmosTokens):
    """`bottle_actions` as Cosmos DB serves it, per physical partition: GetChangeStreamTokens gives each range's
    token at the present, and a change stream opened with a token reads its range's actions after the token's
    position, in server batches (each action's key is a hash of its bottle; the tests write actions in receive
    time order, which is then the commit order). A token of a range that no longer exists is rejected. `hooks` run
    before each batch a stream fetches (a split in the middle of a worker's run)."""

    BATCH = 2

    def __init__(self, db: Any, partitions: int) -> None:
        super().__init__(db, partitions)
        self.hooks: list[Callable[[], None]] = []

    def spans(self) -> set[tuple[str, str]]:
        return {(epk(low), epk(high)) for low, high in self.ranges}

    def present(self) -> str:
        last = self._db[schema.BOTTLE_ACTIONS].find_one({}, {"received_at": 1}, sort=[("received_at", -1)])
        return "" if last is None else str(last["received_at"].isoformat())

    def tokens(self) -> list[dict[str, Any]]:
        present = self.present()
        tokens = [span_token(span, present) for span in self.spans()]
        self._order.shuffle(tokens)
        return tokens

    def merge(self, index: int) -> None:
        """Merge the index-th range with the next (Cosmos DB's partition merge)."""
        ranges = sorted(self.ranges)
        (low, _), (_, high) = ranges[index], ranges[index + 1]
        self.ranges = sorted([*ranges[:index], (low, high), *ranges[index + 2 :]])

    def watch(self, partition: Partition, token: Any) -> "RangeStream":
        span = feed_range(token)
        if span not in self.spans():
            raise OperationFailure("resume token is no longer valid", code=280)  # not transient: raised as it is
        return RangeStream(self, span, state_of(token))


class RangeStream:
    def __init__(self, feed: CosmosFeed, span: tuple[str, str], state: str) -> None:
        self._feed, self._span, self._state = feed, span, state
        self._batch: list[dict[str, Any]] = []
        self.resume_token = span_token(span, state)

    def _fetch(self) -> bool:
        for hook in list(self._feed.hooks):
            hook()
        after = {"received_at": {"$gt": datetime.fromisoformat(self._state)}} if self._state else {}
        low, high = key_of(self._span[0]), key_of(self._span[1])
        actions = self._feed[schema.BOTTLE_ACTIONS]
        # The keys, then the batch's documents: mongomock copies every document a query returns.
        found = actions.find(after, {"bottle_id": 1}).sort("received_at", 1)
        ids = [d["_id"] for d in found if low <= epk_of(d) < high][: CosmosFeed.BATCH]
        self._batch = list(actions.find({"_id": {"$in": ids}}).sort("received_at", 1)) if ids else []
        if self._batch:
            self._state = self._batch[-1]["received_at"].isoformat()
        return bool(self._batch)

    def next_change(self) -> dict[str, Any] | None:
        if not self._batch and not self._fetch():
            return None
        document = self._batch.pop(0)
        self.resume_token = span_token(self._span, self._state)  # the batch's token: after the batch
        return {"documentKey": {"_id": document["_id"]}, "fullDocument": document, "ns": {}}

    def at_batch_end(self) -> bool:
        return not self._batch

    def close(self) -> None:
        pass


class Churn:
    """Actions written and partitions reshaped at random (seeded), with the dispatcher and workers running."""

    def __init__(self, db: Any, seed: int) -> None:
        self.settings = get_settings()
        self.rng = random.Random(seed)
        self.feed = CosmosFeed(db, partitions=1)
        self.now = utc_now() - DAY
        self.db = db
        spec, now = BottleSpec.model_validate(SPEC), utc_now()
        self.keys = {
            f"bottle-{i}": provision(
                db, f"bottle-{i}", spec, rotate_key=False, now=now, settings=self.settings
            ).device_key
            or ""
            for i in range(12)
        }
        self.written: list[datetime] = []

    def write(self, count: int) -> None:
        """`count` opened events, each of a bottle at random, received 7 s apart (through the app's ingestion, as
        the events route stores them: the feed and the workers are what these tests play)."""
        for _ in range(count):
            self.now += timedelta(seconds=7)
            bottle, at = self.rng.choice(sorted(self.keys)), self.now
            body = json.dumps(opened(at)).encode()
            assert receive(self.db, bottle, self.keys[bottle], body, now=at, settings=self.settings).stored == 1
            self.written.append(at)

    def reshape(self) -> None:
        if self.rng.random() < 0.6 or self.feed.partitions == 1:
            self.feed.split(self.rng.randrange(self.feed.partitions))
        else:
            self.feed.merge(self.rng.randrange(self.feed.partitions - 1))

    def round(self, *, lossy: bool, on_cosmos: bool = True) -> None:
        """A dispatch and its messages' runs: lossy, some are lost, some split the feed in the middle of their
        run (and the children then run at once), some run out of budget after a page."""
        messages: list[str] = []
        dispatch(self.feed, now=self.now, settings=self.settings, send=messages.extend, on_cosmos=on_cosmos)
        for partition in (partition_of(json.loads(m)) for m in messages):
            if partition.feed != ACTIONS_FEED or (lossy and self.rng.random() < 0.25):
                continue  # lost (its dispatch mark holds it back until it could have expired)
            if lossy and self.rng.random() < 0.2:
                self.feed.hooks.append(self.split_mid_run)
            clock = ticking(30 if lossy and self.rng.random() < 0.3 else 1)  # 30 s against 45 s: a page, then out
            process_partition(
                self.feed, partition, now=self.now, settings=self.settings, clock=clock, watch=self.feed.watch
            )
            self.feed.hooks.clear()

    def split_mid_run(self) -> None:
        self.feed.hooks.clear()
        self.write(self.rng.randrange(3))
        self.reshape()
        self.round(lossy=False)

    def expected(self) -> dict[datetime, int]:
        hours: dict[datetime, int] = {}
        for at in self.written:
            hour = at.replace(minute=0, second=0, microsecond=0)
            hours[hour] = hours.get(hour, 0) + 1
        return hours


@pytest.mark.parametrize("seed", range(6))
def test_reports_are_exact_through_splits_and_merges_at_any_moment(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Actions written throughout; physical partitions split (sometimes in the middle of a worker's run, whose
    checkpoint then comes after its children were made, and which may run at once) and merge; work messages lost
    or run out of budget after a page. Once the layout rests and every partition has run to the end, every
    action is in its hour's report, and every replaced lease is retired."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    churn = Churn(mock_db, seed)
    for _ in range(30):
        churn.write(churn.rng.randrange(4))
        if churn.rng.random() < 0.3:
            churn.reshape()
        churn.now += MINUTE
        churn.round(lossy=True)
    for _ in range(6):  # the layout rests; every message runs to the end
        churn.now += timedelta(seconds=churn.settings.reports_lease_seconds + 60)
        churn.round(lossy=False)

    expected = churn.expected()
    assert {hour: opened_in_hour(mock_db, hour) for hour in expected} == expected
    assert len(live_leases(mock_db, ACTIONS_FEED.key)) == churn.feed.partitions


@pytest.mark.parametrize("seed", range(4))
def test_reports_are_exact_through_partition_counts_changed_back_and_forth(mock_db: Any, seed: int) -> None:
    """REPORTS_PARTITIONS changed at random (back to earlier counts too) between dispatches, on a store without
    physical partitions (polling by bucket range), work messages lost or cut short: every action is counted."""
    churn = Churn(mock_db, seed)
    for step in range(36):
        churn.write(churn.rng.randrange(4))
        churn.now += MINUTE
        count = churn.rng.choice([1, 2, 3, 4, 8]) if step % 4 == 0 else churn.settings.reports_partitions
        churn.settings = churn.settings.model_copy(update={"reports_partitions": count, "change_source": "polling"})
        churn.round(lossy=step < 30, on_cosmos=False)
    for _ in range(3):
        churn.now += timedelta(seconds=churn.settings.reports_lease_seconds + 60)
        churn.round(lossy=False, on_cosmos=False)

    expected = churn.expected()
    assert {hour: opened_in_hour(mock_db, hour) for hour in expected} == expected
    assert len(live_leases(mock_db, ACTIONS_FEED.key)) == churn.settings.reports_partitions


@pytest.mark.parametrize("seed", range(3))
def test_heartbeat_counts_are_exact_through_partition_counts_changed_back_and_forth(mock_db: Any, seed: int) -> None:
    """The tally's leases are bucket ranges of the users: REPORTS_PARTITIONS changed at random between its hourly
    passes (some passes lost, some cut short after a page) must neither skip an hour nor leave a day's roll-up
    behind its hours."""
    rng = random.Random(seed)
    users = [user_in(low, low + 128, f"u{low}-") for low in range(0, 1024, 128)]
    fleet = Fleet(mock_db, Settings(change_source="polling"))
    for i, user in enumerate(users):
        fleet.provision(f"b{i}", user, TALLY_DAY)
    expected: dict[str, dict[datetime, int]] = {user: {} for user in users}
    hours = 30
    for hour in range(hours):
        start = TALLY_DAY + hour * HOUR
        for i, user in enumerate(users):
            for minute in (2, 32):
                if rng.random() < 0.8:
                    fleet.beat(f"b{i}", start + timedelta(minutes=minute + i))
                    expected[user][start] = expected[user].get(start, 0) + 1
        settings = Settings(
            reports_partitions=rng.choice([1, 2, 3, 4, 8]), reports_page_size=1, change_source="polling"
        )
        if rng.random() < 0.8:  # a pass lost now and then
            tally_passes(mock_db, settings, start + HOUR + 10 * MINUTE, cut_short=lambda: rng.random() < 0.3)
    # The layout rests: passes run to the end, for a block and an hour (a staggered user's day rolls up at its own
    # hour of the block).
    for extra in range(1, Settings().daily_rollup_hours + 2):
        tally_passes(mock_db, settings, TALLY_DAY + (hours + extra) * HOUR + 10 * MINUTE)

    assert {user: fleet.hourly(user) for user in users} == expected
    for user in users:
        for day in (TALLY_DAY, TALLY_DAY + DAY):
            daily = fleet.daily(user, day)
            counted = sum(n for hour, n in expected[user].items() if day <= hour < day + DAY)
            assert (daily or {}).get("heartbeats", 0) == counted, (user, day)


def test_a_message_for_a_partition_that_split_before_its_first_run_leaves_it_to_its_children(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lease made with its range's token but never run (its message still queued, or lost) when the range splits:
    the queued message's run must not open a stream at the token of a range that no longer exists (rejected, the
    run would fail on every delivery into the poison queue), but find the layout changed and leave it to the
    children, as a run with a saved position does."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    feed = CosmosFeed(mock_db, partitions=1)
    now = utc_now()
    messages: list[str] = []
    dispatch(feed, now=now, settings=get_settings(), send=messages.extend, on_cosmos=True)
    [parent] = [p for p in (partition_of(json.loads(m)) for m in messages) if p.feed == ACTIONS_FEED]
    feed.split(0)

    run = process_partition(feed, parent, now=now, settings=get_settings(), watch=feed.watch)

    assert run.layout_changed
    assert mock_db[schema.LEASES].find_one({"_id": parent.lease_id})["owner"] is None


@pytest.mark.parametrize("seed", range(3))
def test_reports_are_exact_through_change_source_switches_on_cosmos(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """CHANGE_SOURCE switched back and forth on Cosmos DB moves the actions feed between bucket ranges (polling)
    and feed ranges (change streams), while partitions split: each layout starts from the other's position."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    churn = Churn(mock_db, seed)
    for step in range(30):
        churn.write(churn.rng.randrange(4))
        if churn.rng.random() < 0.2:
            churn.reshape()
        if step % 6 == 0:
            source = "polling" if churn.settings.change_source == "change_stream" else "change_stream"
            churn.settings = churn.settings.model_copy(update={"change_source": source})
        churn.now += MINUTE
        churn.round(lossy=True)
    for _ in range(4):
        churn.now += timedelta(seconds=churn.settings.reports_lease_seconds + 60)
        churn.round(lossy=False)

    expected = churn.expected()
    assert {hour: opened_in_hour(mock_db, hour) for hour in expected} == expected


# --- the upgrade's queued messages -------------------------------------------------------------------------------


def test_a_cosmos_work_message_queued_before_the_upgrade_is_dropped_not_failed_into_the_poison_queue(
    mock_db: Any,
) -> None:
    """The code before feed ranges sent `{"feed", "partition", "of", "cosmos": true}`; such messages may sit in the
    queue when this version is deployed. Like a retired feed's, the worker drops them (the next dispatch sends the
    partition under its range), rather than failing five times into the poison queue, where they count as
    failures and alert."""
    work(json.dumps({"feed": ACTIONS_FEED.key, "partition": 0, "of": 3, "cosmos": True}))  # no error

    assert mock_db[schema.LEASES].count_documents({}) == 0
    with pytest.raises(InvocationFailed, match=r"ValueError: .*without its feed range"):
        work(json.dumps({"feed": ACTIONS_FEED.key, "partition": 0, "of": 3, "cosmos": True, "range": ["", 7]}))
