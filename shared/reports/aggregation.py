"""A page of changes in, report writes out: coalesce into buckets, recompute them from source, write what differs.
Replay-safe: a page processed twice writes the same documents or nothing, at a cost that grows with the buckets
it touches, never with its changes. Why and how: docs/reports.md, "Replay-safe by construction".
"""

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from pymongo import InsertOne, UpdateOne
from pymongo.collection import Collection
from pymongo.database import Database

from shared.devices.heartbeat_document import LATE_AT, OWNERS, RING, RING_TIME
from shared.feeds.sources import Change
from shared.instants import HOUR, day_of, hour_of, to_stored
from shared.reports.documents import (
    DAY,
    ActionPart,
    DailyReport,
    Document,
    HeartbeatPart,
    HourlyReport,
    ReportDocument,
    action_parts,
    daily_document,
    daily_id,
    daily_reports,
    heartbeat_parts,
    hourly_document,
    hourly_id,
    hourly_reports,
    merged_entry,
    same_content,
)
from shared.store import schema
from shared.store.optimistic import AGAIN, Round, until_landed
from shared.store.retries import RetryPolicy, count_matched, find_all, with_retries, write_idempotent

UserHour = tuple[str, datetime]
UserDay = tuple[str, datetime]
Window = tuple[datetime, datetime]

MILLISECOND = timedelta(milliseconds=1)
CLAUSES_PER_QUERY = 200  # ids per `$in` query: keeps each request small on Cosmos DB
_ACTION_FIELDS = dict.fromkeys(
    [
        *("bottle_id", "user_id", "medication", "time", "action", "event_id"),
        *("pills_taken", "number_of_pills", "mass_of_contents"),
    ],
    1,
)
_HEARTBEAT_FIELDS = dict.fromkeys(("bottle_id", "user_id", "medication", OWNERS, RING, RING_TIME, LATE_AT), 1)


@dataclass
class Buckets:
    actions: set[tuple[str, datetime]] = field(default_factory=set)  # (bottle_id, hour)
    heartbeat_bottles: set[str] = field(default_factory=set)


def coalesce(changes: Iterable[Change]) -> Buckets:
    """The distinct buckets a page of source changes touches (repeats and order do not matter)."""
    buckets = Buckets()
    for change in changes:
        if change.collection == schema.BOTTLE_ACTIONS and change.document is not None:
            buckets.actions.add((change.document["bottle_id"], hour_of(change.document["time"])))
        elif change.collection == schema.BOTTLE_HEARTBEATS:
            buckets.heartbeat_bottles.add(str(change.key))
    return buckets


class Stamper:
    """Write times of one run: never before `now`, and later for every page, so a reader polling by
    `updated_at` during the run never misses a page written after its last read. `at`: the time the page is
    written, so a page written late in a long run is not dated back to its start (past the daily hop's
    checkpoint, which only reads back the overlap)."""

    def __init__(self, now: datetime) -> None:
        self._now = now
        self._last = now - MILLISECOND

    def next(self, at: datetime | None = None) -> datetime:
        self._last = max(self._now, at or self._now, self._last + MILLISECOND)
        return self._last


# --- hourly -------------------------------------------------------------------------------------------------


@dataclass
class BottleParts:
    action: ActionPart | None = None
    heartbeat: HeartbeatPart | None = None


Parts = dict[UserHour, dict[str, BottleParts]]


@dataclass(frozen=True)
class HourlyResult:
    user_hours: set[UserHour]  # every user-hour recomputed
    written: int  # documents written or deleted


def refresh_hourly(
    db: Database[Any],
    changes: Iterable[Change],
    *,
    stamp: datetime,
    policy: RetryPolicy,
    within: Window | None = None,
    only_user: str | None = None,
    rolled_up_before: datetime | None = None,
) -> HourlyResult:
    """Recompute the buckets a page of `bottle_actions`/`bottle_heartbeats` changes touches and write the
    user-hour documents that differ. `within` and `only_user` narrow a rebuild to its range and user.

    `rolled_up_before`: days that ended before it have had their last scheduled roll-up (the tally's, after
    the day closed), so a user-hour of such a day that changed rolls its day up again at once."""
    buckets = coalesce(changes)
    parts = recomputed_parts(db, buckets, policy, within=within, only_user=only_user)
    written, changed = write_hourly(db, parts, stamp, policy)
    if rolled_up_before is not None:
        closed = {(user_id, day_of(hour)) for user_id, hour in changed if day_of(hour) + DAY <= rolled_up_before}
        if closed:
            refresh_daily(db, closed, policy)
    return HourlyResult(set(parts), written)


