"""An opened and a closed event of one instant in one request: the bottle ends closed whichever comes first in
the body, with a dose or without (shared/ingestion/storing.py). tests/ingestion/test_repeats_and_races.py holds the
same rule across two requests."""

from typing import Any

import pytest

from tests.api import ago, closed, get_bottle, iso, opened, post_events, provisioned


@pytest.mark.parametrize("taken", [1, 0], ids=["a dose", "no dose"])
@pytest.mark.parametrize("order", ["opened first", "closed first"])
def test_an_open_and_a_close_at_one_instant_in_one_request_end_closed(mock_db: Any, order: str, taken: int) -> None:
    key = provisioned()
    moment = ago(minutes=3)
    events = [opened(moment, event_id="o"), closed(moment, event_id="c", taken=taken)]

    response = post_events("bottle-1", key, {"events": events if order == "opened first" else events[::-1]})

    assert (response.status, response.body) == (202, {"stored": 2, "duplicates": 0, "expired": 0})
    status = get_bottle("bottle-1").body["status"]
    assert (status["last_action"], status["open_since"]) == ("closed", None)
    assert status["last_action_time"] == iso(moment).replace("Z", ".000Z")
