"""The heartbeat tally: heartbeat counts go into the hourly reports once an hour has closed, by a sweep of the
heartbeat documents one user at a time, not by reading every heartbeat write as a change.

Why: a heartbeat document changes with each heartbeat, and a user's bottles at different minutes, so a change
feed consumer would rewrite each user-hour about six times an hour and roll the day up each time. A pass of a
partition (REPORTS_PARTITIONS ranges of `ub`, the bucket of the owner's `user_id`) reads each heartbeat document of
its users once an hour (each ring holds the whole window) and writes each user-hour once: the hours that closed
since the last pass (due SETTLE after they end), the earlier hours a late heartbeat reached (LATE_FLAG, `la`), and
every hour of a reassigned bottle. Counts are recomputed from the ring, never added, so a pass run twice writes
the same reports. At the hour that ends a block of DAILY_ROLLUP_HOURS a pass rolls up the day of every user it
visits. The lease's token holds the pass under way. A pass as large as the last one is paced (Pace): its pages,
roll-ups included, are spread over REPORTS_TALLY_SPREAD_MINUTES instead of landing in a burst, because autoscale
bills each hour at its highest RU/s. Details: docs/reports.md, "The heartbeat tally".
"""

import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from pymongo.database import Database

from shared.devices.heartbeat_document import OWNERS
from shared.feeds.hand_off import HandOff, held_page
from shared.feeds.leases import ROLLUPS_FROM, Lease
from shared.feeds.settling import CLOCK_MARGIN, SETTLE, hours_due
from shared.feeds.sweeps import (
    EPOCH,
    LAST_BEGAN,
    LAST_PAGES,
    Document,
    Pass,
    PassToken,
    UserKey,
    UserPages,
    pace_of,
    pass_hours,
    pass_token,
)
from shared.instants import HOUR, day_of, format_instant, hour_of
from shared.reports.aggregation import BottleParts, Parts, Stamper, refresh_daily, write_hourly
from shared.reports.documents import heartbeat_parts
from shared.settings import Settings
from shared.store import schema
from shared.store.partitioning import BucketRange, bucket_of
from shared.store.retries import RetryPolicy
from shared.telemetry.observability import error_text, fields

CATCH_UP = timedelta(days=1)  # the roll-ups a pass that fell behind catches up on, beside its own

log = logging.getLogger(__name__)


def counted_from(moment: datetime) -> datetime:
    """The first instant at which a pass may count the hour holding `moment` (for tools and tests that wait
    for it)."""
    return hour_of(moment) + HOUR + SETTLE


def rolled_up_before(now: datetime) -> datetime:
    """Days that ended before this instant may have had their last scheduled roll-up (a pass that counted
    their last hour), so a change to one of their hours rolls the day up again at once. Earlier by CLOCK_MARGIN
    than the passes' own due time: a write dated just before it on one instance is seen by the pass that
    begins after it on another."""
    return hours_due(now + CLOCK_MARGIN)


def rollup_days(current: Pass, block_hours: int, window: timedelta, shift: int = 0) -> set[datetime]:
    """The days a block of whose hours (shifted by `shift` hours: rollup_shift) ends within the pass's last `window`
    of hours, and within the next CATCH_UP of the roll-ups it is behind (`rollups_from`: a pass that fell behind by
    more than a window, or a first pass): a few days a user at most, whatever the lag, so a page's work stays
    bounded."""
    recent = max(current.start, current.end - window)
    days = block_days(recent, current.end, block_hours, shift)
    if current.rollups_from is not None and current.rollups_from < recent:
        days |= block_days(current.rollups_from, min(current.rollups_from + CATCH_UP, recent), block_hours, shift)
    return days


def rollups_left(current: Pass, window: timedelta) -> datetime | None:
    """Where the roll-ups the pass leaves to the next ones start (None: it leaves none)."""
    recent = max(current.start, current.end - window)
    if current.rollups_from is None or current.rollups_from + CATCH_UP >= recent:
        return None
    return current.rollups_from + CATCH_UP


def block_days(after: datetime, until: datetime, block_hours: int, shift: int = 0) -> set[datetime]:
    """The days whose hours are in the blocks of DAILY_ROLLUP_HOURS that end in (after, until]; blocks counted
    from `shift` hours after midnight UTC (a staggered user's: rollup_shift), so a block may hold the end of one
    day and the start of the next, and rolls both up."""
    days = set()
    hour = hour_of(after) + HOUR
    while hour <= until:
        if (hour.hour - shift) % block_hours == 0:
            days |= {day_of(hour - HOUR), day_of(hour - block_hours * HOUR)}
        hour += HOUR
    return days


def rollup_shift(user_id: str, settings: Settings) -> int:
    """The hour of each block at which a user's day is rolled up: 0 (the block's end, every user at once) unless
    DAILY_ROLLUP_STAGGERED, then the user's bucket spreads the users evenly over the block's hours, so each pass
    rolls up a block's share of them rather than every pass at a block's end rolling up all (autoscale bills
    each hour at its peak). Each user's day still rolls up once a block."""
    if not settings.daily_rollup_staggered:
        return 0
    return bucket_of(user_id) % settings.daily_rollup_hours


