"""The report feeds at their edges (shared/feeds/sources.py): polling reads back an overlap before its
checkpoint, so an action stored by an instance whose clock is behind, after the run that checkpointed past its
time, still reaches the hourly report its user reads; and a resume that failed for a passing reason is not taken
for a rejected token."""

from datetime import timedelta
from typing import Any

import pytest
from pymongo.errors import OperationFailure

from shared.consumers.plugged import process_partition
from shared.instants import set_clock, utc_now
from shared.settings import get_settings
from shared.store import schema
from tests.api import SPEC, iso, opened, post_events, provisioned
from tests.report_client import aggregate, get_reports, set_setting
from tests.reports.feeds import CosmosStream, actions_partition_with_token


@pytest.fixture
def polling(mock_db: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    set_setting(monkeypatch, "CHANGE_SOURCE", "polling")
    return mock_db


def opened_in(user_id: str, hour: Any) -> int:
    response = get_reports(user_id, granularity="hour", **{"from": iso(hour), "to": iso(hour + timedelta(hours=1))})
    assert response.status == 200, response.body
    return sum(report["opened"] for report in response.body["reports"])


def test_an_action_stored_after_the_checkpoint_with_an_earlier_server_time_is_still_counted(polling: Any) -> None:
    now = utc_now().replace(minute=30, second=0, microsecond=0) - timedelta(hours=2)
    set_clock(lambda: now)
    key = provisioned()
    assert post_events("bottle-1", key, opened(now - timedelta(minutes=10))).status == 202
    aggregate()  # checkpoints at `now`, the newest server time it read
    # Another instance, its clock a minute behind, stores an open after that run.
    set_clock(lambda: now - timedelta(minutes=1))
    event = opened(now - timedelta(minutes=5), event_id="second")
    assert post_events("bottle-1", key, event).status == 202
    set_clock(lambda: now + timedelta(minutes=2))
    aggregate()

    assert opened_in(SPEC["user_id"], now.replace(minute=0)) == 2


def test_a_throttled_resume_fails_the_run_and_keeps_the_token_for_the_next(mock_db: Any, monkeypatch: Any) -> None:
    """Throttling (16500) while opening the stream at the lease's token says nothing about the token: the run
    fails (the host retries it) and the next resumes there, rather than recovering by polling from the
    checkpoint time as for a token the store rejected."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    partition = actions_partition_with_token(mock_db, utc_now())
    opened_at: list[Any] = []

    def throttled_once(p: Any, token: Any) -> Any:
        opened_at.append(token)
        if len(opened_at) == 1:
            raise OperationFailure("Request rate is large", code=16500)
        return CosmosStream([])

    with pytest.raises(OperationFailure):
        process_partition(mock_db, partition, now=utc_now(), settings=get_settings(), watch=throttled_once)
    run = process_partition(mock_db, partition, now=utc_now(), settings=get_settings(), watch=throttled_once)

    assert not run.recovered
    assert opened_at == [{"_data": "saved"}, {"_data": "saved"}]
    assert mock_db[schema.LEASES].find_one({"_id": partition.lease_id})["owner"] is None
