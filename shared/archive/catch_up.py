"""The archive's heartbeats beside the heartbeat tally, so that an archive that is down never stops or slows a report.

The tally hands the bottle-hours it counts to the archive through a port (shared/feeds/hand_off.py
`HandOff`, here `ArchiveHandOff`):
no heartbeat document is read for the archive while it answers. The archive keeps its own position in the tally's
hours, a lease per tally partition (the feed `heartbeats_archive`, the same bucket ranges): a pass the tally
handed whole moves it on (`handed`, applied when the archive is where the pass started). A pass the tally could not
hand whole (the archive failed, or was known to be down when the pass began: `unreachable_at`) leaves it behind,
and the dispatcher then sends the archive's own run (`run_catch_up`), which reads those hours from the heartbeat
documents (their rings hold HEARTBEAT_WINDOW_HOURS) and merges them into the files, by key, as the tally's hand-off
does: each bottle-hour once. How and why: docs/archive.md, "When the archive is down"."""

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Protocol, TypedDict

from pymongo.collection import Collection
from pymongo.database import Database

from shared.archive.feeds import HEARTBEATS_ARCHIVE
from shared.feeds.consumers import Trail
from shared.feeds.hand_off import HourRows, held_page
from shared.feeds.leases import Lease, LeaseDocument
from shared.feeds.partitions import Feed, Partition
from shared.feeds.sweeps import EPOCH, LAST_BEGAN, LAST_PAGES, Pass, UserPages, pace_of, pass_token
from shared.instants import HOUR, format_instant, hour_of
from shared.settings import Settings
from shared.store import schema
from shared.store.retries import RetryPolicy, with_retries
from shared.telemetry.observability import error_text, fields

log = logging.getLogger(__name__)

HANDED = "handed"  # in the archive's lease: the last pass the tally handed whole (its start, end, began, late_since)
UNREACHABLE_AT = "unreachable_at"  # in the archive's lease: when the archive last failed (None: it answers)
PROBE_EVERY = timedelta(minutes=5)  # while the archive is down, how often a partition's catch-up tries the store


class HandedPass(TypedDict):
    """The last pass the tally handed whole: the hours it counted, when it began, and from when it looked for late
    heartbeats."""

    start: datetime
    end: datetime
    began: datetime
    late_since: datetime | None


class CatchUpLeaseDocument(LeaseDocument, total=False):
    """A lease of the archive's heartbeats: a feed lease (shared/feeds/leases.py) with the archive's own fields."""

    handed: HandedPass | None  # HANDED
    unreachable_at: datetime | None  # UNREACHABLE_AT


def catch_up_leases(db: Database[Any]) -> Collection[CatchUpLeaseDocument]:
    """The `leases` collection, its documents typed as the archive's heartbeats' leases."""
    return db[schema.LEASES]


class CatchUpRows(HourRows, Protocol):
    """The archive's files as the catch-up merges into them, with a probe of its store."""

    def check(self) -> None:
        """Raise if the archive's store does not answer."""


def archive_partition(tally: Partition) -> Partition:
    """The archive's heartbeat partition of a tally partition's buckets."""
    return Partition(HEARTBEATS_ARCHIVE, tally.index, tally.count)


def followed(partition: Partition, follows: Feed) -> Partition:
    """The partition of `follows` (the tally's feed) of the same buckets as a partition of the archive's heartbeats."""
    return Partition(follows, partition.index, partition.count)


def _late_since(doc: Mapping[str, Any], overlap: timedelta) -> datetime | None:
    """Where the archive's next pass would look for late heartbeats from, as the tally's next_pass does."""
    began = pass_token(doc.get("token")).get(LAST_BEGAN) or doc.get("checkpoint_time")
    return None if began is None else began - overlap


def _covers(handed: Mapping[str, Any] | None, doc: Mapping[str, Any], overlap: timedelta) -> bool:
    """Whether a handed pass holds every bottle-hour the archive's next pass would read: it starts where the archive
    is, and looks for late heartbeats from no later than the archive would (a pass with no `late_since` is a first
    pass: it counts every hour the rings hold)."""
    if not handed or handed.get("start") != (doc.get("checkpoint_time") or EPOCH):
        return False
    if handed.get("late_since") is None:
        return True
    late = _late_since(doc, overlap)
    return late is not None and handed["late_since"] <= late


