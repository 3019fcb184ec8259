"""Following a user's notifications: a reader that polls GET /api/users/{user_id}/notifications with the `cursor` of
its previous answer gets every notification at least once, however the checks' writes interleave with its polls: a
paced sweep writing for minutes, another check's run writing meanwhile, the writers' clocks minutes apart
(docs/api.md, Following the feed). And a reader that polls `since` the newest `created_at` it saw, as before
cursors, misses nothing of a paced sweep when the clocks agree: `created_at` is when a notification is written."""

import base64
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pymongo.database import Database

from functions import notifications as notification_functions
from shared.instants import format_instant, set_clock
from shared.notifications import reading
from shared.notifications.checks.partitions import CheckPartition
from shared.notifications.checks.run import CheckRun, run_check
from shared.notifications.documents import Episode, Kind, record
from shared.notifications.reading import CLOCK_SKEW, feed_lag, list_notifications, parse_query
from shared.settings import get_settings
from shared.store import schema
from shared.store.partitioning import BucketRange
from shared.store.retries import RetryPolicy
from tests.api import SPEC, Response, call_http
from tests.checking import World, work
from tests.fake_time import FakeTime
from tests.report_client import set_setting

START = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)
HOURLY = {"schedule": {"every_hours": 1}, "grace_minutes": 1}  # late 61 minutes after provisioning
BOTTLES = [f"bottle-{i}" for i in range(6)]
USER = SPEC["user_id"]
WHOLE = BucketRange(0, 1)


def get(user_id: str, **params: str) -> Response:
    return call_http(
        notification_functions.get_user_notifications,
        "GET",
        f"/api/users/{user_id}/notifications",
        {"user_id": user_id},
        params=params,
    )


@dataclass
class Follower:
    """A client following a user's feed: each poll reads every page (`limit` at a time) and keeps every id it was
    given; by `cursor` (the answer's, passed back), or as clients did before cursors, `since` the newest
    `created_at` it has seen."""

    by: str  # "cursor" or "since"
    limit: str = "4"
    seen: set[str] = field(default_factory=set)
    position: str | None = None  # the cursor, or the newest created_at seen

    def poll(self) -> None:
        page: str | None = None
        cursors: set[str] = set()
        while True:
            params = {"limit": self.limit}
            if self.position is not None:
                params[self.by] = self.position
            if page is not None:
                params["page"] = page
            response = get(USER, **params)
            assert response.status == 200, response.body
            found = response.body["notifications"]
            self.seen |= {n["id"] for n in found}
            cursors.add(response.body["cursor"])
            if self.by == "since" and found and page is None:
                self.position = max(found[0]["created_at"], self.position or "")
            page = response.body["next_page"]
            if page is None:
                break
        assert len(cursors) == 1, "every page of one poll answers the same cursor"
        if self.by == "cursor":
            self.position = cursors.pop()


def stored_ids(db: Database[Any]) -> set[str]:
    return {n["_id"] for n in db[schema.NOTIFICATIONS].find({"user_id": USER})}


