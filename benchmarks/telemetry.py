"""What each unit of the app's work sends to Application Insights, measured through the pinned Functions runtime
(tools/telemetry_capture.py): a device request of each kind, a check partition's run and each notification it
sends, a report partition's run (and each page more it reads), a dispatcher timer's run, and the metric series an
HTTP instance keeps in a minute. The figures feed the bill's Application Insights line (tools/costs/telemetry.py,
which keeps the last run's as MEASURED; tests/functions/test_telemetry_volume.py holds them equal).

    python -m benchmarks.telemetry

Each invocation runs in a host span whose traceparent says "sampled", so what the app sends only in a kept trace
and what it sends whatever the sampling are counted apart; the store is SecantusDB in-process (the counts do not
depend on it)."""

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from benchmarks.harness import Table, print_table, secantus_store
from shared.feeds.partitions import Partition
from shared.instants import clock_restored, set_clock, utc_now
from shared.reports.feeds import ACTIONS_FEED
from shared.settings import get_settings
from shared.store.partitioning import BUCKETS, bucket_of
from tools.costs.telemetry import UnitVolume
from tools.local_host import LocalHost
from tools.telemetry_capture import Capture, Item

TITLE = "Telemetry per unit of work, through the Functions runtime"
HEADER = [
    "unit",
    "requests",
    "traces",
    "bytes in a kept trace",
    "sent whatever the sampling",
    "bytes whatever the sampling",
    "metric points",
    "metric bytes",
]
EVENTS_ROUTE = "bottles/{bottle_id}/events"
CHECK_PARTITIONS = 4
LEFT_OPEN = 3  # bottles left open in the partition a check run sweeps
PAGE_SIZE = 2  # the report run's page size here: a page more is a run with two more changes


def volume_of(unit: str, items: list[Item]) -> UnitVolume:
    """The volume of one unit of work that sent `items`: what only a kept trace holds (the host's request, the
    app's INFO lines, spans), the log records sent whatever the sampling, and the metric points."""
    sampled = [i for i in items if not i.always]
    always = [i for i in items if i.always and i.table == "traces"]
    points = [i for i in items if i.table == "customMetrics"]
    return UnitVolume(
        unit,
        sum(i.table == "requests" for i in sampled),
        sum(i.table == "traces" for i in sampled),
        sum(i.bytes for i in sampled),
        len(always),
        sum(i.bytes for i in always),
        len(points),
        sum(i.bytes for i in points),
    )


def row(volume: UnitVolume) -> list[str]:
    return [
        volume.unit,
        f"{volume.requests}",
        f"{volume.traces}",
        f"{volume.sampled_bytes:,}",
        f"{volume.always_items}",
        f"{volume.always_bytes:,}",
        f"{volume.metric_points}",
        f"{volume.metric_bytes:,}",
    ]


@contextmanager
def _settings(**values: str) -> Iterator[None]:
    """App settings for the block (the app reads them through get_settings)."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    get_settings.cache_clear()
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        get_settings.cache_clear()


def _event(kind: str, at: datetime) -> bytes:
    if kind == "heartbeat":
        return json.dumps({"type": "heartbeat", "time": at.isoformat()}).encode()
    body = {"type": kind, "time": at.isoformat(), "mass_of_contents": 15.0, "number_of_pills": 30}
    return json.dumps(body | ({"pills_taken": 1} if kind == "closed" else {})).encode()


class _Fleet:
    """Bottles provisioned through the runtime, and their device requests, on one capture."""

    def __init__(self, capture: Capture) -> None:
        self.capture = capture
        self.keys: dict[str, str] = {}

    def provision(self, bottle_id: str) -> None:
        body = {"user_id": f"user-{bottle_id}", "medication": "Cordrazine", "schedule": {"every_hours": 8}}
        response = self.capture.http(
            "provision_bottle",
            method="PUT",
            route="bottles/{bottle_id}",
            route_params={"bottle_id": bottle_id},
            headers={"content-type": "application/json"},
            body=json.dumps(body).encode(),
        )
        assert response.status_code == 201, response.get_body()
        self.keys[bottle_id] = json.loads(response.get_body())["device_key"]

    def post(self, bottle_id: str, body: bytes, key: str | None = None) -> int:
        response = self.capture.http(
            "post_events",
            method="POST",
            route=EVENTS_ROUTE,
            route_params={"bottle_id": bottle_id},
            headers={"content-type": "application/json", "x-device-key": key or self.keys[bottle_id]},
            body=body,
        )
        return int(response.status_code)


def _bottles_in(partition: int, count: int) -> Iterator[str]:
    """Bottle ids whose bucket falls in check partition `partition` of `count`."""
    n = 0
    while True:
        bottle_id = f"bottle-{n:07d}"
        if bucket_of(bottle_id) * count // BUCKETS == partition:
            yield bottle_id
        n += 1


def measure(host: LocalHost, start: datetime, clock: Callable[[], float] = time.monotonic) -> list[UnitVolume]:
    """Every unit's volume, on the store installed for the app (a fresh one): a fleet provisioned at `start`,
    its requests, a left-open check, a report round, all through `host` at the app clock's instants."""
    now = [start]
    with clock_restored():
        set_clock(lambda: now[0])
        with _settings(CHANGE_SOURCE="polling", REPORTS_PAGE_SIZE=str(PAGE_SIZE)), Capture(host, clock=clock) as cap:
            return _units(cap, now)


