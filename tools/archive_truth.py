"""The archive checked against the source, as the simulator and the lifecycle run check the reports: every
opened/closed event stored once in `actions`, and every archived bottle-hour's heartbeat slots equal to its ring's,
counted straight from `bottle_actions` and the rings, independently of the code that writes the archive."""

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from shared.archive import parquet
from shared.archive.current import get_archive
from shared.archive.layout import (
    ACTION_COLUMNS,
    ACTIONS,
    HEARTBEATS,
    action_file,
    heartbeat_file,
    parse_action_file,
    parse_heartbeat_file,
)
from shared.archive.storage import Archive
from shared.devices.heartbeat_document import heartbeat_slots, slot_start
from shared.settings import get_settings
from shared.store import schema
from shared.store.partitioning import bucket_of
from tools.report_truth import complete_from

Event = tuple[Any, ...]  # an event's archived columns, in order
HourKey = tuple[str, str, datetime]  # (bottle_id, user_id, hour)
SHOWN = 5  # differences quoted per kind


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def event_of(row: dict[str, Any]) -> Event:
    """An event as the archive holds it: its columns in order, times in UTC, no pills taken for `opened`."""
    values = {name: row.get(name) for name in ACTION_COLUMNS}
    values["time"], values["received_at"] = _utc(row["time"]), _utc(row["received_at"])
    if values["action"] != "closed":
        values["pills_taken"] = None
    return tuple(values[name] for name in ACTION_COLUMNS)


@dataclass
class ArchiveCheck:
    """What the archive holds against the source: the events received before `until` and the bottle-hours
    of [heartbeats_from, heartbeats_until), each difference named."""

    until: datetime | None
    heartbeats_from: datetime | None
    heartbeats_until: datetime | None
    events: int = 0  # stored events received before `until`
    bottle_hours: int = 0  # bottle-hours (per user) in the checked hours, in the rings
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def describe(self) -> str:
        """One line: what was checked and the verdict."""
        if self.until is None:
            return "archive against the source: nothing due yet"
        verdict = "all match" if self.ok else f"{len(self.problems)} differ: " + "; ".join(self.problems[:SHOWN])
        hours = (
            f", {self.bottle_hours} bottle-hours of heartbeats from {self.heartbeats_from:%Y-%m-%d %H:00}"
            if self.heartbeats_from is not None
            else ""
        )
        return f"archive against the source ({self.events} events{hours}): {verdict}"


def archived_events(archive: Archive) -> list[tuple[str, Event]]:
    """Every row of `actions`, with the file it is in."""
    rows = []
    for name in archive.names(f"{ACTIONS}/"):
        stored = archive.read(name)
        if stored is not None:
            rows += [(name, event_of(row)) for row in parquet.decode(stored.data)]
    return rows


def archived_bottle_hours(archive: Archive) -> list[tuple[str, HourKey, tuple[int, ...]]]:
    """Every row of `heartbeats`, with the file it is in."""
    rows = []
    for name in archive.names(f"{HEARTBEATS}/"):
        stored = archive.read(name)
        if stored is not None:
            for row in parquet.decode(stored.data):
                key = (str(row["bottle_id"]), str(row["user_id"]), _utc(row["hour"]))
                rows.append((name, key, tuple(row["slots"])))
    return rows


def ring_bottle_hours(db: Any) -> dict[HourKey, tuple[int, ...]]:
    """Per (bottle, user, hour) the rings hold: the minutes its slots start at, each slot for whoever owned the
    bottle at it (a reassignment counts from the start of its slot), as docs/reports.md counts heartbeats."""
    found: dict[HourKey, list[int]] = defaultdict(list)
    for doc in db[schema.BOTTLE_HEARTBEATS].find():
        earlier = doc.get("owners") or []
        for slot in heartbeat_slots(doc):
            owner = next((o["user_id"] for o in earlier if slot < slot_start(_utc(o["until"]))), doc["user_id"])
            hour = slot.replace(minute=0)
            found[(str(doc["bottle_id"]), str(owner), hour)].append(slot.minute)
    return {key: tuple(sorted(minutes)) for key, minutes in found.items()}


def check_archive(
    db: Any,
    archive: Archive,
    *,
    until: datetime | None,
    heartbeats: tuple[datetime, datetime] | None,
    every_event: bool = False,
) -> ArchiveCheck:
    """The archive against the source: the events received before `until` (the sweep's position) each in the
    archive once, in the file of its device date and receive hour, and no archived event that is not stored (nor
    more often than stored); the bottle-hours of the hours `heartbeats` (those the tally has counted and every ring
    still holds) each archived with the ring's slots, once, in the file of its hour and user. `every_event`: every
    stored event must be before `until` (after a run's last sweep, nothing is left out)."""
    check = ArchiveCheck(until, *(heartbeats or (None, None)))
    if every_event:
        latest = newest_received(db)
        if latest is not None and (until is None or latest >= until):
            when = "never ran" if until is None else f"stopped at {until:%Y-%m-%dT%H:%M}"
            check.problems.append(
                f"the sweep of the events {when}, before the last received at {latest:%Y-%m-%dT%H:%M}"
            )
    if until is None:
        return check
    _check_events(db, archive, until, check)
    if heartbeats is not None:
        _check_heartbeats(db, archive, heartbeats, check)
    return check


def newest_received(db: Any) -> datetime | None:
    found = list(db[schema.BOTTLE_ACTIONS].find({}, {"received_at": 1}).sort("received_at", -1).limit(1))
    return _utc(found[0]["received_at"]) if found else None


