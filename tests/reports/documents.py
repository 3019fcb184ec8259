"""Report documents as the aggregation stores and reads them, built by hand at chosen hours of a fixed DAY: a
heartbeat document (heartbeat_doc), an hourly entry written by an older writer (stale_entry)."""

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from shared.devices.heartbeat_document import (
    OWNERS,
    RING,
    RING_TIME,
    SLOT_MINUTES,
    Placement,
    field_name,
    hour_number,
    ring_bits,
)
from shared.reports.documents import Entry

DAY = datetime(2027, 3, 10, tzinfo=UTC)
# Where the clock of the tests that store reports of DAY runs from (their `own_clock` mark): mongomock applies
# retention (the TTL indexes) by the app's clock, and two days after DAY they keep, whenever the suite runs.
AFTER_DAY = DAY + timedelta(days=2)


def at(hours: int, minutes: int = 0) -> datetime:
    return DAY + timedelta(hours=hours, minutes=minutes)


def heartbeat_doc(
    beats: Iterable[tuple[datetime, bool]], *, user_id: str, owners: list[dict[str, Any]], written: datetime
) -> dict[str, Any]:
    """A bottle's heartbeat document holding heartbeats (moment, late) in its ring, as of a ring write at
    `written`, owned by `user_id` after the earlier `owners`."""
    placements = [Placement(hour_number(m), m.minute // SLOT_MINUTES, late) for m, late in beats]
    return {
        "_id": "bottle-1",
        "user_id": user_id,
        "medication": "aspirin",
        OWNERS: owners,
        RING: {field_name(f): bits for f, bits in ring_bits(placements).items()},
        RING_TIME: written,
    }


def stale_entry(bottle_id: str, heartbeats: int) -> Entry:
    """A bottle's entry as an earlier merge left it."""
    return {
        "bottle_id": bottle_id,
        "medication": "Cordrazine",
        "opened": 0,
        "closed": 0,
        "doses": 0,
        "pills_taken": 0,
        "heartbeats": heartbeats,
        "last_number_of_pills": None,
        "last_mass_of_contents": None,
    }
