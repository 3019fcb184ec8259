"""The heartbeat ring over weeks: its one-character field names come round again every FIELD_NAMES fields, so
every write must clear the fields a gap between writes left behind, or their old bits come back as heartbeats
of new hours (shared/heartbeat_document.py: Window.cleared)."""

from datetime import timedelta
from typing import Any

from shared.heartbeat_document import FIELD_NAMES, HOURS_PER_FIELD, slot_start
from tests.test_heartbeat_ring import T0, Bottle


def test_a_bottle_heard_every_7_hours_for_weeks_counts_no_heartbeat_it_never_sent(mock_db: Any) -> None:
    """With the widest window (48 h) and a heartbeat every 7 hours, each write moves the window by a field or two:
    the fields it leaves must be cleared, or once the names wrap (FIELD_NAMES fields, about 10 days) they read as
    phantom heartbeats in hours the bottle was silent."""
    bottle = Bottle(mock_db, window_hours=48)
    sent = [T0 + timedelta(hours=7 * n, minutes=5 * (n % 12)) for n in range(48)]  # 14 days
    assert sent[-1] - sent[0] > timedelta(hours=FIELD_NAMES * HOURS_PER_FIELD)  # the names have come round
    for moment in sent:
        bottle.send(moment, now=moment + timedelta(seconds=5))

    recent = [slot_start(t) for t in sent if t > sent[-1] - timedelta(hours=48)]
    assert set(bottle.counted) <= {slot_start(t) for t in sent}
    assert set(recent) <= set(bottle.counted)
