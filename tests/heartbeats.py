"""What a bottle's heartbeat document counts, as the tests look at it (shared/devices/heartbeat_document.py)."""

from datetime import datetime
from typing import Any

from shared.devices.heartbeat_document import heartbeat_slots, slot_start
from shared.store import schema


def heartbeat_document(db: Any, bottle_id: str = "bottle-1") -> dict[str, Any]:
    document: dict[str, Any] = db[schema.BOTTLE_HEARTBEATS].find_one({"_id": bottle_id})
    return document


def counted(db: Any, bottle_id: str = "bottle-1") -> list[datetime]:
    """The heartbeats the bottle's ring counts, each as the start of its 5-minute slot, oldest first."""
    return heartbeat_slots(heartbeat_document(db, bottle_id) or {})


def counted_everywhere(db: Any) -> int:
    """How many heartbeats the rings of every bottle count."""
    return sum(len(heartbeat_slots(d)) for d in db[schema.BOTTLE_HEARTBEATS].find())


def slot(moment: datetime) -> datetime:
    """The start of `moment`'s 5-minute slot: a heartbeat's identity."""
    return slot_start(moment)