class ArchiveHandOff:
    """The tally's port to the archive's heartbeats (shared/feeds/hand_off.py HandOff) for one tally partition: the
    rows go to `rows`; the position is the archive's lease of the same buckets."""

    def __init__(
        self,
        db: Database[Any],
        tally: Partition,
        rows: HourRows,
        *,
        overlap: timedelta,
        policy: RetryPolicy,
        wall_clock: Callable[[], datetime],
    ) -> None:
        self._db, self.rows, self._overlap, self._policy, self._clock = db, rows, overlap, policy, wall_clock
        self._lease_id = archive_partition(tally).lease_id

    def begin(self, current: Pass) -> bool:
        """A new pass hands its rows unless the archive has no lease yet or is known to be down (then the archive
        reads the pass's hours itself once it answers, and the tally tries no call that could only wait and fail)."""
        doc = self._lease()
        return doc is not None and doc.get("retired_at") is None and doc.get(UNREACHABLE_AT) is None

    def failed(self, current: Pass, error: Exception) -> None:
        """Mark the archive down (the passes that begin from now hand nothing) until its catch-up finds it up."""
        _mark_down(self._db, self._lease_id, at=self._clock(), policy=self._policy)

    def ended(self, current: Pass) -> None:
        """Record the pass as handed whole (unless a later one is recorded already), and move the archive's position
        past it if the archive is where it started and no run of the archive holds the lease; otherwise the archive's
        next run does, once it is there."""
        handed: HandedPass = {
            "start": current.start,
            "end": current.end,
            "began": current.began,
            "late_since": current.late_since,
        }
        newer = {"$or": [{HANDED: None}, {f"{HANDED}.end": {"$lte": current.end}}]}
        record: CatchUpLeaseDocument = {"handed": handed}
        with_retries(
            lambda: catch_up_leases(self._db).update_one({"_id": self._lease_id, **newer}, {"$set": record}),
            self._policy,
        )
        doc = self._lease()
        if doc is None or not _covers(handed, doc, self._overlap):
            return
        now = self._clock()
        free = {"$or": [{"owner": None}, {"expires_at": {"$lt": now}}]}
        guard: dict[str, Any] = {"_id": self._lease_id, "version": doc.get("version")}
        guard.update(checkpoint_time=doc.get("checkpoint_time"), **free)
        moved: CatchUpLeaseDocument = {
            "checkpoint_time": current.end,
            "token": {LAST_BEGAN: current.began},
            "source": "tally",
            "updated_at": now,
        }
        with_retries(lambda: catch_up_leases(self._db).update_one(guard, {"$set": moved}), self._policy)

    def _lease(self) -> CatchUpLeaseDocument | None:
        return with_retries(lambda: catch_up_leases(self._db).find_one({"_id": self._lease_id}), self._policy)


# --- the archive's own run ------------------------------------------------------------------------------------


@dataclass
class CatchUpRun:
    pages: int = 0
    documents: int = 0
    caught_up: bool = False


