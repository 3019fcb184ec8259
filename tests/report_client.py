"""Driving the report functions as the Functions host would: the `aggregate_reports` dispatcher timer, its
work messages delivered to `aggregate_report_partition`, and the read API; and reading what they stored."""

import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import mongomock
import pytest
from pymongo.errors import PyMongoError

from shared import instants
from shared.consumers.plugged import dispatch, partition_of, process_partition
from shared.feeds.consumers import PartitionRun
from shared.instants import set_clock, utc_now
from shared.reports.feeds import REPORT_FEEDS
from shared.settings import get_settings
from shared.store import schema
from shared.store.retries import StoreUnavailable
from tests import invoke
from tests.api import Response


def dispatched() -> list[str]:
    """One run of the dispatcher timer function, through the runtime: the work messages it sent."""
    return invoke.timer("aggregate_reports")


def work(message: str) -> None:
    """One delivery of a work message to the worker function, through the runtime."""
    invoke.queue("aggregate_report_partition", message)


def aggregate(*, hours_later: float = 0) -> list[str]:
    """One dispatch by the timer function, and each work message it sent delivered to the worker function in
    order, as one queue worker would; the messages. `hours_later`: with the clock that much ahead (the heartbeat
    tally counts an hour once it has closed, and a late heartbeat at its next pass)."""
    with clock_ahead(timedelta(hours=hours_later)):
        messages = dispatched()
        for message in messages:
            work(message)
    return messages


@contextlib.contextmanager
def clock_ahead(delta: timedelta) -> Iterator[None]:
    """The app's clock stopped `delta` after it reads now (the test's clock, or the wall clock), for a while."""
    if not delta:
        yield
        return
    at = utc_now() + delta
    with instants.clock_restored():  # then the test's own clock again
        set_clock(lambda: at)
        yield


@dataclass
class Round:
    """What one dispatch and its partition runs did, summed over the partitions (feeds by collection)."""

    runs: list[PartitionRun] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    @property
    def changes(self) -> int:
        return sum(r.changes for r in self.runs)

    @property
    def hourly_written(self) -> int:
        return sum(r.hourly_written for r in self.runs)

    @property
    def daily_written(self) -> int:
        return sum(r.daily_written for r in self.runs)

    @property
    def caught_up(self) -> bool:
        return not self.failed and all(r.caught_up for r in self.runs)

    @property
    def recovered(self) -> list[str]:
        return _feeds_in_order(r.lease_id for r in self.runs if r.recovered)


def _feeds_in_order(lease_ids: Any) -> list[str]:
    order = [feed.key for feed in REPORT_FEEDS]
    feeds = {lease_id.split(":")[1] for lease_id in lease_ids}
    return [feed for feed in order if feed in feeds]


def run_round(db: Any, *, clock: Callable[[], float] | None = None, hours_later: float = 0) -> Round:
    """One dispatch and a worker run per work message on `db` (a fake may stand in for the store); a partition
    whose run raised a database error is listed in `failed` by its feed, as the host would retry it."""
    settings, now = get_settings(), utc_now() + timedelta(hours=hours_later)
    messages: list[str] = []
    dispatch(db, now=now, settings=settings, send=messages.extend)
    done = Round()
    failed: list[str] = []
    for body in messages:
        partition = partition_of(json.loads(body))
        try:
            extra = {"clock": clock} if clock is not None else {}
            done.runs.append(process_partition(db, partition, now=now, settings=settings, **extra))
        except (PyMongoError, StoreUnavailable):
            failed.append(partition.lease_id)
    done.failed = _feeds_in_order(failed)
    return done


def get_reports(user_id: str, **params: str) -> Response:
    response = invoke.http(
        "get_user_reports", url=f"/api/users/{user_id}/reports", params=params, route_params={"user_id": user_id}
    )
    return Response(response.status_code, json.loads(response.get_body()), dict(response.headers))


def use_change_source_of(db: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """Change streams where the store has them (SecantusDB); polling on mongomock, which has none."""
    source = "polling" if isinstance(db.client, mongomock.MongoClient) else "change_stream"
    monkeypatch.setenv("CHANGE_SOURCE", source)
    get_settings.cache_clear()
    return source


def set_setting(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    get_settings.cache_clear()


def stored_reports(db: Any, *, with_updated_at: bool = False) -> dict[str, dict[str, Any]]:
    """Every hourly and daily report by `_id` (without `updated_at` unless asked: a rebuild's differ)."""
    found = {}
    for name in (schema.USER_HOURLY_REPORTS, schema.USER_DAILY_REPORTS):
        for doc in db[name].find():
            if not with_updated_at:
                doc.pop("updated_at")
            found[f"{name}/{doc['_id']}"] = doc
    return found


def clear_reports(db: Any) -> None:
    """Forget every report and every consumer position: the next run starts from scratch."""
    for name in (schema.USER_HOURLY_REPORTS, schema.USER_DAILY_REPORTS, schema.LEASES):
        db[name].delete_many({})


def played_report_day() -> datetime:
    """The day the API's report tests play, made from the test's clock as the test starts: a day whose hours are
    all past and whose 08:00 to 11:00 are within the widest heartbeat window (48 hours). The clock is placed for
    each test (tests/wall_clock.py), so a day made when a module is imported would be another instant's."""
    return instants.day_of(instants.utc_now() - timedelta(hours=30))
