"""What a split costs the report consumer on the Cosmos-faithful store (tools/cosmos_store): each child of a split
partition reads its own range from where its parent stopped, so it re-reads at most what its range received since
the parent's last checkpoint (plus the overlap), counted at the wire as the documents the store returned to the
feed's reads (its change streams and polling queries), not what aggregation reads to recompute."""

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from pymongo import monitoring

from shared.consumers.plugged import dispatch, partition_of, process_partition
from shared.feeds.partitions import Partition
from shared.instants import set_clock, utc_now
from shared.reports.feeds import ACTIONS_FEED
from shared.settings import get_settings
from shared.store import schema
from shared.store.client import create_client
from tests.api import opened, post_events, provisioned
from tests.integration.cosmos_proxy import app_database
from tests.report_client import set_setting
from tools.cosmos_store.partitions import effective_key, parse_bound
from tools.cosmos_store.proxy import CosmosProxy

pytestmark = pytest.mark.integration
HOUR = timedelta(hours=1)


class FeedReads(monitoring.CommandListener):
    """Counts the `bottle_actions` documents the store returned to the feed's reads: change streams (the
    aggregate and its getMores) and polling by `received_at` (the find and its getMores)."""

    def __init__(self) -> None:
        self.returned = 0
        self._feed_cursors: set[int] = set()
        self._started: dict[int, bool] = {}

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        command = event.command
        name = event.command_name
        feed = False
        if name == "aggregate" and command.get("aggregate") == schema.BOTTLE_ACTIONS:
            pipeline = command.get("pipeline") or [{}]
            feed = "$changeStream" in pipeline[0]
        elif name == "find" and command.get("find") == schema.BOTTLE_ACTIONS:
            feed = ACTIONS_FEED.time_field in (command.get("filter") or {})
        elif name == "getMore":
            feed = int(command["getMore"]) in self._feed_cursors
        self._started[event.request_id] = feed

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        if not self._started.pop(event.request_id, False):
            return
        cursor = event.reply.get("cursor", {})
        self.returned += len(cursor.get("firstBatch", cursor.get("nextBatch", [])))
        if cursor.get("id"):
            self._feed_cursors.add(int(cursor["id"]))

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self._started.pop(event.request_id, None)


@pytest.fixture
def cosmos_db(cosmos: CosmosProxy, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    yield from app_database(cosmos, monkeypatch)


def actions_partitions(db: Any, now: datetime) -> list[Partition]:
    messages: list[str] = []
    dispatch(db, now=now, settings=get_settings(), send=messages.extend, on_cosmos=True)
    found = [partition_of(json.loads(m)) for m in messages]
    return [p for p in found if p.feed == ACTIONS_FEED]


def holds(partition: Partition, bottle_id: str) -> bool:
    assert partition.feed_range is not None
    low, high = (parse_bound(bound) for bound in partition.feed_range)
    return low <= effective_key(bottle_id) < high


def test_a_split_child_rereads_no_more_than_its_range_received_since_its_parents_checkpoint(
    cosmos: CosmosProxy,
    cosmos_db: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    reads = FeedReads()
    client = create_client(cosmos.uri, event_listeners=[reads])
    db = client[cosmos_db.name]
    now = utc_now()
    bottles = [f"bottle-{n}" for n in range(12)]
    keys = {bottle: provisioned(bottle) for bottle in bottles}

    def written(moment: datetime) -> None:  # an action of every bottle, received at `moment`
        for bottle in bottles:
            set_clock(lambda: moment)
            try:
                assert post_events(bottle, keys[bottle], opened(moment)).status == 202
            finally:
                set_clock(None)

    written(now - 5 * HOUR)
    [parent] = actions_partitions(db, now - 4 * HOUR)
    parent_run = process_partition(db, parent, now=now - 4 * HOUR, settings=get_settings())
    assert parent_run.caught_up
    written(now - 3 * HOUR)  # after the parent's last checkpoint
    cosmos.split(db.name, schema.BOTTLE_ACTIONS)
    written(now - 2 * HOUR)

    children = actions_partitions(db, now - HOUR)
    assert len(children) == 2
    overlap = timedelta(seconds=get_settings().reports_poll_overlap_seconds)
    since = parent_run.checkpoint_time
    assert since is not None
    stored = list(cosmos_db[schema.BOTTLE_ACTIONS].find({}, {"bottle_id": 1, "received_at": 1}))
    for child in children:
        bound = sum(1 for d in stored if holds(child, d["bottle_id"]) and d["received_at"] >= since - overlap)
        new = sum(1 for d in stored if holds(child, d["bottle_id"]) and d["received_at"] > since)
        reads.returned = 0

        run = process_partition(db, child, now=now - HOUR, settings=get_settings())

        assert run.caught_up
        assert new <= run.changes  # everything its range received since the parent stopped
        assert reads.returned <= bound, (child.feed_range, reads.returned, bound)
    client.close()