def run_catch_up(
    db: Database[Any],
    partition: Partition,
    held: Lease,
    *,
    follows: Feed,
    rows: CatchUpRows,
    settings: Settings,
    policy: RetryPolicy,
    wall_clock: Callable[[], datetime],
    out_of_time: Callable[[], bool],
    save: Callable[[Lease], bool],
    pause: Callable[[float], bool] = lambda seconds: False,
) -> tuple[Lease, CatchUpRun]:
    """One run of the archive's heartbeats of `partition`: first a pass the tally handed whole, if the archive is
    where it starts; then, while the archive is behind the tally's position, a pass of its own over those hours,
    reading the partition's heartbeat documents page by page (paced like the tally's) and merging their
    bottle-hours into the files, saving its position after each page (never past rows only held) until done, out of
    time or the lease is lost. Returns the position.

    First one call to the store (`rows.check`): if it does not answer, the run ends there, having read nothing, and
    marks the archive down (the tally's passes that begin meanwhile hand nothing; the dispatcher sends this
    partition again PROBE_EVERY later); if it answers, the mark goes. A merge that fails after that fails the run
    (the message is retried), as the sweep of the events does."""
    run = CatchUpRun()
    overlap = timedelta(seconds=settings.reports_poll_overlap_seconds)
    held = _with_handed(db, partition, held, overlap=overlap, policy=policy, save=save)
    current = Pass.resumed(held.token)
    fresh = current is None
    if current is None:
        current = _new_pass(db, partition, held, follows=follows, now=wall_clock(), overlap=overlap, policy=policy)
        if current is None:
            run.caught_up = True
            return held, run
    try:
        rows.check()
    except Exception as error:  # the store is down: no read, no failure; the next dispatch after PROBE_EVERY tries
        _mark_down(db, partition.lease_id, at=wall_clock(), policy=policy)
        log.warning(
            "archive: %s: the archive's store does not answer (%s); the heartbeat hours from %s stay to be read "
            "from the rings once it does (tried again in %d minutes), and the tally hands nothing meanwhile",
            partition.lease_id,
            error_text(error),
            format_instant(current.start),
            PROBE_EVERY // timedelta(minutes=1),
            extra=fields(partition=partition.lease_id, feed=partition.feed.key, error=type(error).__name__),
        )
        return held, run
    _mark_up(db, partition, policy=policy)
    if fresh:
        _log_lost(partition, current, settings=settings)
    buckets = partition.buckets
    assert buckets is not None, "the archive's heartbeat partitions are bucket ranges, as the tally's"
    pages = UserPages(
        db[schema.BOTTLE_HEARTBEATS], buckets, after=current.after, size=settings.reports_page_size, policy=policy
    )
    pace = pace_of(current, now=wall_clock(), spread=timedelta(minutes=settings.reports_tally_spread_minutes))
    saved_after = current.after
    while not out_of_time():
        wait = 0.0 if pace is None else pace.wait(current.pages, current.paged_at or current.began, wall_clock())
        if wait > 0 and not pause(wait):
            break
        page = pages.next_page()
        if page is None:
            rows.flush()
            held = replace(held, checkpoint_time=current.end, token={LAST_BEGAN: current.began})
            if not save(held):
                return held, run
            held = _with_handed(db, partition, held, overlap=overlap, policy=policy, save=save)
            run.caught_up = True
            return held, run
        run.pages += 1
        run.documents += len(page)
        current = replace(current, after=pages.after, pages=current.pages + 1, paged_at=wall_clock())
        saved_after = held_page(rows, page, current, saved_after)
        held = replace(held, token=replace(current, after=saved_after).token())
        if not save(held):
            return held, run
    if rows.holding():  # the run ends mid-bucket: merge what it holds, then save
        rows.flush()
        held = replace(held, token=current.token())
        save(held)
    return held, run


def _with_handed(
    db: Database[Any],
    partition: Partition,
    held: Lease,
    *,
    overlap: timedelta,
    policy: RetryPolicy,
    save: Callable[[Lease], bool],
) -> Lease:
    """The position past the pass the tally handed whole, if the archive is where it starts (saved); else as it is."""
    if Pass.resumed(held.token) is not None:
        return held
    doc = with_retries(lambda: catch_up_leases(db).find_one({"_id": partition.lease_id}), policy)
    if doc is None:
        return held
    current = {**doc, "checkpoint_time": held.checkpoint_time, "token": held.token}
    handed = doc.get("handed")
    if handed is None or not _covers(handed, current, overlap):
        return held
    moved = replace(held, checkpoint_time=handed["end"], token={LAST_BEGAN: handed["began"]})
    return moved if save(moved) else held


def _new_pass(
    db: Database[Any],
    partition: Partition,
    held: Lease,
    *,
    follows: Feed,
    now: datetime,
    overlap: timedelta,
    policy: RetryPolicy,
) -> Pass | None:
    """A pass over the hours the tally has counted and the archive has not (None: it has them all), paced by the
    tally's last pass."""
    tally = with_retries(lambda: catch_up_leases(db).find_one({"_id": followed(partition, follows).lease_id}), policy)
    until = None if tally is None else tally.get("checkpoint_time")
    start = held.checkpoint_time or EPOCH
    if tally is None or until is None or start >= until:
        return None
    last_pages = pass_token(tally.get("token")).get(LAST_PAGES)
    return Pass(
        start=start,
        end=until,
        began=now,
        late_since=_late_since({"checkpoint_time": held.checkpoint_time, "token": held.token}, overlap),
        last_pages=None if last_pages is None else int(last_pages),
    )


