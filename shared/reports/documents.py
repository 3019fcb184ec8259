"""The per-user report documents: what each holds and how it is computed from its sources.

`user_hourly_reports` hold one document per user per UTC hour, with one entry per bottle; each entry has an
action part (recomputed from the bottle's `bottle_actions` of that hour) and a heartbeat count (recomputed
from the ring of the bottle's heartbeat document: shared/devices/heartbeat_document.py). `user_daily_reports`
sum a day's hourly documents. Everything here is pure: `aggregation` reads the sources and writes the documents,
and `reading` serves GET /api/users/{user_id}/reports.

A report is stored sparse: a counter at 0 and a reading that is null are left out, of the report and of each of its
bottles' entries (`stored_entry`, `sparse`), and every reader takes a missing counter as 0 and a missing reading as
null (`full_entry`, `full_report`). Most bottle-hours have heartbeats and no opened/closed event, so this is ~40 %
of an hourly report's bytes, which Cosmos DB bills as storage for the reports' 60 days (docs/costs.md). Documents
written before, with every field, read the same.
"""

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Required, TypedDict, final

from pymongo.collection import Collection
from pymongo.database import Database

from shared.devices.device_time import MAX_FUTURE_SKEW, action_order
from shared.devices.heartbeat_document import (
    MINUTE,
    hour_start,
    minutes_of,
    owner_of_minute,
    ownerships,
    ring_hours,
)
from shared.instants import HOUR, day_of, hour_of
from shared.store import schema
from shared.store.partitioning import BUCKET_FIELD, bucket_of

Document = dict[str, Any]

DAY = timedelta(days=1)
ActionCounter = Literal["opened", "closed", "doses", "pills_taken"]
CounterName = Literal["opened", "closed", "doses", "pills_taken", "heartbeats"]
ReadingName = Literal["last_number_of_pills", "last_mass_of_contents"]
ACTION_COUNTERS: tuple[ActionCounter, ...] = ("opened", "closed", "doses", "pills_taken")
COUNTERS: tuple[CounterName, ...] = (*ACTION_COUNTERS, "heartbeats")
LAST_READINGS: tuple[ReadingName, ...] = ("last_number_of_pills", "last_mass_of_contents")


# --- the documents, typed: every writer and reader of a field names it through these ------------------------


class Entry(TypedDict):
    """A bottle's entry of a report, whole: what the reports compute and the read API shows."""

    bottle_id: str
    medication: str | None
    opened: int
    closed: int
    doses: int
    pills_taken: int
    heartbeats: int
    last_number_of_pills: int | None
    last_mass_of_contents: float | None


class StoredEntry(TypedDict, total=False):
    """A bottle's entry as a report stores it: a counter at 0 and a null reading left out (`stored_entry`)."""

    bottle_id: Required[str]
    medication: str | None
    opened: int
    closed: int
    doses: int
    pills_taken: int
    heartbeats: int
    last_number_of_pills: int | None
    last_mass_of_contents: float | None


class Totals(TypedDict, total=False):
    """A report's counters summed over its bottles, as stored: those at 0 left out."""

    opened: int
    closed: int
    doses: int
    pills_taken: int
    heartbeats: int


@final  # so that `"hour" in report` tells a report's kind
class HourlyReport(Totals, total=False):
    """A `user_hourly_reports` document. Its guarded writes (shared/reports/aggregation.py) hold it to the
    `updated_at` read."""

    _id: Required[str]  # hourly_id
    user_id: Required[str]
    bucket: Required[int]  # BUCKET_FIELD
    hour: Required[datetime]
    bottles: Required[list[StoredEntry]]
    updated_at: Required[datetime]


@final
class DailyReport(Totals, total=False):
    """A `user_daily_reports` document. Its guarded writes hold it to the `updated_at` and `bottles` read."""

    _id: Required[str]  # daily_id
    user_id: Required[str]
    day: Required[datetime]
    bottles: Required[list[StoredEntry]]
    updated_at: Required[datetime]