def recomputed_parts(
    db: Database[Any],
    buckets: Buckets,
    policy: RetryPolicy,
    *,
    within: Window | None = None,
    only_user: str | None = None,
) -> Parts:
    """Per user-hour and bottle, the parts recomputed from source: one range query per bottle's run of
    action hours, one `$in` read of the heartbeat documents (as they are now: a change may carry an older one)."""
    parts: Parts = defaultdict(lambda: defaultdict(BottleParts))

    def wanted(user_id: str, hour: datetime) -> bool:
        in_range = within is None or within[0] <= hour < within[1]
        return in_range and (only_user is None or user_id == only_user)

    for (bottle_id, hour), actions in load_actions(db, buckets.actions, policy).items():
        for user_id, action in action_parts(actions).items():
            if wanted(user_id, hour):
                parts[(user_id, hour)][bottle_id].action = action
    for doc in load_heartbeat_documents(db, buckets.heartbeat_bottles, policy):
        for (user_id, hour), heartbeat in heartbeat_parts(doc, within).items():
            if wanted(user_id, hour):
                parts[(user_id, hour)][str(doc["_id"])].heartbeat = heartbeat
    return {key: dict(bottles) for key, bottles in parts.items()}


def load_actions(
    db: Database[Any], buckets: set[tuple[str, datetime]], policy: RetryPolicy
) -> dict[tuple[str, datetime], list[Document]]:
    """Every stored action of each (bottle, hour) bucket; adjacent hours of a bottle are one range."""
    by_bottle: dict[str, list[datetime]] = defaultdict(list)
    for bottle_id, hour in buckets:
        by_bottle[bottle_id].append(hour)
    clauses = [
        {"bottle_id": bottle_id, "time": {"$gte": start, "$lt": end}}
        for bottle_id, hours in by_bottle.items()
        for start, end in _runs(sorted(hours))
    ]
    found: dict[tuple[str, datetime], list[Document]] = defaultdict(list)
    collection = db[schema.BOTTLE_ACTIONS]
    for action in find_each(collection, clauses, policy, _ACTION_FIELDS):
        found[(action["bottle_id"], hour_of(action["time"]))].append(action)
    return dict(found)


def _runs(hours: Sequence[datetime]) -> Iterator[Window]:
    """Sorted hours as [start, end) ranges of consecutive hours."""
    start = previous = hours[0]
    for hour in hours[1:]:
        if hour != previous + HOUR:
            yield start, previous + HOUR
            start = hour
        previous = hour
    yield start, previous + HOUR


def load_heartbeat_documents(db: Database[Any], bottle_ids: set[str], policy: RetryPolicy) -> list[Document]:
    """The current heartbeat document of each bottle (the change only said which bottles)."""
    collection = db[schema.BOTTLE_HEARTBEATS]
    docs: list[Document] = []
    for chunk in _chunks(sorted(bottle_ids), CLAUSES_PER_QUERY):
        query = {"_id": {"$in": chunk}, "bottle_id": {"$in": chunk}}
        docs += find_all(collection, query, policy, _HEARTBEAT_FIELDS)
    return docs


def write_hourly(db: Database[Any], parts: Parts, stamp: datetime, policy: RetryPolicy) -> tuple[int, set[UserHour]]:
    """Merge the recomputed parts into the user-hour documents; write (or delete) those that change.

    Returns the number of documents written or deleted, and the user-hours written or deleted. A guard that
    fails (someone else wrote the document since we read it) sends that document round again, its parts
    recomputed from source (refreshed_parts); StoreUnavailable if it keeps failing."""
    collection = hourly_reports(db)
    pending = parts
    written = 0
    changed: set[UserHour] = set()

    def hourly_round() -> tuple[int, set[UserHour]] | Literal[Round.AGAIN]:
        nonlocal pending, written
        stored = _load_by_id(collection, [hourly_id(u, h) for u, h in pending], policy)
        writes: list[GuardedWrite[HourlyReport]] = []
        op_keys: list[UserHour] = []
        conflicts: set[UserHour] = set()
        for (user_id, hour), bottles in pending.items():
            old = stored.get(hourly_id(user_id, hour))
            new = merged_document(user_id, hour, old, bottles, stamp)
            if new is None and old is not None:
                if _delete_guarded(collection, old, policy):
                    written += 1
                    changed.add((user_id, hour))
                else:
                    conflicts.add((user_id, hour))
            elif new is not None and not same_content(old, new):
                writes.append(GuardedWrite(old, new))
                op_keys.append((user_id, hour))
        outcomes = write_guarded(collection, writes, policy)
        written += sum(outcomes)
        changed.update(key for key, ok in zip(op_keys, outcomes, strict=True) if ok)
        conflicts |= {key for key, ok in zip(op_keys, outcomes, strict=True) if not ok}
        if not conflicts:
            return written, changed
        pending = refreshed_parts(db, {key: pending[key] for key in conflicts}, policy)
        return AGAIN

    return until_landed(hourly_round, "hourly reports", policy)