def _units(cap: Capture, now: list[datetime]) -> list[UnitVolume]:
    fleet = _Fleet(cap)
    open_ids = [b for _, b in zip(range(LEFT_OPEN), _bottles_in(0, CHECK_PARTITIONS), strict=False)]
    for bottle_id in ["bottle-http", *open_ids]:
        fleet.provision(bottle_id)
    cap.items()
    found = []
    at = now[0] - timedelta(hours=2)  # each event 10 minutes after the last: every heartbeat in a slot of its own
    for kind in ("heartbeat", "opened", "closed"):
        at += timedelta(minutes=10)
        assert fleet.post("bottle-http", _event(kind, at)) == 202
        found.append(volume_of(f"{kind} request", cap.items()))
    assert fleet.post("bottle-http", _event("closed", at)) == 202  # a device's retry: a duplicate
    found.append(volume_of("duplicate request", cap.items()))
    assert fleet.post("bottle-http", _event("heartbeat", at), key="not-the-key-0123456789abcdef") == 401
    found.append(volume_of("refused request (401)", cap.items()))
    # An HTTP instance's minute: its metric series, each exported once whatever the requests in it (new events of
    # each kind, a retry, a wrong key).
    for kind in ("heartbeat", "opened", "closed"):
        at += timedelta(minutes=10)
        assert fleet.post("bottle-http", _event(kind, at)) == 202
    assert fleet.post("bottle-http", _event("closed", at)) == 202
    assert fleet.post("bottle-http", _event("heartbeat", at), key="not-the-key-0123456789abcdef") == 401
    minute = [i for i in cap.items() if i.table == "customMetrics"]
    found.append(volume_of("HTTP instance, a minute's metric series", minute))
    # A left-open check: the run of one partition, then per notification it sent.
    for bottle_id in open_ids:
        assert fleet.post(bottle_id, _event("opened", now[0] - timedelta(minutes=20))) == 202
    cap.items()
    message = json.dumps({"kind": "left_open", "partition": 0, "of": CHECK_PARTITIONS})
    cap.queue("run_check_partition", message)
    found.append(volume_of(f"check run sending {LEFT_OPEN} notifications", cap.items()))
    cap.queue("run_check_partition", message)  # the same partition again: nothing new to send
    idle = cap.items()
    found.append(volume_of("check run sending none", idle))
    # The report consumer: a dispatch, then a run of an actions partition with changes, one page and three.
    cap.timer("aggregate_reports")
    found.append(volume_of("reports dispatch (timer)", cap.items()))
    found += _report_runs(cap, fleet, now)
    cap.timer("check_open_bottles")
    found.append(volume_of("check dispatch (timer)", cap.items()))
    return found


def _report_runs(cap: Capture, fleet: _Fleet, now: list[datetime]) -> list[UnitVolume]:
    """A run of the actions partition holding the HTTP bottle after PAGE_SIZE new changes (a page), and after three
    times as many (three pages): the difference is what a page more sends."""
    partition = Partition(ACTIONS_FEED, bucket_of("bottle-http") * get_settings().reports_partitions // BUCKETS,
                          get_settings().reports_partitions)  # fmt: skip
    runs = []
    for pages in (1, 3):
        base = now[0] - timedelta(minutes=10)
        for n in range(PAGE_SIZE * pages):
            kind = "opened" if n % 2 == 0 else "closed"
            assert fleet.post("bottle-http", _event(kind, base + timedelta(seconds=n + pages * 100))) == 202
        now[0] += timedelta(minutes=1)
        cap.items()
        cap.queue("aggregate_report_partition", json.dumps(partition.message()))
        runs.append(volume_of(f"report run, {pages} page{'s' if pages > 1 else ''}", cap.items()))
    return [*runs, _difference("a report page more", runs[1], runs[0], 2)]


def _difference(unit: str, more: UnitVolume, less: UnitVolume, per: int) -> UnitVolume:
    """What `per` units of something add: `more` minus `less`, per unit."""
    return UnitVolume(
        unit,
        round((more.requests - less.requests) / per),
        round((more.traces - less.traces) / per),
        round((more.sampled_bytes - less.sampled_bytes) / per),
        round((more.always_items - less.always_items) / per),
        round((more.always_bytes - less.always_bytes) / per),
        round((more.metric_points - less.metric_points) / per),
        round((more.metric_bytes - less.metric_bytes) / per),
    )


def measured(tables: list[Table]) -> dict[str, UnitVolume] | None:
    """Each unit's volume from this benchmark's table among `tables` (a suite run's), or None."""
    for table in tables:
        if table.title.startswith(TITLE):
            numbers = [[int(cell.replace(",", "")) for cell in row[1:]] for row in table.rows]
            return {row[0]: UnitVolume(row[0], *values) for row, values in zip(table.rows, numbers, strict=True)}
    return None


def run() -> str:
    """Measure on a fresh in-process store and print the table."""
    with secantus_store():
        host = LocalHost.load()
        units = measure(host, utc_now().replace(second=0, microsecond=0))
    return print_table(TITLE, [row(unit) for unit in units], HEADER)


if __name__ == "__main__":
    run()
