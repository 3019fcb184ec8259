"""The heartbeat ring over weeks: its one-character field names come round again every FIELD_NAMES fields, so
every write must clear the fields a gap between writes left behind, or their old bits come back as heartbeats
of new hours (shared/heartbeat_document.py: Window.cleared). And a ring write after a long silence that loses every
round to other writes gives up with a 503 the device retries in a second (shared/ingestion/storing.py)."""

from datetime import timedelta
from typing import Any

import pytest

from shared.heartbeat_document import FIELD_NAMES, HOURS_PER_FIELD, MAX_GAP_HOURS, RING_TIME, slot_start
from shared.ingestion import storing
from shared.store import optimistic, retries, schema
from shared.store.retries import StoreUnavailable
from tests.ingestion.test_heartbeat_ring import T0, Bottle


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


def test_a_ring_write_after_a_long_silence_that_loses_every_round_is_a_503_to_retry_soon(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    bottle = Bottle(mock_db)
    bottle.send(T0, now=T0)
    back = T0 + timedelta(hours=MAX_GAP_HOURS + 1)
    real = retries.with_retries
    rounds: list[bool] = []

    def another_write_after_each_read(operation: Any, policy: Any, *args: Any) -> Any:
        result = real(operation, policy, *args)
        if isinstance(result, dict) and "k" in result:  # the slow path's read: another write moves the ring on
            rounds.append(True)
            written = result[RING_TIME] + timedelta(seconds=1)
            mock_db[schema.BOTTLE_HEARTBEATS].update_one({"_id": "bottle-1"}, {"$set": {RING_TIME: written}})
        return result

    monkeypatch.setattr(storing, "with_retries", another_write_after_each_read)

    with pytest.raises(StoreUnavailable) as gave_up:
        bottle.send(back, now=back)

    assert len(rounds) == optimistic.MAX_ROUNDS
    # A conflict's Retry-After is jittered (shared/store/retries.py): a second, plus up to the spread.
    assert 1 <= gave_up.value.retry_after_s <= 1 + retries.THROTTLED_SPREAD_S
