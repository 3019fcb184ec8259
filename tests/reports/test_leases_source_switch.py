"""CHANGE_SOURCE switched on Cosmos DB moves the actions feed between leases of two kinds (shared/feeds/layouts.py):
feed ranges (change streams, one per physical partition) and bucket ranges (polling). A lease of the other kind
read the whole key space, so it retires only once the new layout's leases cover the whole space and have run;
while a token reply leaves a range out, the bucket lease stays, the only one that knows where that range was."""

import json
from datetime import datetime, timedelta
from typing import Any

from shared.consumers.plugged import dispatch, partition_of, process_partition
from shared.feeds.partitions import Partition
from shared.instants import utc_now
from shared.reports.feeds import ACTIONS_FEED
from shared.settings import Settings
from shared.store import schema
from tests.cosmos_fakes import EPK_TOP, QuietStream
from tests.reports.feeds import ReplyLeavingOut

MINUTE = timedelta(minutes=1)
STREAMS = Settings(reports_partitions=1, change_source="change_stream")
POLLING = Settings(reports_partitions=1, change_source="polling")
BUCKET_LEASE = Partition(ACTIONS_FEED, 0, 1).lease_id


def round_at(db: Any, now: datetime, settings: Settings) -> list[Partition]:
    """A dispatch on Cosmos DB and a run of each actions partition it sent (nothing new to read)."""
    sent: list[str] = []
    dispatch(db, now=now, settings=settings, send=sent.extend, on_cosmos=True)
    partitions = [p for p in (partition_of(json.loads(m)) for m in sent) if p.feed == ACTIONS_FEED]
    for partition in partitions:
        assert process_partition(db, partition, now=now, settings=settings, watch=QuietStream).claimed
    return partitions


def live(db: Any) -> dict[str, dict[str, Any]]:
    return {doc["_id"]: doc for doc in db[schema.LEASES].find({"feed": ACTIONS_FEED.key, "retired_at": None})}


def test_the_other_kinds_leases_retire_once_the_new_source_has_run_over_the_whole_key_space(mock_db: Any) -> None:
    cosmos = ReplyLeavingOut(mock_db, partitions=2)
    now = utc_now()
    ranges = {p.lease_id for p in round_at(cosmos, now, STREAMS)}
    assert set(live(mock_db)) == ranges

    round_at(cosmos, now + MINUTE, POLLING)  # one bucket lease over the whole space, started from the two
    assert set(live(mock_db)) == ranges | {BUCKET_LEASE}
    round_at(cosmos, now + 2 * MINUTE, POLLING)
    assert set(live(mock_db)) == {BUCKET_LEASE}

    round_at(cosmos, now + 3 * MINUTE, STREAMS)  # back: the two ranges read again, from the bucket lease's position
    round_at(cosmos, now + 4 * MINUTE, STREAMS)
    assert set(live(mock_db)) == ranges


def test_a_bucket_lease_stays_while_the_token_reply_leaves_a_range_out(mock_db: Any) -> None:
    cosmos = ReplyLeavingOut(mock_db, partitions=2)
    now = utc_now()
    round_at(cosmos, now, POLLING)
    cosmos.left_out = {(EPK_TOP // 2, EPK_TOP)}

    read = round_at(cosmos, now + MINUTE, STREAMS)
    round_at(cosmos, now + 2 * MINUTE, STREAMS)

    assert [p.feed_range for p in read] == [("", "2000")]
    assert set(live(mock_db)) == {BUCKET_LEASE, read[0].lease_id}  # it alone knows where ("2000", "FF") was
