"""A bottle's heartbeat document written by hand at chosen instants from T0 (Bottle), and what its ring counts;
the ring's and the heartbeat document's tests share it."""

from datetime import UTC, datetime, timedelta
from typing import Any

from shared.devices.device_keys import hash_key
from shared.devices.heartbeat_document import (
    Window,
    heartbeat_slots,
    key_digest,
)
from shared.ingestion import storing
from shared.instants import set_clock
from shared.store import schema
from shared.store.retries import RetryPolicy
from tests.api import SPEC, provisioned

T0 = datetime(2026, 11, 20, 6, 0, 30, tzinfo=UTC)

POLICY = RetryPolicy(max_retries=0, base_ms=1)


class Bottle:
    """One provisioned bottle whose heartbeats are stored straight through ingestion's write, at a chosen
    server time and with a chosen window."""

    def __init__(self, db: Any, window_hours: int = 24) -> None:
        self.db = db
        self.window = Window(window_hours)
        set_clock(lambda: T0 - timedelta(hours=1))  # provisioned an hour before the first heartbeat
        try:
            self.key = key_digest(hash_key(provisioned("bottle-1", SPEC)))
        finally:
            set_clock(None)

    def send(self, *times: datetime, now: datetime) -> int:
        """Store heartbeats of these times, received at `now`; how many were new."""
        return storing.store_heartbeats(
            self.db, "bottle-1", self.key, list(times), now=now, window=self.window, policy=POLICY
        )

    @property
    def document(self) -> dict[str, Any]:
        found: dict[str, Any] = self.db[schema.BOTTLE_HEARTBEATS].find_one({"_id": "bottle-1"})
        return found

    @property
    def counted(self) -> list[datetime]:
        return heartbeat_slots(self.document)
