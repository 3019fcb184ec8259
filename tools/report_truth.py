"""The hourly report totals counted straight from the source collections, as docs/reports.md defines them
("What is counted where"), independently of the consumer: the simulator checks its reports against them,
and the report property test its replays."""

from collections import defaultdict
from datetime import datetime
from typing import Any

from shared.devices.heartbeat_document import RING_TIME, heartbeat_slots, hour_number, hour_start, slot_start
from shared.store import schema

COUNTED = ("opened", "closed", "doses", "pills_taken", "heartbeats")
Totals = dict[tuple[str, datetime], tuple[int, ...]]


def _hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def source_totals(db: Any) -> Totals:
    """Per (user, hour) with anything in it: opened, closed, doses, pills taken and heartbeats.

    An action counts for the user it was stored with; a heartbeat (a 5-minute slot of a bottle's ring) for whoever
    owned the bottle at its slot (a reassignment counts from the start of its slot)."""
    totals: dict[tuple[str, datetime], list[int]] = defaultdict(lambda: [0] * len(COUNTED))
    for action in db[schema.BOTTLE_ACTIONS].find():
        counts = totals[(action["user_id"], _hour(action["time"]))]
        taken = action.get("pills_taken", 0)
        counts[0] += action["action"] == "opened"
        counts[1] += action["action"] == "closed"
        counts[2] += taken > 0
        counts[3] += taken
    for doc in db[schema.BOTTLE_HEARTBEATS].find():
        earlier = doc.get("owners") or []  # [{user_id, until}]: who owned it before `until`, oldest first
        for slot in heartbeat_slots(doc):
            owner = next((o["user_id"] for o in earlier if slot < slot_start(o["until"])), doc["user_id"])
            totals[(owner, _hour(slot))][4] += 1
    return {key: tuple(values) for key, values in totals.items() if any(values)}


def reported_totals(db: Any) -> Totals:
    """The same totals as the hourly reports have them (a counter a report leaves out is 0)."""
    return {
        (report["user_id"], report["hour"]): tuple(report.get(c, 0) for c in COUNTED)
        for report in db[schema.USER_HOURLY_REPORTS].find()
    }


def complete_from(db: Any, window_hours: int) -> datetime | None:
    """The first hour from which every bottle's heartbeat window is whole (an older hour may have left a
    window, after the reports counted it); None if no bottle has a ring."""
    written = [doc[RING_TIME] for doc in db[schema.BOTTLE_HEARTBEATS].find({}, {RING_TIME: 1}) if RING_TIME in doc]
    return max(hour_start(hour_number(at) - window_hours + 1) for at in written) if written else None