def refreshed_parts(db: Database[Any], parts: Parts, policy: RetryPolicy) -> Parts:
    """The same parts of these user-hours, recomputed from the sources as they are now. For a write whose guard
    failed: the writer that got there first may have recomputed the same bottle's part from a newer source
    (an event, or a late heartbeat, that arrived after ours was read), and merging ours again would undo it.
    A part the source no longer gives (its hour has left the ring, its events expired) is kept as it was."""
    actions = {(b, hour) for (_, hour), bottles in parts.items() for b, part in bottles.items() if part.action}
    beats = {b for bottles in parts.values() for b, part in bottles.items() if part.heartbeat}
    fresh = recomputed_parts(db, Buckets(actions=actions, heartbeat_bottles=beats), policy)
    refreshed: Parts = {}
    for key, bottles in parts.items():
        now = fresh.get(key, {})
        refreshed[key] = {}
        for bottle_id, part in bottles.items():
            found = now.get(bottle_id, BottleParts())
            refreshed[key][bottle_id] = BottleParts(
                action=part.action and (found.action or part.action),
                heartbeat=part.heartbeat and (found.heartbeat or part.heartbeat),
            )
    return refreshed


def merged_document(
    user_id: str, hour: datetime, old: HourlyReport | None, bottles: Mapping[str, BottleParts], stamp: datetime
) -> HourlyReport | None:
    """The user-hour document after merging recomputed bottle parts into `old`; None if it counts nothing."""
    stored = {e["bottle_id"]: e for e in (old["bottles"] if old is not None else [])}
    entries = []
    for bottle_id in sorted(stored.keys() | bottles.keys()):
        recomputed = bottles.get(bottle_id, BottleParts())
        entry = merged_entry(bottle_id, stored.get(bottle_id), recomputed.action, recomputed.heartbeat)
        if entry is not None:
            entries.append(entry)
    if not entries:
        return None
    updated_at = stamp if old is None else max(stamp, old["updated_at"] + MILLISECOND)
    return hourly_document(user_id, hour, entries, updated_at)


@dataclass(frozen=True)
class GuardedWrite[R: ReportDocument]:
    """A report document as it was read (`old`; None: there was none) and as it is to be written (`new`); `also`:
    fields besides `updated_at` that must still be as read."""

    old: R | None
    new: R
    also: tuple[Literal["bottles"], ...] = ()


def write_guarded[R: ReportDocument](
    collection: Collection[R], writes: Sequence[GuardedWrite[R]], policy: RetryPolicy
) -> list[bool]:
    """Apply read-modify-writes of report documents; per write, whether it landed (False: a conflict, to read and
    merge again). A document that was not there is inserted (a duplicate key: someone made it first); one that was
    read is updated only if it is still the version read, and never inserted: if a concurrent writer deleted it
    (its last entry emptied), an upsert would bring the stale merge back, other bottles' old counts with it.

    The guarded updates go as one bulk write; as a bulk answer counts matches but does not say which, when some
    matched nothing the documents are read back, and a write landed where the document now is what it wrote."""
    outcomes = [False] * len(writes)
    inserts = [i for i, w in enumerate(writes) if w.old is None]
    updates = [i for i, w in enumerate(writes) if w.old is not None]
    if inserts:
        inserted = write_idempotent(collection, [InsertOne(writes[i].new) for i in inserts], policy)
        for i, ok in zip(inserts, inserted, strict=True):
            outcomes[i] = ok
    if updates:
        matched = count_matched(collection, [_guarded_update(writes[i]) for i in updates], policy)
        if matched == len(updates):
            for i in updates:
                outcomes[i] = True
        else:
            stored = _load_by_id(collection, [writes[i].new["_id"] for i in updates], policy)
            for i in updates:
                outcomes[i] = _holds(stored.get(writes[i].new["_id"]), writes[i].new)
    return outcomes


def _holds(stored: ReportDocument | None, new: ReportDocument) -> bool:
    """Whether a stored document is `new` as written: its content and its `updated_at` (as BSON keeps it)."""
    if stored is None:
        return False
    return same_content(stored, new) and to_stored(stored["updated_at"]) == to_stored(new["updated_at"])


def _guarded_update(write: GuardedWrite[Any]) -> UpdateOne:
    """Update the document only if it is still the version read (its `updated_at`, and the fields `also`)."""
    assert write.old is not None
    old, new = write.old, write.new
    update: dict[str, Any] = {"$set": {k: v for k, v in new.items() if k != "_id"}}
    stale = {k: "" for k in old if k not in new}
    if stale:
        update["$unset"] = stale
    guard = {"_id": new["_id"], "user_id": new["user_id"], "updated_at": old["updated_at"]}
    guard |= {name: old[name] for name in write.also}
    return UpdateOne(guard, update)


