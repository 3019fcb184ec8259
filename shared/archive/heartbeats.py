"""Bottle-hours of heartbeats into the archive, from the heartbeat documents the hourly tally reads anyway (no read
of its own): the hours the tally counts (`pass_hours`) become rows (bottle, user, hour, slots), merged by key into
their file under a version guard, so a bottle-hour is in the archive once, with the slots its ring has. Why and
how: docs/archive.md, "How it is written" and "Exactly once"."""

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from shared.archive.layout import heartbeat_file
from shared.archive.storage import Archive, ArchiveUnavailable
from shared.devices.device_time import MAX_FUTURE_SKEW
from shared.devices.heartbeat_document import (
    MINUTE,
    SLOT_MINUTES,
    hour_start,
    owner_of_minute,
    ownerships,
    ring_hours,
    slots_of,
)
from shared.instants import HOUR
from shared.store.partitioning import bucket_of

MERGE_ATTEMPTS = 10  # guarded writes of one file refused in a row before the run gives up (ArchiveUnavailable)
PROBE_HOUR = datetime(1970, 1, 1, tzinfo=UTC)  # the file `check` reads: an hour no bottle was heard in

Key = tuple[str, str]  # (bottle_id, user_id): a row of a file (a file holds one hour)
Unit = tuple[datetime, int]  # (hour, user bucket): a file


@dataclass(frozen=True)
class HourSlots:
    """A bottle's heartbeats of one hour for one owner: the minute each slot starts at, and whether that owner
    had the bottle for the whole hour (and the skew before it), so that its slots only ever grow."""

    minutes: tuple[int, ...]
    sole_owner: bool


def bottle_hours(document: Mapping[str, Any], hours: Iterable[datetime]) -> dict[tuple[str, datetime], HourSlots]:
    """Per (user, hour) of `hours` that the ring holds: the slots heard from, each for whoever owned the bottle at
    its slot (a reassignment counts from the start of its slot, as the reports count it). Every owner of the bottle
    during such an hour gets an entry, possibly without slots: its row, if it had one, goes."""
    wanted = set(hours)
    spans = ownerships(document)
    found: dict[tuple[str, datetime], HourSlots] = {}
    for number, value in ring_hours(document).items():
        hour = hour_start(number)
        if hour not in wanted:
            continue
        owners = [span for span in spans if span.overlaps(hour - MAX_FUTURE_SKEW, hour + HOUR)]
        minutes: dict[str, list[int]] = {span.user_id: [] for span in owners}
        for slot in slots_of(value):
            start = slot * SLOT_MINUTES
            owner = owner_of_minute(spans, hour + (start + SLOT_MINUTES - 1) * MINUTE)
            if owner is not None:  # never None: the spans cover every instant
                minutes.setdefault(owner, []).append(start)
        for user_id, own in minutes.items():
            found[(user_id, hour)] = HourSlots(tuple(own), sole_owner=len(owners) == 1)
    return found


def merged(stored: Mapping[Key, tuple[int, ...]], rows: Mapping[Key, HourSlots]) -> dict[Key, tuple[int, ...]]:
    """A file's rows after merging recomputed ones into it: a sole owner's slots are the union of both (a ring only
    gains them), another's are the recomputed ones; a row left without slots goes."""
    result = dict(stored)
    for key, slots in rows.items():
        minutes = tuple(sorted(set(stored.get(key, ())) | set(slots.minutes))) if slots.sole_owner else slots.minutes
        if minutes:
            result[key] = minutes
        else:
            result.pop(key, None)
    return result


class HeartbeatArchiver:
    """The rows of the pages a tally pass has read, held until merged into their files (`flush`).

    Rows are held by the bucket of the document they came from (the tally's order is by it), so a pass can merge
    the buckets it has read to the end and keep the one it is in, whose next documents may add to the same files:
    a file is then written once a pass, not once a page."""

    def __init__(self, archive: Archive) -> None:
        self._archive = archive
        self._held: dict[int, dict[Unit, dict[Key, HourSlots]]] = defaultdict(lambda: defaultdict(dict))
        self.files_written = 0

    def add(self, document: Mapping[str, Any], hours: Iterable[datetime], *, source_bucket: int) -> None:
        """Hold the rows of one heartbeat document for `hours` (read from bucket `source_bucket` of the pass)."""
        bottle_id = str(document["bottle_id"])
        for (user_id, hour), slots in bottle_hours(document, hours).items():
            self._held[source_bucket][(hour, bucket_of(user_id))][(bottle_id, user_id)] = slots

    def holding(self) -> bool:
        """Whether rows are held that are not merged yet."""
        return any(self._held.values())

    def check(self) -> None:
        """Raise ArchiveUnavailable if the archive's store does not answer: one read of a file's name (there need be
        no such file), before a run reads heartbeat documents only to find it cannot write their rows."""
        self._archive.read(heartbeat_file(PROBE_HOUR, 0))

    def flush(self, *, before: int | None = None) -> None:
        """Merge the rows held from documents of buckets before `before` (None: all) into their files."""
        sources = [bucket for bucket in self._held if before is None or bucket < before]
        units: dict[Unit, dict[Key, HourSlots]] = defaultdict(dict)
        for bucket in sorted(sources):
            for unit, rows in self._held.pop(bucket).items():
                units[unit].update(rows)
        for unit in sorted(units):
            if self.merge(unit, units[unit]):
                self.files_written += 1

    def merge(self, unit: Unit, rows: Mapping[Key, HourSlots]) -> bool:
        """Merge `rows` into the file of `unit`, guarded by the version read; True if the file changed."""
        from shared.archive import parquet  # noqa: PLC0415 - pyarrow only where the archive is written

        hour, bucket = unit
        name = heartbeat_file(hour, bucket)
        for _ in range(MERGE_ATTEMPTS):
            found = self._archive.read(name)
            stored = {} if found is None else _rows_of(parquet.decode(found.data))
            result = merged(stored, rows)
            if result == stored:
                return False
            data = parquet.encode_heartbeats(_file_rows(hour, result))
            if self._archive.write_guarded(name, data, None if found is None else found.version) is not None:
                return True
        raise ArchiveUnavailable(f"{self._archive.where}: {name} kept changing under {MERGE_ATTEMPTS} merges")


def _rows_of(rows: list[dict[str, Any]]) -> dict[Key, tuple[int, ...]]:
    return {(str(row["bottle_id"]), str(row["user_id"])): tuple(row["slots"]) for row in rows}


def _file_rows(hour: datetime, rows: Mapping[Key, tuple[int, ...]]) -> list[dict[str, Any]]:
    at = hour.astimezone(UTC)
    return [
        {"bottle_id": bottle_id, "user_id": user_id, "hour": at, "slots": list(minutes)}
        for (bottle_id, user_id), minutes in sorted(rows.items())
    ]
