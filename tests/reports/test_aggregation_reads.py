"""What a page's recompute reads from the sources (shared/reports/aggregation.py: load_actions, _runs,
load_heartbeat_documents): every bucket it names, in as few single-partition queries as the buckets allow, and
nothing else."""

from datetime import timedelta
from typing import Any

import pytest

from shared.devices.heartbeat_document import KEY, OWNERS, RING, RING_TIME
from shared.feeds.sources import Change
from shared.instants import hour_of
from shared.reports import aggregation
from shared.reports.aggregation import CLAUSES_PER_QUERY, refresh_hourly
from shared.store import schema
from shared.store.retries import RetryPolicy
from shared.store.retries import find_all as real_find_all
from tests.api import ago, opened, post_events, provisioned
from tests.reports.documents import AFTER_DAY, at, heartbeat_doc

POLICY = RetryPolicy(max_retries=0, base_ms=1)
HOUR = timedelta(hours=1)


def test_a_bottles_adjacent_hours_are_read_as_one_range_and_the_hours_between_its_runs_not_at_all(mock_db, monkeypatch):
    """A page names hours h, h+1 and h+3 of a bottle that has an event in each of h..h+3: two range queries,
    [h, h+2) and [h+3, h+4), and the event of h+2 (not named) is not read."""
    key = provisioned("bottle-1")
    first = hour_of(ago(hours=6))
    for i in range(4):
        assert post_events("bottle-1", key, opened(first + i * HOUR, event_id=f"e{i}")).status == 202
    queries: list[Any] = []

    def recorded(collection: Any, query: Any, policy: Any, projection: Any = None) -> Any:
        queries.append(query)
        return real_find_all(collection, query, policy, projection)

    monkeypatch.setattr(aggregation, "find_all", recorded)
    named = {("bottle-1", first + i * HOUR) for i in (0, 1, 3)}

    found = aggregation.load_actions(mock_db, named, POLICY)

    assert set(found) == named
    assert all(len(actions) == 1 for actions in found.values())
    ranges = sorted((q["time"]["$gte"], q["time"]["$lt"]) for q in queries)
    assert ranges == [(first, first + 2 * HOUR), (first + 3 * HOUR, first + 4 * HOUR)]


@pytest.mark.own_clock(AFTER_DAY)
def test_a_page_of_more_bottles_than_one_query_names_counts_the_heartbeats_of_every_one(mock_db):
    """A page touching more heartbeat documents than one `$in` query names reads them in several queries: every
    bottle's hour is counted, those of the first query's bottles too."""
    bottles = [f"bottle-{i:03}" for i in range(CLAUSES_PER_QUERY + 1)]
    docs = [
        heartbeat_doc([(at(10, 3), False)], user_id=f"user-{b}", owners=[], written=at(12)) | {"_id": b, "bottle_id": b}
        for b in bottles
    ]
    mock_db[schema.BOTTLE_HEARTBEATS].insert_many(docs)

    changes = [Change(schema.BOTTLE_HEARTBEATS, b, None) for b in bottles]
    refresh_hourly(mock_db, changes, stamp=at(12, 5), policy=POLICY)

    reports = list(mock_db[schema.USER_HOURLY_REPORTS].find({"hour": at(10)}))
    assert sorted(r["user_id"] for r in reports) == [f"user-{b}" for b in bottles]
    assert all(r["heartbeats"] == 1 for r in reports)


def test_a_recompute_reads_the_named_heartbeat_documents_and_of_them_only_what_it_counts(mock_db):
    """The heartbeat documents of the bottles a page names, no other bottle's; and of each only the fields the
    counts need (not, say, the device key's digest): a smaller reply for every document of every page."""
    for b in ("bottle-1", "bottle-2"):
        doc = heartbeat_doc([(at(10, 3), False)], user_id="user-a", owners=[], written=at(12))
        mock_db[schema.BOTTLE_HEARTBEATS].insert_one(doc | {"_id": b, "bottle_id": b, KEY: b"digest"})

    found = aggregation.load_heartbeat_documents(mock_db, {"bottle-1"}, POLICY)

    assert [d["_id"] for d in found] == ["bottle-1"]
    assert KEY not in found[0]
    assert set(found[0]) == {"_id", "bottle_id", "user_id", "medication", OWNERS, RING, RING_TIME}


def test_a_recompute_reads_of_each_action_only_what_it_counts(mock_db):
    key = provisioned("bottle-1")
    hour = hour_of(ago(hours=3))
    assert post_events("bottle-1", key, opened(hour, event_id="e1")).status == 202
    stored = mock_db[schema.BOTTLE_ACTIONS].find_one({"bottle_id": "bottle-1"})

    found = aggregation.load_actions(mock_db, {("bottle-1", hour)}, POLICY)

    [action] = found[("bottle-1", hour)]
    assert set(stored) - set(action)  # the stored action has fields the counts do not read
    assert set(action) <= {"_id", *aggregation._ACTION_FIELDS}