ReportDocument = HourlyReport | DailyReport


def hourly_reports(db: Database[Any]) -> Collection[HourlyReport]:
    """The `user_hourly_reports` collection, its documents typed."""
    return db[schema.USER_HOURLY_REPORTS]


def daily_reports(db: Database[Any]) -> Collection[DailyReport]:
    """The `user_daily_reports` collection, its documents typed."""
    return db[schema.USER_DAILY_REPORTS]


def hourly_id(user_id: str, hour: datetime) -> str:
    return f"{user_id}|{hour_of(hour):%Y-%m-%dT%H}"


def daily_id(user_id: str, day: datetime) -> str:
    return f"{user_id}|{day_of(day):%Y-%m-%d}"


def parse_hourly_id(report_id: str) -> tuple[str, datetime]:
    """(user_id, hour) of an hourly report `_id` (user ids never contain '|')."""
    user_id, _, hour = report_id.rpartition("|")
    return user_id, datetime.strptime(hour, "%Y-%m-%dT%H").replace(tzinfo=UTC)


# --- the parts of a bottle's entry, recomputed from source ------------------------------------------------


@dataclass(frozen=True)
class ActionPart:
    """What one user's opened/closed events of one bottle in one hour add up to."""

    medication: str
    opened: int
    closed: int
    doses: int
    pills_taken: int
    last_number_of_pills: int
    last_mass_of_contents: float


def _event_order(action: Mapping[str, Any]) -> tuple[tuple[datetime, bool], str]:
    # The bottle's status order (a close after an open of its instant); the event id settles the rest.
    return action_order(action["time"], action["action"]), str(action.get("event_id", ""))


def action_parts(actions: Iterable[Mapping[str, Any]]) -> dict[str, ActionPart]:
    """Per user, the action part of one bottle-hour. An action counts for the owner it was stored with."""
    by_user: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for action in actions:
        by_user[action["user_id"]].append(action)
    parts = {}
    for user_id, own in by_user.items():
        closes = [a for a in own if a["action"] == "closed"]
        latest = max(own, key=_event_order)
        parts[user_id] = ActionPart(
            medication=latest["medication"],
            opened=sum(1 for a in own if a["action"] == "opened"),
            closed=len(closes),
            doses=sum(1 for a in closes if a.get("pills_taken", 0) > 0),
            pills_taken=sum(a.get("pills_taken", 0) for a in closes),
            last_number_of_pills=latest["number_of_pills"],
            last_mass_of_contents=latest["mass_of_contents"],
        )
    return parts


@dataclass(frozen=True)
class HeartbeatPart:
    """A user's heartbeat count of one bottle in one hour, from the ring of the bottle's heartbeat document
    (which holds every heartbeat of an hour it counts, or nothing of that hour)."""

    heartbeats: int
    medication: str
    # The user owned the bottle for the whole hour (and the skew before it): then the hour's count only grows.
    sole_owner: bool = False


def heartbeat_parts(
    heartbeat_doc: Mapping[str, Any],
    within: tuple[datetime, datetime] | None = None,
    *,
    only: set[datetime] | None = None,
) -> dict[tuple[str, datetime], HeartbeatPart]:
    """Per (user, hour), the heartbeat part of one bottle, for every hour its ring holds (within `within`), or
    only for the hours `only` (shared/feeds/sweeps.py `pass_hours`).

    A heartbeat counts for whoever owned the bottle at its minute (owner_of_minute). Every owner of the bottle
    during an hour gets a part for it (possibly 0), so a heartbeat attributed anew is also taken away from the
    other.
    Hours the ring no longer holds are not recomputed at all: their counts stay as they were."""
    ring = ring_hours(heartbeat_doc)
    if not ring:
        return {}
    spans = ownerships(heartbeat_doc)
    hours: set[datetime] = set()
    counts: Counter[tuple[str, datetime]] = Counter()
    for number, value in ring.items():
        hour = hour_start(number)
        if (within is None or within[0] <= hour < within[1]) and (only is None or hour in only):
            hours.add(hour)
            for minute in minutes_of(value):
                owner = owner_of_minute(spans, hour + minute * MINUTE)
                if owner is not None:  # never None: the spans cover every instant (the type allows it)
                    counts[(owner, hour)] += 1
    medication = str(heartbeat_doc.get("medication", ""))
    parts = {}
    for hour in sorted(hours):
        # A heartbeat received before a reassignment may be dated up to MAX_FUTURE_SKEW after it, and so
        # counted for the earlier owner then: that owner's hour is recomputed too.
        owners = [span for span in spans if span.overlaps(hour - MAX_FUTURE_SKEW, hour + HOUR)]
        for span in owners:
            count = counts[(span.user_id, hour)]
            parts[(span.user_id, hour)] = HeartbeatPart(count, medication=medication, sole_owner=len(owners) == 1)
    return parts


