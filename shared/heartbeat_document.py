"""The layout of a bottle's heartbeat document (`bottle_heartbeats`, one per bottle), which three jobs share:
provisioning creates it, ingestion writes it (one update per heartbeat), the silent check sweeps it, the
report consumer counts it.

Fields: `times` (the newest heartbeat instants, in order), `last` and `alive_at` (the latest instant; `alive_at`
starts at provisioning), `received_at` (server time of the last write), `key_hash` (so a heartbeat
authenticates inside its own write), `user_id`/`medication` (denormalised from the registry), `owners` (who
owned the bottle from when), `late` (the hours of late heartbeats, with their arrival), and the silent check's
markers (`silent_pending`, `silent_episode`).
"""

from datetime import datetime
from typing import Any

from shared.device_time import LATE_AFTER
from shared.instants import hour_of

# How many `late` entries the document keeps (the newest); more late heartbeats than this since the report
# consumer's checkpoint make it recompute the bottle's whole window.
LATE_KEPT = 16
# Ownership changes kept in `owners` (reassignments are rare operations events).
MAX_OWNERS = 50


def late_arrival(moment: datetime, received_at: datetime) -> dict[str, Any] | None:
    """The `late` entry a heartbeat of `moment` received at `received_at` adds (None if it is prompt)."""
    if received_at - moment <= LATE_AFTER:
        return None
    return {"hour": hour_of(moment), "received_at": received_at}