def swept_until(db: Any) -> datetime | None:
    """The sweep's position: every event received before it is archived (None: it never finished an hour)."""
    lease = db[schema.LEASES].find_one({"feed": "actions_archive", "retired_at": None})
    return None if lease is None or lease.get("checkpoint_time") is None else _utc(lease["checkpoint_time"])


def tallied_until(db: Any) -> datetime | None:
    """The end of the hours every live heartbeat tally partition has counted (None: not every one has)."""
    ends = [
        lease.get("checkpoint_time")
        for lease in db[schema.LEASES].find({"feed": "heartbeat_tally", "retired_at": None})
    ]
    return min(_utc(end) for end in ends) if ends and None not in ends else None


def _check_events(db: Any, archive: Archive, until: datetime, check: ArchiveCheck) -> None:
    stored = Counter(event_of(doc) for doc in db[schema.BOTTLE_ACTIONS].find())
    archived = archived_events(archive)
    due = Counter(event for event in stored.elements() if event[-1] < until)
    check.events = sum(due.values())
    found = Counter(event for _, event in archived)
    for event, times in sorted((due - found).items(), key=str):
        check.problems.append(f"event missing {_event(event)} (stored {times}x more than archived)")
    for event, times in sorted((found - stored).items(), key=str):
        check.problems.append(f"event archived {times}x more than stored: {_event(event)}")
    for name, event in archived:
        where = parse_action_file(name)
        received, time = event[-1], event[3]
        if where is None or name != action_file(time, received, where[2]):
            check.problems.append(f"event in the wrong file {name}: {_event(event)}")


def _check_heartbeats(db: Any, archive: Archive, hours: tuple[datetime, datetime], check: ArchiveCheck) -> None:
    checked, problems = heartbeat_differences(db, archive, hours)
    check.bottle_hours = checked
    check.problems += [problem for _, problem in sorted(problems.items())]


def heartbeat_differences(
    db: Any, archive: Archive, hours: tuple[datetime, datetime]
) -> tuple[int, dict[HourKey, str]]:
    """The bottle-hours of `hours` in the rings, and what differs in the archive, by (bottle, user, hour): slots not
    the ring's, a row twice, a row in another file, a row of an hour the ring has no heartbeat of."""
    start, end = hours
    expected = {key: slots for key, slots in ring_bottle_hours(db).items() if start <= key[2] < end}
    archived: dict[HourKey, list[tuple[str, tuple[int, ...]]]] = defaultdict(list)
    problems: dict[HourKey, str] = {}
    for name, key, slots in archived_bottle_hours(archive):
        if start <= key[2] < end:
            archived[key].append((name, slots))
            if parse_heartbeat_file(name) is None or name != heartbeat_file(key[2], bucket_of(key[1])):
                problems[key] = f"bottle-hour in the wrong file {name}: {_hour_key(key)}"
    for key, rows in archived.items():
        if len(rows) > 1:
            problems[key] = f"bottle-hour archived {len(rows)}x: {_hour_key(key)}"
        elif key not in expected:
            problems[key] = f"bottle-hour archived with no heartbeat in its ring: {_hour_key(key)}"
    for key, slots in expected.items():
        got = [row_slots for _, row_slots in archived.get(key, [])]
        if got != [slots] and key not in problems:
            problems[key] = f"bottle-hour {_hour_key(key)}: ring {list(slots)}, archive {[list(g) for g in got]}"
    return len(expected), problems


class ArchiveLedger:
    """The archive compared with the source over a whole run, as the lifecycle run compares the reports: a ring
    keeps only its window, so its bottle-hours are compared as the run goes (the hours every ring holds, counted by
    the tally, ending SETTLED before the comparison), and at the end with the events. A later comparison of a
    bottle-hour replaces an earlier one."""

    def __init__(self, archive: Archive) -> None:
        self.archive = archive
        self.hours: dict[HourKey, str | None] = {}
        self.since: datetime | None = None

    @classmethod
    def of_the_app(cls) -> "ArchiveLedger":
        """A ledger of the archive the app's settings name (a run that keeps one)."""
        archive = get_archive(get_settings())
        if archive is None:
            raise ValueError("the app has no archive: set ARCHIVE_DIR (or a storage account) for the run")
        return cls(archive)

    def compare(self, db: Any, until: datetime, window_hours: int) -> None:
        """The bottle-hours every ring still holds, that the tally has counted, ending by `until`."""
        since, tallied = complete_from(db, window_hours), tallied_until(db)
        if since is None or tallied is None:
            return
        end = min(until, tallied)
        if end <= since:
            return
        self.since = since if self.since is None else min(self.since, since)
        expected = {key for key in ring_bottle_hours(db) if since <= key[2] < end}
        _, problems = heartbeat_differences(db, self.archive, (since, end))
        for key in expected | problems.keys():
            self.hours[key] = problems.get(key)

    def final(self, db: Any, until: datetime, window_hours: int) -> ArchiveCheck:
        """The last comparison of the bottle-hours, and every event against the sweep's position."""
        self.compare(db, until, window_hours)
        check = check_archive(db, self.archive, until=swept_until(db), heartbeats=None, every_event=True)
        check.heartbeats_from, check.heartbeats_until = self.since, tallied_until(db)
        check.bottle_hours = len(self.hours)
        check.problems += sorted(problem for problem in self.hours.values() if problem)
        return check


def _event(event: Event) -> str:
    return f"{event[0]} {event[4]} at {event[3]:%Y-%m-%dT%H:%M:%S} received {event[-1]:%Y-%m-%dT%H:%M:%S}"


def _hour_key(key: HourKey) -> str:
    return f"{key[0]} of {key[1]} at {key[2]:%Y-%m-%dT%H:00}"