# --- hourly documents ---------------------------------------------------------------------------------------


def merged_entry(
    bottle_id: str, stored: StoredEntry | None, action: ActionPart | None, heartbeat: HeartbeatPart | None
) -> Entry | None:
    """A bottle's entry after recomputing the parts given (None: that part is unchanged, keep `stored`).

    `medication` is that of the bottle's latest opened/closed event of the hour, or in an hour of heartbeats
    only, the bottle's as its heartbeat document had it when the hour's heartbeats were last counted. None
    when the entry counts nothing: the bottle did nothing that hour for this user.

    A part older than the stored one is not merged (`older_than_stored`): a worker that stalled between reading
    the source and writing, its lease taken over by one that counted more since, must not put its counts back."""
    entry = full_entry(stored if stored is not None else {"bottle_id": bottle_id})
    entry["bottle_id"] = bottle_id
    if action is not None and older_than_stored(action, entry):
        action = None
    if heartbeat is not None and heartbeat.sole_owner and heartbeat.heartbeats < entry["heartbeats"]:
        # A ring only gains heartbeats while it holds an hour: a smaller count of an hour that had one owner
        # throughout was read before some arrived. (With a reassignment a heartbeat can move to the other owner.)
        heartbeat = None
    if action is not None:
        entry["medication"] = action.medication
        entry["opened"], entry["closed"] = action.opened, action.closed
        entry["doses"], entry["pills_taken"] = action.doses, action.pills_taken
        entry["last_number_of_pills"] = action.last_number_of_pills
        entry["last_mass_of_contents"] = action.last_mass_of_contents
    if heartbeat is not None:
        entry["heartbeats"] = heartbeat.heartbeats
        if not entry["opened"] and not entry["closed"]:
            # No event names the medication: the bottle's, as its heartbeat document has it now.
            entry["medication"] = heartbeat.medication
    if not any(entry[c] for c in COUNTERS) and all(entry[r] is None for r in LAST_READINGS):
        return None
    return entry


def older_than_stored(action: ActionPart, stored: Mapping[str, Any]) -> bool:
    """Whether an action part was computed from an older read of its source than the stored entry was.

    Actions are only ever inserted (never updated; an event id reused with other content is not stored), so the
    opened/closed events of one user, bottle and hour only grow in number: a part that counts fewer than the entry
    holds was read before some of them arrived. This needs no clock (workers' clocks may be minutes apart) and no
    lease version (the rebuild command writes without one). Two parts of the same number count the same events,
    once every read of the bucket has seen all of them: the last change of a bucket is read after it was written.
    (A bucket whose events expire keeps its counts, as one whose events all expired does.)"""
    return action.opened + action.closed < int(stored.get("opened") or 0) + int(stored.get("closed") or 0)


def full_entry(entry: StoredEntry | Entry) -> Entry:
    """A stored entry with every field: a counter it leaves out is 0, a reading null."""
    return {
        "bottle_id": entry["bottle_id"],
        "medication": entry.get("medication"),
        "opened": entry.get("opened", 0),
        "closed": entry.get("closed", 0),
        "doses": entry.get("doses", 0),
        "pills_taken": entry.get("pills_taken", 0),
        "heartbeats": entry.get("heartbeats", 0),
        "last_number_of_pills": entry.get("last_number_of_pills"),
        "last_mass_of_contents": entry.get("last_mass_of_contents"),
    }


