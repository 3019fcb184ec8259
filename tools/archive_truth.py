"""The archive checked against the source, as the simulator and the lifecycle run check the reports: every
opened/closed event stored once in `actions`, and every archived bottle-hour's heartbeat slots equal to its ring's,
counted straight from `bottle_actions` and the rings, independently of the code that writes the archive."""

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from shared.archive import parquet
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
from shared.heartbeat_document import heartbeat_slots, slot_start
from shared.store import schema
from shared.store.partitioning import bucket_of

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
) -> ArchiveCheck:
    """The archive against the source: the events received before `until` (the sweep's position) each in the
    archive once, in the file of its device date and receive hour, and no archived event that is not stored (nor
    more often than stored); the bottle-hours of the hours `heartbeats` (those the tally has counted and every ring
    still holds) each archived with the ring's slots, once, in the file of its hour and user."""
    check = ArchiveCheck(until, *(heartbeats or (None, None)))
    if until is None:
        return check
    _check_events(db, archive, until, check)
    if heartbeats is not None:
        _check_heartbeats(db, archive, heartbeats, check)
    return check


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
    start, end = hours
    expected = {key: slots for key, slots in ring_bottle_hours(db).items() if start <= key[2] < end}
    check.bottle_hours = len(expected)
    archived: dict[HourKey, list[tuple[str, tuple[int, ...]]]] = defaultdict(list)
    for name, key, slots in archived_bottle_hours(archive):
        archived[key].append((name, slots))
        if parse_heartbeat_file(name) is None or name != heartbeat_file(key[2], bucket_of(key[1])):
            check.problems.append(f"bottle-hour in the wrong file {name}: {_hour_key(key)}")
    for key, rows in sorted(archived.items()):
        if len(rows) > 1:
            check.problems.append(f"bottle-hour archived {len(rows)}x: {_hour_key(key)}")
    for key, slots in sorted(expected.items()):
        got = [row_slots for _, row_slots in archived.get(key, [])]
        if got != [slots]:
            check.problems.append(f"bottle-hour {_hour_key(key)}: ring {list(slots)}, archive {[list(g) for g in got]}")
    for key in sorted(archived):
        if start <= key[2] < end and key not in expected:
            check.problems.append(f"bottle-hour archived with no heartbeat in its ring: {_hour_key(key)}")


def _event(event: Event) -> str:
    return f"{event[0]} {event[4]} at {event[3]:%Y-%m-%dT%H:%M:%S} received {event[-1]:%Y-%m-%dT%H:%M:%S}"


def _hour_key(key: HourKey) -> str:
    return f"{key[0]} of {key[1]} at {key[2]:%Y-%m-%dT%H:00}"
