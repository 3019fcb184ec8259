"""Events that arrive out of order (buffered by a bottle while offline, or a request retried late): the status
shows the latest action whatever the order of arrival, with a dose or without, and a later request of the same
instant changes nothing (shared/ingestion/storing.py)."""

from typing import Any

import pytest

from tests.api import ago, closed, get_bottle, iso, opened, post_events, provisioned


def status() -> dict[str, Any]:
    return dict(get_bottle("bottle-1").body["status"])


def stored_instant(moment: Any) -> str:
    return iso(moment).replace("Z", ".000Z")


@pytest.mark.parametrize("taken", [1, 0], ids=["a dose", "no dose"])
def test_an_older_event_arriving_later_never_moves_the_status_back(mock_db: Any, taken: int) -> None:
    key = provisioned()
    newer, older = ago(minutes=5), ago(minutes=50)
    assert post_events("bottle-1", key, opened(newer, event_id="new")).status == 202

    assert post_events("bottle-1", key, closed(older, taken=taken, event_id="old")).status == 202

    assert (status()["last_action"], status()["last_action_time"]) == ("opened", stored_instant(newer))
    assert status()["open_since"] == stored_instant(newer)


@pytest.mark.parametrize("taken", [1, 0], ids=["a dose", "no dose"])
def test_an_event_of_the_same_instant_as_the_last_moves_the_status_only_from_opened_to_closed(
    mock_db: Any, taken: int
) -> None:
    key = provisioned()
    moment = ago(minutes=5)
    assert post_events("bottle-1", key, closed(moment, taken=taken, event_id="c")).status == 202

    assert post_events("bottle-1", key, opened(moment, event_id="o")).status == 202

    assert (status()["last_action"], status()["open_since"]) == ("closed", None)


def test_an_open_of_the_same_instant_as_the_stored_close_arriving_with_a_dose_leaves_the_bottle_closed(
    mock_db: Any,
) -> None:
    key = provisioned()
    moment = ago(minutes=5)
    assert post_events("bottle-1", key, closed(moment, taken=1, event_id="c")).status == 202

    late = {"events": [closed(ago(minutes=30), taken=1, event_id="earlier-dose"), opened(moment, event_id="o")]}
    assert post_events("bottle-1", key, late).status == 202

    assert (status()["last_action"], status()["open_since"]) == ("closed", None)
    assert status()["last_action_time"] == stored_instant(moment)


def test_an_older_dose_arriving_later_never_moves_the_last_dose_back(mock_db: Any) -> None:
    key = provisioned()
    newer, older = ago(minutes=5), ago(minutes=50)
    assert post_events("bottle-1", key, closed(newer, taken=1, event_id="new")).status == 202

    assert post_events("bottle-1", key, closed(older, taken=1, event_id="old")).status == 202

    assert status()["last_dose_time"] == stored_instant(newer)