def stored_entry(entry: StoredEntry | Entry) -> StoredEntry:
    """An entry as a report stores it: its fields in order, without the counters at 0 and the null readings."""
    whole = full_entry(entry)
    stored: StoredEntry = {"bottle_id": whole["bottle_id"], "medication": whole["medication"]}
    for counter in COUNTERS:
        if whole[counter]:
            stored[counter] = whole[counter]
    if whole["last_number_of_pills"] is not None:
        stored["last_number_of_pills"] = whole["last_number_of_pills"]
    if whole["last_mass_of_contents"] is not None:
        stored["last_mass_of_contents"] = whole["last_mass_of_contents"]
    return stored


def totals(entries: Iterable[Entry]) -> Totals:
    """A report's counters, summed over its entries, as stored: those at 0 left out."""
    whole = list(entries)
    found: Totals = {}
    for counter in COUNTERS:
        total = sum(entry[counter] for entry in whole)
        if total:
            found[counter] = total
    return found


def full_report(report: Mapping[str, Any]) -> Document:
    """A stored report with every counter at the top (0 if left out) and every entry whole, in order: its form
    for comparing (`same_content`)."""
    found = dict(report)
    for counter in COUNTERS:
        found.setdefault(counter, 0)
    found["bottles"] = [full_entry(e) for e in report.get("bottles", [])]
    return found


def hourly_document(
    user_id: str, hour: datetime, entries: Iterable[StoredEntry | Entry], updated_at: datetime
) -> HourlyReport:
    bottles = sorted((full_entry(e) for e in entries), key=lambda e: e["bottle_id"])
    return {
        "_id": hourly_id(user_id, hour),
        "user_id": user_id,
        BUCKET_FIELD: bucket_of(user_id),
        "hour": hour_of(hour),
        **totals(bottles),
        "bottles": [stored_entry(e) for e in bottles],
        "updated_at": updated_at,
    }


def same_content(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Equal apart from `updated_at` (and the stored datetimes' tzinfo, which compare equal anyway), a report
    stored with every field (before reports were stored sparse) equal to its sparse form."""
    if a is None or b is None:
        return a is b
    strip = ("updated_at",)
    return {k: v for k, v in full_report(a).items() if k not in strip} == {
        k: v for k, v in full_report(b).items() if k not in strip
    }


# --- daily documents -----------------------------------------------------------------------------------------


def daily_document(user_id: str, day: datetime, hourly: Iterable[HourlyReport]) -> DailyReport | None:
    """The day's totals and per-bottle breakdown summed over its hourly documents; None if it has none.

    A bottle's `medication` and last readings are those of its latest hour that has them; `updated_at` is
    the latest `updated_at` of the hours, so recomputing a day from unchanged hours gives the same document."""
    hours = sorted(hourly, key=lambda h: h["hour"])
    if not hours:
        return None
    bottles: dict[str, Entry] = {}
    for report in hours:
        for entry in map(full_entry, report["bottles"]):
            total = bottles.setdefault(entry["bottle_id"], full_entry({"bottle_id": entry["bottle_id"]}))
            for counter in COUNTERS:
                total[counter] += entry[counter]
            total["medication"] = entry["medication"]
            if entry["last_number_of_pills"] is not None:
                total["last_number_of_pills"] = entry["last_number_of_pills"]
                total["last_mass_of_contents"] = entry["last_mass_of_contents"]
    entries = sorted(bottles.values(), key=lambda e: e["bottle_id"])
    return {
        "_id": daily_id(user_id, day),
        "user_id": user_id,
        "day": day_of(day),
        **totals(entries),
        "bottles": [stored_entry(e) for e in entries],
        "updated_at": max(h["updated_at"] for h in hours),
    }