def _delete_guarded[R: ReportDocument](collection: Collection[R], old: R, policy: RetryPolicy) -> bool:
    guard = {"_id": old["_id"], "user_id": old["user_id"], "updated_at": old["updated_at"]}
    return with_retries(lambda: collection.delete_one(guard), policy).deleted_count == 1


# --- daily --------------------------------------------------------------------------------------------------


def refresh_daily(db: Database[Any], user_days: set[UserDay], policy: RetryPolicy) -> int:
    """Recompute each user-day from its hourly documents; write (or delete) the daily documents that differ, and
    return how many it wrote or deleted.

    A daily document is read before its hours, and written only if it is still the one read (its `updated_at`
    and `bottles`): a recompute from a stale read never overwrites a newer one, and one that finds a day gone
    back (an hour emptied and deleted, maybe the day's newest) is not refused for it. A guard that fails sends
    that day round again; StoreUnavailable if it keeps failing."""
    collection = daily_reports(db)
    pending = set(user_days)
    written = 0

    def daily_round() -> int | Literal[Round.AGAIN]:
        nonlocal pending, written
        if not pending:
            return written
        stored = _load_by_id(collection, [daily_id(u, d) for u, d in pending], policy)
        hourly = _load_hourly_days(db, pending, policy)
        writes: list[GuardedWrite[DailyReport]] = []
        op_keys: list[UserDay] = []
        conflicts: set[UserDay] = set()
        for user_id, day in sorted(pending):
            old = stored.get(daily_id(user_id, day))
            new = daily_document(user_id, day, hourly.get((user_id, day), []))
            if new is None:
                if old is not None:
                    if _delete_guarded(collection, old, policy):
                        written += 1
                    else:
                        conflicts.add((user_id, day))
            elif not (same_content(old, new) and old is not None and old["updated_at"] == new["updated_at"]):
                # `updated_at` alone can come back (an hour below the newest deleted): `bottles` too.
                writes.append(GuardedWrite(old, new, also=("bottles",)))
                op_keys.append((user_id, day))
        outcomes = write_guarded(collection, writes, policy)
        written += sum(outcomes)
        pending = conflicts | {key for key, ok in zip(op_keys, outcomes, strict=True) if not ok}
        return AGAIN if pending else written

    return until_landed(daily_round, "daily reports", policy)


def _load_hourly_days(
    db: Database[Any], user_days: set[UserDay], policy: RetryPolicy
) -> dict[UserDay, list[HourlyReport]]:
    clauses = [{"user_id": u, "hour": {"$gte": d, "$lt": d + DAY}} for u, d in sorted(user_days)]
    collection = hourly_reports(db)
    found: dict[UserDay, list[HourlyReport]] = defaultdict(list)
    for report in find_each(collection, clauses, policy):
        found[(report["user_id"], day_of(report["hour"]))].append(report)
    return dict(found)


def _load_by_id[R: ReportDocument](collection: Collection[R], ids: Sequence[str], policy: RetryPolicy) -> dict[str, R]:
    """Report documents by `_id`, one query per user (its shard key value) naming that user's ids: Cosmos DB
    routes a query that filters on one partition key value to that partition ("it routes the query to the
    physical partitions corresponding to the partition key values specified in the filter",
    https://learn.microsoft.com/azure/cosmos-db/how-to-query-container), while an `$in` of a page's users
    reaches the partitions of all of them and pays each one's index lookup (tools/costs/rules.py, query
    fan-out: about half of `user_hourly_reports`' 234 partitions for a page's ~170 users, ~300 RU, against ~1 RU
    for each user's own query)."""
    by_user: dict[str, list[str]] = defaultdict(list)
    for report_id in sorted(set(ids)):
        by_user[report_id.rpartition("|")[0]].append(report_id)
    clauses = [
        {"_id": {"$in": chunk}, "user_id": user_id}
        for user_id, user_ids in by_user.items()
        for chunk in _chunks(user_ids, CLAUSES_PER_QUERY)
    ]
    return {doc["_id"]: doc for doc in find_each(collection, clauses, policy)}


def find_each[D: Mapping[str, Any]](
    collection: Collection[D], clauses: Sequence[Mapping[str, Any]], policy: RetryPolicy, projection: Any = None
) -> Iterator[D]:
    """The documents of several single-partition range queries, one query each: an `$or` of them would
    fan out to every partition on Cosmos DB, and some engines answer it with a collection scan."""
    for clause in clauses:
        yield from find_all(collection, clause, policy, projection)


def _chunks[T](items: Sequence[T], size: int) -> Iterator[list[T]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])