def next_pass(lease: Lease, *, now: datetime, overlap: timedelta, oldest: timedelta) -> Pass | None:
    """The pass to run now: the one under way, or a new one over the hours due since the last (the first pass:
    every hour the rings hold); None when no hour is due. Late heartbeats are looked for from `overlap` (clock
    skew between instances, writes that commit late) before the last pass began.

    Roll-ups: the days of every block since the last pass's end are rolled up (the actions of a day counted
    while it was open reach its daily report through them only), a first pass's since its lease was made, a
    window a pass (rollup_days) until caught up; none of a day older than `oldest`, whose hourly reports
    may have expired."""
    under_way = Pass.resumed(lease.token)
    if under_way is not None:
        return under_way
    end = hours_due(now)
    start = lease.checkpoint_time or EPOCH
    if start >= end:
        return None
    token = pass_token(lease.token)
    # A late heartbeat the last pass may have missed arrived after that pass began (saved with its end), and
    # so after the last hour it counted had ended, the checkpoint time: without the one, the other (it counts
    # a few again, harmlessly).
    last_began = token.get(LAST_BEGAN) or lease.checkpoint_time
    late_since = None if last_began is None else last_began - overlap
    left = token.get(ROLLUPS_FROM) or (lease.created_at if lease.checkpoint_time is None else start)
    rollups_from = None if left is None else max(left, end - oldest)
    last_pages = token.get(LAST_PAGES)
    return Pass(
        start=start,
        end=end,
        began=now,
        late_since=late_since,
        rollups_from=rollups_from,
        last_pages=None if last_pages is None else int(last_pages),
    )


@dataclass
class TallyRun:
    pages: int = 0
    documents: int = 0
    hourly_written: int = 0
    daily_written: int = 0
    caught_up: bool = False


def run_tally(
    db: Database[Any],
    buckets: BucketRange,
    held: Lease,
    *,
    settings: Settings,
    policy: RetryPolicy,
    wall_clock: Callable[[], datetime],
    out_of_time: Callable[[], bool],
    save: Callable[[Lease], bool],
    pause: Callable[[float], bool] = lambda seconds: False,
    archive: HandOff | None = None,
) -> tuple[Lease, TallyRun]:
    """Count the partition's due hours, page by page, saving the pass's progress after each page and its end
    (the checkpoint time) once every user is done; until caught up, out of time, or the lease is lost (`save`
    returns False). A paced pass (Pace) waits for each page to be due: `pause(seconds)` waits if the run's
    budget allows (True), else the run ends there and a later run carries on. Returns the position reached.

    With `archive`, a pass that `begin` lets hand its bottle-hours holds them (`HourRows`) until it has read their
    bucket to the end, the run ends or the pass ends, then merges them into the archive. A saved position never
    passes a document whose rows are only held, so a run killed meanwhile leaves them to be read again (at most a
    bucket's pages). The archive never stops or fails the tally: at its first failure (`_Handing`) the pass hands
    no more, and counts on."""
    run = TallyRun()
    started = wall_clock()
    overlap = timedelta(seconds=settings.reports_poll_overlap_seconds)
    window = timedelta(hours=settings.heartbeat_window_hours)
    current = next_pass(held, now=started, overlap=overlap, oldest=rollup_horizon(settings))
    if current is None:
        run.caught_up = True
        return held, run
    if archive is not None and current.pages == 0:  # a new pass (one under way has read a page)
        current = replace(current, handing=archive.begin(current))
    handing = _Handing(archive, buckets)
    pages = UserPages(
        db[schema.BOTTLE_HEARTBEATS], buckets, after=current.after, size=settings.reports_page_size, policy=policy
    )
    stamper = Stamper(started)
    spread = timedelta(minutes=settings.reports_tally_spread_minutes)
    pace = pace_of(current, now=started, spread=spread)
    saved_after = current.after
    while not out_of_time():
        wait = 0.0 if pace is None else pace.wait(current.pages, current.paged_at or current.began, wall_clock())
        if wait > 0 and not pause(wait):
            break
        page = pages.next_page()
        if page is None:
            current = handing.flushed(current)
            if current.handing:
                handing.ended(current)
            token: PassToken = {LAST_BEGAN: current.began, LAST_PAGES: current.pages}
            left = rollups_left(current, window)
            if left is not None:
                token[ROLLUPS_FROM] = left
            held = replace(held, checkpoint_time=current.end, token=token)
            run.caught_up = hours_due(wall_clock()) <= current.end
            save(held)  # a lost lease ends the run either way; the worker records it (`save`)
            return held, run
        hourly, daily = count_page(
            db, page, current, stamp=stamper.next(wall_clock()), settings=settings, policy=policy
        )
        run.pages += 1
        run.documents += len(page)
        run.hourly_written += hourly
        run.daily_written += daily
        current = replace(current, after=pages.after, pages=current.pages + 1, paged_at=wall_clock())
        current, saved_after = handing.page(page, current, saved_after)
        held = replace(held, token=replace(current, after=saved_after).token())
        if not save(held):
            return held, run
    if archive is not None and current.handing and archive.rows.holding():
        current = handing.flushed(current)  # the run ends mid-bucket: merge what it holds, then save
        held = replace(held, token=current.token())
        save(held)
    return held, run


