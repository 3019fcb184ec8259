"""What a device and an operator see when the store keeps failing a request: the 503's Retry-After (drawn from
the range the settings give), the log line naming the attempts made and the error, and which errors count as
transient. The random draws are pinned to the ends of their ranges so each end can be checked exactly."""

import logging
import time
from typing import Any

import pytest
from pymongo.errors import AutoReconnect, OperationFailure

from functions import device_events
from shared.store import retries, schema
from tests.api import ago, closed, heartbeat, opened, post_events, provisioned
from tests.cosmos_fakes import ThrottlingDatabase
from tests.draws import Highest, Lowest
from tests.report_client import set_setting


def failing(db: Any, monkeypatch: pytest.MonkeyPatch, error: Any) -> ThrottlingDatabase:
    """The device route's store, its heartbeat writes always failing with `error`."""
    fake = ThrottlingDatabase(db, {schema.BOTTLE_HEARTBEATS: float("inf")}, error=error)
    monkeypatch.setattr(device_events, "get_database", lambda: fake)
    return fake


def heartbeat_writes(fake: ThrottlingDatabase) -> int:
    return len([call for call in fake.calls if call.startswith(schema.BOTTLE_HEARTBEATS)])


@pytest.mark.parametrize(("max_retries", "attempts"), [(None, 4), ("1", 2)])
def test_a_503_after_the_retries_is_logged_naming_the_attempts_made_and_the_error(
    db, monkeypatch, caplog, max_retries, attempts
):
    key = provisioned()
    if max_retries is not None:
        set_setting(monkeypatch, "STORE_MAX_RETRIES", max_retries)
    fake = failing(db, monkeypatch, lambda: AutoReconnect("connection reset"))

    with caplog.at_level(logging.WARNING):
        response = post_events("bottle-1", key, heartbeat(ago(minutes=1)))

    assert response.status == 503
    assert heartbeat_writes(fake) == attempts
    logged = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert f"post_events store unavailable: database unavailable after {attempts} attempts: AutoReconnect" in logged


@pytest.mark.parametrize(("draw", "retry_after"), [(Lowest, "45"), (Highest, "90")])
def test_an_unreachable_store_answers_retry_after_from_outage_seconds_up_to_twice_that(
    db, monkeypatch, draw, retry_after
):
    key = provisioned()
    set_setting(monkeypatch, "OUTAGE_RETRY_AFTER_SECONDS", "45")
    monkeypatch.setattr(retries, "_RANDOM", draw())
    failing(db, monkeypatch, lambda: AutoReconnect("connection reset"))

    response = post_events("bottle-1", key, heartbeat(ago(minutes=1)))

    assert (response.status, response.headers["Retry-After"]) == (503, retry_after)


def test_an_error_the_server_labels_retryable_is_retried_then_a_503_not_a_500(db, monkeypatch):
    """A server attaches the RetryableWriteError label to errors it says a retry may cure, whatever their code:
    the app retries those too, and answers a 503 (not a fault's 500) if they persist."""
    key = provisioned()
    labelled = lambda: OperationFailure(  # noqa: E731
        "operation was interrupted", code=64, details={"errorLabels": ["RetryableWriteError"]}
    )
    fake = failing(db, monkeypatch, labelled)

    response = post_events("bottle-1", key, heartbeat(ago(minutes=1)))

    assert response.status == 503
    assert int(response.headers["Retry-After"]) >= 1
    assert "error_id" not in response.body
    assert heartbeat_writes(fake) == 4  # the first try and 3 retries


class SlowReads:
    """The store, whose bottle reads answer after `delay_s` (a slow replica): the request's later calls start
    after that much of its deadline is gone."""

    def __init__(self, db: Any, delay_s: float) -> None:
        self.db = db
        self.delay_s = delay_s
        self.calls: list[str] = []

    def __getitem__(self, name: str) -> Any:
        return SlowCollection(self, self.db[name], name)


class SlowCollection:
    def __init__(self, owner: SlowReads, collection: Any, name: str) -> None:
        self._owner, self._collection, self._name = owner, collection, name

    def __getattr__(self, attribute: str) -> Any:
        real = getattr(self._collection, attribute)
        if not callable(real):
            return real

        def call(*args: Any, **kwargs: Any) -> Any:
            self._owner.calls.append(f"{self._name}.{attribute}")
            answer = real(*args, **kwargs)
            if self._name == schema.BOTTLES and attribute.startswith("find"):
                time.sleep(self._owner.delay_s)  # the answer comes back late
            return answer

        return call


def test_a_request_whose_deadline_ran_out_during_a_slow_read_answers_an_outage_503_and_writes_nothing(
    db, monkeypatch, caplog
):
    key = provisioned()
    set_setting(monkeypatch, "REQUEST_DEADLINE_SECONDS", "0.05")
    monkeypatch.setattr(retries, "_RANDOM", Lowest())
    slow = SlowReads(db, delay_s=0.1)
    monkeypatch.setattr(device_events, "get_database", lambda: slow)

    with caplog.at_level(logging.WARNING):
        response = post_events("bottle-1", key, {"events": [opened(ago(minutes=8)), closed(ago(minutes=7))]})

    assert (response.status, response.headers["Retry-After"]) == (503, "30")  # an outage's: the store is slow
    assert slow.calls == [f"{schema.BOTTLES}.find_one"]  # nothing was written after the deadline
    assert db[schema.BOTTLE_ACTIONS].count_documents({}) == 0
    logged = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "post_events store unavailable: database did not answer within the deadline" in logged