@pytest.fixture
def world(mock_db: Database[Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    """Six bottles of one user, each late for a dose and left open: one batch a bottle, so the late-dose sweep is
    paced over its 4 minutes (a batch every 48 s)."""
    set_setting(monkeypatch, "CHECK_PARTITIONS", "1")
    set_setting(monkeypatch, "CHECK_BATCH_SIZE", "1")
    bench = World(mock_db, START)
    for bottle_id in BOTTLES:
        bench.provision(bottle_id, **HOURLY)
        bench.open(bottle_id)
    bench.at(START + timedelta(minutes=90))
    yield bench
    bench.stop()


def check_run(
    world: World, kind: Kind, fake: FakeTime, began: float, *, skew: timedelta, sleep: Callable[[float], None] | None
) -> CheckRun:
    """A check run that began at `began` on the shared fake clock, on an instance whose clock is `skew` off (its
    notifications are created at its start plus the time gone by on `fake`, as that instance's clock reads)."""
    now = world.now + timedelta(seconds=began) + skew
    return run_check(
        world.db, kind, partition=WHOLE, now=now, settings=get_settings(), send=world.queue, clock=fake, sleep=sleep
    )


def interleaved(world: World, followers: list[Follower], paced_skew: timedelta, other_skew: timedelta) -> CheckRun:
    """The late-dose sweep, paced (a batch every 48 s, on an instance whose clock is `paced_skew` off); at each of
    its waits, after the wait, every follower polls; at the first, the left-open check's run (on an instance
    `other_skew` off) writes its six notifications and every follower polls again. The paced run."""
    fake = FakeTime()
    waits = 0

    def wait(seconds: float) -> None:
        nonlocal waits
        fake.sleep(seconds)
        waits += 1
        for follower in followers:
            follower.poll()
        if waits == 1:
            assert check_run(world, "left_open", fake, fake(), skew=other_skew, sleep=None).notified == 6
            for follower in followers:
                follower.poll()

    for follower in followers:
        follower.poll()
    return check_run(world, "late_dose", fake, 0, skew=paced_skew, sleep=wait)


def test_a_follower_by_cursor_misses_nothing_of_a_paced_sweep_while_another_check_writes(world: World) -> None:
    follower = Follower("cursor")

    paced = interleaved(world, [follower], timedelta(0), timedelta(0))
    follower.poll()

    assert (paced.paced, paced.notified) == (True, 6)
    assert len(stored_ids(world.db)) == 12
    assert follower.seen == stored_ids(world.db)


@pytest.mark.parametrize(
    ("paced_skew", "other_skew"),
    [(-CLOCK_SKEW / 2, CLOCK_SKEW / 2), (CLOCK_SKEW / 2, -CLOCK_SKEW / 2), (timedelta(0), CLOCK_SKEW)],
    ids=["paced run's clock behind", "paced run's clock ahead", "other run's clock ahead"],
)
def test_a_follower_by_cursor_misses_nothing_with_the_writers_clocks_minutes_apart(
    world: World, paced_skew: timedelta, other_skew: timedelta
) -> None:
    """The writers' clocks as far apart as the feed allows (CLOCK_SKEW). With the paced run's clock behind, the
    other run's notifications carry `created_at`s minutes after every later batch of the paced run: a follower
    by `since` misses those batches, one by cursor does not."""
    by_cursor, by_since = Follower("cursor"), Follower("since")

    interleaved(world, [by_cursor, by_since], paced_skew, other_skew)
    by_cursor.poll()
    by_since.poll()

    assert by_cursor.seen == stored_ids(world.db)
    if paced_skew < other_skew:
        assert len(stored_ids(world.db) - by_since.seen) == 5  # every batch of the paced run after the first


def test_a_follower_by_since_misses_nothing_of_a_paced_sweep_when_the_clocks_agree(world: World) -> None:
    """As before cursors: `since` the newest `created_at` seen. A paced batch written after the other check's run
    has a later `created_at` than that run's notifications, so the next poll finds it (it had the paced run's
    start, and was missed)."""
    follower = Follower("since")

    interleaved(world, [follower], timedelta(0), timedelta(0))
    follower.poll()

    assert follower.seen == stored_ids(world.db)


def test_a_paced_sweep_s_notifications_are_created_when_each_batch_is_written(world: World) -> None:
    fake = FakeTime()

    check_run(world, "late_dose", fake, 0, skew=timedelta(0), sleep=fake.sleep)

    created = sorted(n["created_at"] for n in world.notifications("late_dose"))
    assert [(c - world.now).total_seconds() for c in created] == pytest.approx([0, 48, 96, 144, 192, 240])


def test_the_partition_worker_creates_each_paced_batch_s_notifications_on_the_server_clock_as_it_writes_them(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the function: its paced waits pass on the server clock (the world's), and each batch's
    notifications are created when that batch is written, not when the run began."""
    began = world.now

    def wait(seconds: float) -> None:
        world.after(seconds=seconds)

    monkeypatch.setattr("functions.checks.sleep", wait)  # the trigger's own sleep (see test_check_pacing.py)

    work(CheckPartition("late_dose", WHOLE).message())

    created = sorted(n["created_at"] for n in world.notifications("late_dose"))
    assert len(created) == 6
    assert created[0] == began
    assert created[-1] - began >= timedelta(minutes=3)  # the last batch, minutes into the spread


# --- the bound, on the read side alone -------------------------------------------------------------------------

WRITE_WINDOW_S = int(feed_lag(get_settings()).total_seconds() - CLOCK_SKEW.total_seconds())  # the store deadline
HALF_SKEW_S = int(CLOCK_SKEW.total_seconds() // 2)  # each clock within this of the true time


@st.composite
def timelines(draw: st.DrawFn) -> tuple[list[tuple[int, int, int]], list[int]]:
    """Notifications, each (when its writer read its clock, that clock's error, how long until the insert landed),
    in true seconds, within the bounds the feed plans for; and the instants the reader polls at."""
    writers = draw(st.lists(st.integers(-HALF_SKEW_S, HALF_SKEW_S), min_size=1, max_size=3))
    writes = draw(
        st.lists(
            st.tuples(st.integers(0, 1800), st.sampled_from(writers), st.integers(0, WRITE_WINDOW_S)),
            min_size=1,
            max_size=12,
        )
    )
    polls = draw(st.lists(st.integers(0, 2000), min_size=1, max_size=8))
    return writes, polls


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(timeline=timelines())
def test_a_cursor_misses_no_notification_written_within_the_bounds_whatever_the_interleaving(
    mock_db: Database[Any], timeline: tuple[list[tuple[int, int, int]], list[int]]
) -> None:
    """The proof in docs/api.md, played: each notification's `created_at` is its writer's clock (off by at most
    half CLOCK_SKEW) when it read it, and its insert lands within the run's store deadline after; a reader polls at
    random instants, each poll from the last cursor. Every notification is read at least once."""
    mock_db[schema.NOTIFICATIONS].delete_many({})
    writes, polls = timeline
    events = sorted(
        [(read + landed, 0, i) for i, (read, _, landed) in enumerate(writes)] + [(at, 1, -1) for at in polls]
    )
    cursor: str | None = None
    seen: set[str] = set()

    def poll() -> None:
        nonlocal cursor
        page: str | None = None
        while True:
            params = {"limit": "3"} | ({"cursor": cursor} if cursor else {}) | ({"page": page} if page else {})
            answer = list_notifications(mock_db, parse_query(USER, params), settings=get_settings())
            seen.update(n["id"] for n in answer.notifications)
            page = answer.next_page
            if page is None:
                break
        cursor = answer.cursor

    for _, is_poll, i in events:
        if is_poll:
            poll()
            continue
        read, error, _ = writes[i]
        episode = Episode(f"bottle-{i}", USER, "Cordrazine", "left_open", START)
        record(mock_db, [episode], START + timedelta(seconds=read + error), RetryPolicy())
    poll()

    assert seen == stored_ids(mock_db)


# --- the cursor itself -----------------------------------------------------------------------------------------


@pytest.fixture
def server_clock() -> Iterator[None]:
    set_clock(lambda: START + timedelta(hours=3))
    yield
    set_clock(None)


def notify(db: Database[Any], created: datetime, bottle: str) -> str:
    episode = Episode(bottle, USER, "Cordrazine", "silent", created - timedelta(hours=1))
    record(db, [episode], created, RetryPolicy())
    return episode.notification_id


def test_a_cursor_reads_again_from_the_feed_lag_before_the_newest_notification_and_never_goes_back(
    mock_db: Database[Any], server_clock: None
) -> None:
    lag = feed_lag(get_settings())
    newest_at = START + lag + timedelta(minutes=6)
    old = notify(mock_db, START, "b0")
    recent = notify(mock_db, newest_at - timedelta(minutes=1), "b1")
    newest = notify(mock_db, newest_at, "b2")

    first = get(USER).body
    again = get(USER, cursor=first["cursor"]).body
    within = notify(mock_db, newest_at - lag, "b3")  # written since, by a clock behind: the lag before the newest
    beyond = notify(mock_db, newest_at - lag - timedelta(milliseconds=1), "b4")  # a millisecond more: outside
    third = get(USER, cursor=again["cursor"]).body

    assert [n["id"] for n in first["notifications"]] == [newest, recent, old]
    assert [n["id"] for n in again["notifications"]] == [newest, recent]  # from the lag before `newest` on
    assert again["cursor"] == first["cursor"]
    assert [n["id"] for n in third["notifications"]] == [newest, recent, within]
    assert beyond in {n["id"] for n in get(USER).body["notifications"]}  # stored, and outside the cursor's reach


def test_a_poll_that_finds_nothing_answers_the_cursor_it_was_given_and_an_unknown_user_one_from_the_start(
    mock_db: Database[Any], server_clock: None
) -> None:
    empty = get("nobody").body
    assert (empty["notifications"], empty["next_page"]) == ([], None)
    assert get("nobody", cursor=empty["cursor"]).body["cursor"] == empty["cursor"]

    created = notify(mock_db, START, "b1")  # the user's first notification, after that poll: found
    assert [n["id"] for n in get(USER, cursor=empty["cursor"]).body["notifications"]] == [created]


def test_with_since_and_a_cursor_the_later_bound_holds(mock_db: Database[Any], server_clock: None) -> None:
    old = notify(mock_db, START, "b0")
    new = notify(mock_db, START + timedelta(hours=1), "b1")
    from_the_start = get("nobody").body["cursor"]

    since_later = get(USER, cursor=from_the_start, since=format_instant(START + timedelta(minutes=30))).body

    assert [n["id"] for n in since_later["notifications"]] == [new]
    assert [n["id"] for n in get(USER, cursor=from_the_start).body["notifications"]] == [new, old]


def test_a_page_token_from_before_cursors_still_pages(mock_db: Database[Any], server_clock: None) -> None:
    """A `next_page` handed out before this release (the feed key alone) still reads the next page; that page's
    cursor is then its own newest less the lag, never earlier than the poll's bound."""
    ids = [notify(mock_db, START + timedelta(minutes=i), f"b{i}") for i in range(3)]
    feed_key = f"{format_instant(START + timedelta(minutes=2))}|{ids[2]}"  # the newest's, as the old token held it
    old_token = base64.urlsafe_b64encode(feed_key.encode()).decode().rstrip("=")

    answer = get(USER, page=old_token).body

    assert [n["id"] for n in answer["notifications"]] == [ids[1], ids[0]]
    assert reading._decode_cursor(answer["cursor"]) == START + timedelta(minutes=1) - feed_lag(get_settings())


@pytest.mark.parametrize(
    "cursor",
    ["not-a-cursor", reading._token("c1|yesterday"), reading._token("2026-05-04T09:00:00.000Z"), "_-_-"],
)
def test_a_bad_cursor_is_400_naming_it(mock_db: Database[Any], cursor: str) -> None:
    response = get(USER, cursor=cursor)

    assert response.status == 400
    [detail] = response.body["details"]
    assert (detail["field"], detail["message"]) == ("cursor", "is not a cursor from a previous answer's cursor")