class _Handing:
    """A run's hand-off of its pass's bottle-hours to the archive: while the pass hands them (Pass.handing), each
    counted page's rows go to `HandOff.rows`; the archive's first failure is logged and told to it, the rows held
    are dropped, and the pass hands no more (the archive reads them from the heartbeat documents later). Either
    way the tally goes on: nothing the archive raises reaches it."""

    def __init__(self, archive: HandOff | None, buckets: BucketRange) -> None:
        self._archive, self._buckets = archive, buckets

    def page(self, page: list[Document], current: Pass, saved_after: UserKey | None) -> tuple[Pass, UserKey | None]:
        """After a counted page: the pass, and the position to save (held_page)."""
        if self._archive is None or not current.handing:
            return current, current.after
        try:
            return current, held_page(self._archive.rows, page, current, saved_after)
        except Exception as error:  # whatever the archive raises, the reports go on
            return self._failed(current, error), current.after

    def flushed(self, current: Pass) -> Pass:
        """The pass after merging every row held (at a run's or the pass's end)."""
        if self._archive is None or not current.handing:
            return current
        try:
            self._archive.rows.flush()
        except Exception as error:  # whatever the archive raises, the reports go on
            return self._failed(current, error)
        return current

    def ended(self, current: Pass) -> None:
        if self._archive is not None:
            self._archive.ended(current)

    def _failed(self, current: Pass, error: Exception) -> Pass:
        assert self._archive is not None
        log.warning(
            "reports: the heartbeat tally of buckets %d-%d stops handing bottle-hours to the archive for its pass of "
            "%s to %s: %s. The reports are counted as usual; the archive reads those hours from the heartbeat "
            "documents once it answers again (docs/archive.md, When the archive is down)",
            self._buckets.low,
            self._buckets.high - 1,
            format_instant(current.start),
            format_instant(current.end),
            error_text(error),
            extra=fields(buckets=f"{self._buckets.low}-{self._buckets.high - 1}", error=type(error).__name__),
        )
        self._archive.failed(current, error)
        return replace(current, handing=False)


def count_page(
    db: Database[Any],
    page: list[Document],
    current: Pass,
    *,
    stamp: datetime,
    settings: Settings,
    policy: RetryPolicy,
) -> tuple[int, int]:
    """Write the hours a page of whole users' heartbeat documents counts, and roll up the days due; (hourly
    documents written, daily documents written)."""
    by_hour: dict[tuple[str, datetime], dict[str, BottleParts]] = defaultdict(dict)
    users: set[str] = set()
    for doc in page:
        users.add(str(doc["user_id"]))
        users |= {str(owner["user_id"]) for owner in doc.get(OWNERS) or []}
        hours = pass_hours(doc, (current.start, current.end), late_since=current.late_since)
        for key, heartbeat in heartbeat_parts(doc, only=hours).items():
            by_hour[key][str(doc["_id"])] = BottleParts(heartbeat=heartbeat)
    parts: Parts = dict(by_hour)
    hourly, changed = write_hourly(db, parts, stamp, policy)
    window = timedelta(hours=settings.heartbeat_window_hours)
    oldest = rollup_horizon(settings)
    block = settings.daily_rollup_hours
    shifts = {user_id: rollup_shift(user_id, settings) for user_id in users | {user_id for user_id, _ in changed}}
    by_shift = {shift: rollup_days(current, block, window, shift) for shift in set(shifts.values())}
    days = {(user_id, day) for user_id in users for day in by_shift[shifts[user_id]]}
    # An hour this pass changed whose day's block has ended: a late heartbeat's, a reassigned bottle's, or one
    # the first pass found in a ring older than its roll-ups: its day is rolled up again now.
    days |= {
        (user_id, day_of(hour))
        for user_id, hour in changed
        if (hour < current.start or block_end(hour, block, shifts[user_id]) <= current.end)
        and hour >= current.end - oldest
    }
    # Never a day older than the roll-ups' horizon (a staggered block's first day may be): its hours may expire.
    days = {(user_id, day) for user_id, day in days if day >= day_of(current.end - oldest)}
    daily = refresh_daily(db, days, policy) if days else 0
    return hourly, daily


def rollup_horizon(settings: Settings) -> timedelta:
    """How far back a pass rolls days up: hourly reports are kept longer than this (Settings), so a day rolled
    up from them has all its hours; an older day's daily report is kept as it is."""
    return timedelta(days=settings.max_event_age_days + 1)


def block_end(hour: datetime, block_hours: int, shift: int = 0) -> datetime:
    """The end of the block of DAILY_ROLLUP_HOURS (counted from `shift` hours after midnight) that holds `hour`
    (the pass counting up to it rolls the day up)."""
    return hour_of(hour) + HOUR * ((shift - hour.hour - 1) % block_hours + 1)