def _log_lost(partition: Partition, current: Pass, *, settings: Settings) -> None:
    """An error if the archive fell further behind than the rings' window (a store down for longer than
    HEARTBEAT_WINDOW_HOURS): the bottle-hours it missed that the rings no longer hold are lost from it (a ring keeps
    its window at least, in fields of 4 hours, so some may be left)."""
    oldest = hour_of(current.began) - (settings.heartbeat_window_hours - 1) * HOUR  # the rings hold no earlier hour
    if current.start == EPOCH or current.start >= oldest:
        return
    log.error(
        "archive: %s: the archive's heartbeats fell behind at %s, further back than the rings' window "
        "(HEARTBEAT_WINDOW_HOURS %d, from %s): the bottle-hours of %s to %s the rings no longer hold are lost from "
        "the archive (the reports keep their counts); it archives those they still hold",
        partition.lease_id,
        format_instant(current.start),
        settings.heartbeat_window_hours,
        format_instant(oldest),
        format_instant(current.start),
        format_instant(oldest),
        extra=fields(partition=partition.lease_id, feed=partition.feed.key, lost_from=current.start, lost_to=oldest),
    )


def _mark_down(db: Database[Any], lease_id: str, *, at: datetime, policy: RetryPolicy) -> None:
    """The archive failed at `at`: the tally's passes hand nothing until a catch-up finds it up again."""
    mark: CatchUpLeaseDocument = {"unreachable_at": at}
    with_retries(lambda: catch_up_leases(db).update_one({"_id": lease_id}, {"$set": mark}), policy)


def _mark_up(db: Database[Any], partition: Partition, *, policy: RetryPolicy) -> None:
    clear: CatchUpLeaseDocument = {"unreachable_at": None}
    with_retries(
        lambda: catch_up_leases(db).update_one(
            {"_id": partition.lease_id, UNREACHABLE_AT: {"$ne": None}}, {"$set": clear}
        ),
        policy,
    )


# --- the dispatcher's view ------------------------------------------------------------------------------------


def trail(
    db: Database[Any], partitions: Iterable[Partition], *, follows: Feed, now: datetime, policy: RetryPolicy
) -> Trail:
    """Where the archive's heartbeats stand against the tally (`follows`): the partitions whose run is due, behind
    their tally partition and not found down in the last PROBE_EVERY (an outage costs a call to the store per
    partition that often, no more); and the feed's lag, how far the furthest-behind partition's position is behind
    its tally partition's (since its lease was made if it has no position yet; none if the tally has none)."""
    candidates = list(partitions)
    behind = _behind(db, candidates, follows=follows, now=now, policy=policy)
    due = [p for p in candidates if p.lease_id in behind and _probe_due(behind[p.lease_id][1], now)]
    return Trail(due=due, lag=max((lag for lag, _ in behind.values()), default=timedelta(0)))


def _probe_due(down_at: datetime | None, now: datetime) -> bool:
    """Whether the archive answers, or was last found down at least PROBE_EVERY ago."""
    return down_at is None or down_at <= now - PROBE_EVERY


def _behind(
    db: Database[Any], partitions: Iterable[Partition], *, follows: Feed, now: datetime, policy: RetryPolicy
) -> dict[str, tuple[timedelta, datetime | None]]:
    """Per partition behind its tally partition: by how much, and when the archive was last found down."""
    archive = {p.lease_id: p for p in partitions}
    ids = sorted({*archive, *(followed(p, follows).lease_id for p in archive.values())})
    fields = {"checkpoint_time": 1, "created_at": 1, UNREACHABLE_AT: 1}
    docs = with_retries(
        lambda: {doc["_id"]: doc for doc in catch_up_leases(db).find({"_id": {"$in": ids}}, fields)}, policy
    )
    behind: dict[str, tuple[timedelta, datetime | None]] = {}
    for lease_id, partition in archive.items():
        own, tally = docs.get(lease_id), docs.get(followed(partition, follows).lease_id)
        until = None if tally is None else tally.get("checkpoint_time")
        if own is None or until is None or (own.get("checkpoint_time") or EPOCH) >= until:
            continue
        since = own.get("checkpoint_time") or own.get("created_at") or now
        behind[lease_id] = (max(until - since, timedelta(0)), own.get("unreachable_at"))
    return behind
