"""Property: the reports are a function of the source, whatever the change feed and the tally do.

Any history of events and reassignments, with the actions' changes delivered after the writes that made them,
but duplicated, reordered and split into any pages (some aggregated while the history is still being written,
some replayed later), and heartbeat tally passes at any moments (some cut short and carried on later), gives
exactly the reports of a from-scratch rebuild of the final source, once the tally has counted every hour."""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import mongomock
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.bottles.provisioning import provision
from shared.bottles.spec import BottleSpec
from shared.feeds.sources import Change
from shared.ingestion.receive import receive
from shared.instants import day_of, set_clock
from shared.reports.aggregation import Stamper, refresh_hourly
from shared.reports.rebuild import rebuild
from shared.settings import Settings
from shared.store import schema
from shared.store.retries import RetryPolicy
from shared.store.setup import ensure_store
from tests.report_client import stored_reports
from tests.tally_runner import TallyPartition
from tools.report_truth import reported_totals, source_totals

START = datetime(2026, 11, 20, 6, tzinfo=UTC)  # the server clock when the history begins
STEP = timedelta(minutes=25)  # server time between two operations
BOTTLES = ("b0", "b1", "b2")
USERS = ("u0", "u1", "u2")
POLICY = RetryPolicy(max_retries=0, base_ms=1)
# A heartbeat window (24 hours) longer than any history here, so nothing leaves it; tally pages of one user (so
# a pass cut short stops between any two); every pass rolls its hours' days up.
SETTINGS = Settings(reports_page_size=1, daily_rollup_hours=1)
REBUILD_SETTINGS = SETTINGS.model_copy(update={"reports_page_size": 100})

event = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["heartbeat", "heartbeat", "opened", "closed"]),
        "minutes_before": st.integers(0, 240),  # 0: live; more: buffered on the device, uploaded late
        "pills_taken": st.integers(0, 3),
    }
)
operation = st.one_of(
    st.tuples(st.just("events"), st.sampled_from(BOTTLES), st.lists(event, min_size=1, max_size=6)),
    st.tuples(st.just("reassign"), st.sampled_from(BOTTLES), st.sampled_from(USERS)),
)


def device_event(spec: dict[str, Any], server_now: datetime) -> dict[str, Any]:
    at = (server_now - timedelta(minutes=spec["minutes_before"])).isoformat()
    if spec["kind"] == "heartbeat":
        return {"type": "heartbeat", "time": at}
    body = {"type": spec["kind"], "time": at, "number_of_pills": 30, "mass_of_contents": 15.0}
    return body | ({"pills_taken": spec["pills_taken"]} if spec["kind"] == "closed" else {})


class History:
    """Writes a history into a fresh store and keeps the changes each write made, as a feed would carry them."""

    def __init__(self) -> None:
        self.db: Any = mongomock.MongoClient(tz_aware=True)["property"]
        ensure_store(self.db, SETTINGS, on_cosmos=False)
        self.keys = {b: self._provision(b, f"u{i % 2}", START) for i, b in enumerate(BOTTLES)}

    def _provision(self, bottle_id: str, user_id: str, now: datetime) -> str:
        spec = BottleSpec(user_id=user_id, medication=f"med-{bottle_id}", schedule={"every_hours": 12})
        return provision(self.db, bottle_id, spec, rotate_key=False, now=now, settings=SETTINGS).device_key or ""

    def apply(self, op: tuple[Any, ...], server_now: datetime) -> list[Change]:
        kind, bottle_id, detail = op
        if kind == "reassign":
            self._provision(bottle_id, detail, server_now)
            return []
        # One event per type and instant: a device's event without an id is its type at its time, so two of
        # them with other content in one request are refused (400) and store nothing.
        unique = list({(e["kind"], e["minutes_before"]): e for e in reversed(detail)}.values())[::-1]
        body = json.dumps({"events": [device_event(e, server_now) for e in unique]}).encode()
        receive(self.db, bottle_id, self.keys[bottle_id], body, now=server_now, settings=SETTINGS)
        actions = self.db[schema.BOTTLE_ACTIONS].find({"bottle_id": bottle_id, "received_at": server_now})
        return [Change(schema.BOTTLE_ACTIONS, a["_id"], a) for a in actions]


Written = tuple[Change, datetime]  # a change and when the write that made it was received


def aggregate(db: Any, page: list[Written], stamper: Stamper, now: datetime) -> None:
    """What the actions' consumer does with a page: the hourly recompute (and the closed days again)."""
    changes = [change for change, _ in page]
    refresh_hourly(db, changes, stamp=stamper.next(), policy=POLICY, rolled_up_before=day_of(now))


def take_page(data: st.DataObject, pending: list[Written], delivered: list[Written], least: int = 0) -> list[Written]:
    """Some pending changes (in any order), maybe with replays of delivered ones; removes them from pending."""
    order = data.draw(st.permutations(range(len(pending))))
    size = data.draw(st.integers(min(least, len(pending)), len(pending)))
    chosen = sorted(order[:size], reverse=True)
    page = [pending.pop(i) for i in chosen]
    if delivered:
        page += data.draw(st.lists(st.sampled_from(delivered), max_size=3))
    return data.draw(st.permutations(page))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations=st.lists(operation, min_size=1, max_size=10), data=st.data())
def test_any_delivery_of_the_changes_gives_the_reports_of_a_rebuild_from_scratch(
    operations: list[tuple[Any, ...]], data: st.DataObject
) -> None:
    # mongomock expires documents by the server clock (tests/conftest.py): the history's, not the real one, by
    # which its actions and hours would have expired once the real date passed START + 60 days.
    set_clock(lambda: START + STEP * (len(operations) + 1))
    try:
        replay(operations, data)
    finally:
        set_clock(None)


def replay(operations: list[tuple[Any, ...]], data: st.DataObject) -> None:
    history = History()
    tally = TallyPartition(history.db, SETTINGS)
    stamper = Stamper(START)
    pending: list[Written] = []
    delivered: list[Written] = []
    server_now = START
    for i, op in enumerate(operations):
        server_now = START + STEP * (i + 1)
        stamper = Stamper(max(server_now, stamper.next()))
        written = [(change, server_now) for change in history.apply(op, server_now)]
        pending += written * data.draw(st.integers(1, 2), label="delivered times")
        if pending and data.draw(st.booleans(), label="aggregate now"):
            page = take_page(data, pending, delivered)
            aggregate(history.db, page, stamper, server_now)
            delivered += page
        if data.draw(st.booleans(), label="tally now"):
            tally.run(server_now, pages=data.draw(st.one_of(st.none(), st.integers(0, 3)), label="tally pages"))
    while pending:  # the feed delivers everything eventually, in pages of any size
        page = take_page(data, pending, delivered, least=1)
        aggregate(history.db, page, stamper, server_now)
        delivered += page
    end = START + STEP * (len(operations) + 1) + timedelta(days=1)
    while not tally.run(end):  # the tally counts every hour eventually
        pass
    consumed = stored_reports(history.db)

    for name in (schema.USER_HOURLY_REPORTS, schema.USER_DAILY_REPORTS):
        history.db[name].delete_many({})
    # The reference, in pages of a hundred: a rebuild's reports do not depend on its page size
    # (tests/reports/test_rebuild.py), and pages of one source document each were a fifth of an example.
    rebuild(history.db, start=START - timedelta(days=1), end=end, user_id=None, now=end, settings=REBUILD_SETTINGS)

    assert consumed == stored_reports(history.db)
    assert reported_totals(history.db) == source_totals(history.db)
