"""The report feeds through Cosmos DB's partition splits, with a fake `GetChangeStreamTokens` that answers as the
documentation describes (a token per physical partition, each naming its feed range, in no promised order):
leases are keyed by feed range, a child starts from its parent's position, a replaced lease retires once its
children have run and then takes part in nothing, and a reply without tokens fails loudly."""

import base64
import json
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, ClassVar

import pytest
from pymongo.errors import OperationFailure

from shared.consumers import plugged
from shared.consumers.plugged import dispatch, process_partition
from shared.feeds.partitions import NoPartitionTokens, Partition
from shared.instants import set_clock, utc_now
from shared.reports.feeds import ACTIONS_FEED
from shared.settings import get_settings
from shared.store import schema
from shared.store.cosmos import feed_range
from shared.telemetry import metrics
from tests.api import opened, post_events, provisioned
from tests.cosmos_fakes import EPK_TOP, CosmosTokens, QuietStream, composite_token, cosmos_token, epk
from tests.report_client import set_setting
from tests.reports.feeds import ReplyLeavingOut, actions_leases, checkpoint_all, dispatch_run, dispatched

MINUTE = timedelta(minutes=1)
DAY = timedelta(days=1)


def test_the_documented_sample_token_names_its_feed_range() -> None:
    """learn.microsoft.com/azure/cosmos-db/mongodb/custom-commands, "Parallelizing change streams": "The following
    command returns one or more change stream resume tokens - each one corresponding to data from a single physical
    shard/partition", and its sample `resumeAfter: { "_data" : BinData(0,"eyJWIjoyLCJSaWQiOiJQeFVhQUxuMFNLRT0i...")`.
    Its JSON (the sample's tail is garbled on the page; its head, up to the range, reads):"""
    head = "eyJWIjoyLCJSaWQiOiJQeFVhQUxuMFNLRT0iLCJDb250aW51YXRpb24iOlt7IkZlZWRSYW5nZSI6eyJ0eXBlIjoiRWZmZWN0aXZlIFBh"
    head += "cnRpdGlvbiBLZXkgUmFuZ2UiLCJ2YWx1ZSI6eyJtaW4iOiIiLCJtYXgiOiJGRiJ9fQ=="
    decoded = base64.b64decode(head)
    assert decoded.startswith(b'{"V":2,"Rid":"PxUaALn0SKE=","Continuation":[{"FeedRange":')
    whole = decoded + b',"State":{"type":"continuation","value":"\\"1844\\""}}]}'

    assert feed_range({"_data": whole, "_kind": 1}) == ("", "FF")  # BinData reaches pymongo as bytes
    assert feed_range({"_data": base64.b64encode(whole).decode()}) == ("", "FF")
    with pytest.raises(ValueError, match="without a readable feed range"):
        feed_range({"_data": "bottle_actions-p0-of-3"})


def test_leases_are_keyed_by_feed_range_so_a_new_token_order_loses_and_adds_nothing(mock_db: Any) -> None:
    cosmos = CosmosTokens(mock_db, partitions=4)
    now = utc_now()
    first = dispatched(cosmos, now)
    checkpoint_all(mock_db, now - MINUTE)
    leases_before = actions_leases(mock_db)

    for later in range(1, 6):  # five more dispatches, each reply in another order
        dispatched(cosmos, now + later * 10 * MINUTE)

    assert len({p.lease_id for p in first}) == 4
    assert actions_leases(mock_db).keys() == leases_before.keys()
    assert {k: v["checkpoint_time"] for k, v in actions_leases(mock_db).items()} == dict.fromkeys(
        leases_before, now - MINUTE
    )


def test_a_split_partitions_children_start_from_its_position_and_it_retires_once_they_ran(mock_db: Any) -> None:
    cosmos = CosmosTokens(mock_db, partitions=2)
    now = utc_now()
    dispatched(cosmos, now)
    low, high = sorted(actions_leases(mock_db))
    mock_db[schema.LEASES].update_one({"range": list(low)}, {"$set": {"checkpoint_time": now - 5 * MINUTE}})
    mock_db[schema.LEASES].update_one({"range": list(high)}, {"$set": {"checkpoint_time": now - MINUTE}})

    cosmos.split(0)
    dispatched(cosmos, now)

    live = actions_leases(mock_db)
    children = [r for r in live if r not in (low, high)]
    assert sorted(children) == [(low[0], "1000"), ("1000", low[1])]
    assert {live[c]["checkpoint_time"] for c in children} == {now - 5 * MINUTE}  # the parent's position
    assert live[high]["checkpoint_time"] == now - MINUTE  # the sibling is untouched
    assert low in live  # the parent stays live until both children have run

    for child in children:  # each child's worker runs once (nothing to read) and releases its lease
        run = process_partition(cosmos, partition_of(child), now=now, settings=polling(), watch=None)
        assert run.claimed
    dispatched(cosmos, now + MINUTE)

    assert low not in actions_leases(mock_db)
    assert low in actions_leases(mock_db, live=False)
    parent = Partition(ACTIONS_FEED, 0, 2, cosmos=True, feed_range=low)
    assert not process_partition(cosmos, parent, now=now + MINUTE, settings=polling()).claimed  # a late message


def test_a_third_layout_starts_from_the_second_not_from_the_frozen_first(mock_db: Any) -> None:
    """The audit's case: layout 2 froze at t0 when the partition split; layout 3 ran for 30 days; layout 4 (the next
    split) must start from layout 3's position. Starting from t0 would have a new lease poll 30 days of writes."""
    cosmos = CosmosTokens(mock_db, partitions=1)
    t0 = utc_now() - 30 * DAY
    dispatched(cosmos, t0)
    cosmos.split(0)  # layout 2 -> 3
    dispatched(cosmos, t0)
    for span in actions_leases(mock_db):
        if span != ("", "FF"):
            process_partition(cosmos, partition_of(span), now=t0, settings=polling())
    dispatched(cosmos, t0 + MINUTE)
    checkpoint_all(mock_db, t0 + 30 * DAY)  # layout 3 ran for 30 days

    cosmos.split(1)  # layout 3 -> 4
    dispatched(cosmos, t0 + 30 * DAY)

    live = actions_leases(mock_db)
    assert ("", "FF") not in live  # the first layout's lease retired
    assert len(live) == 4  # the split child, and the three of layout 4
    assert {doc["checkpoint_time"] for doc in live.values()} == {t0 + 30 * DAY}


def test_a_child_rereads_only_what_was_written_since_its_parents_last_checkpoint(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cost of a split, bounded: a child recovers by polling from its parent's checkpoint time less the
    overlap, so it reads what arrived since then (on Cosmos DB's polling, from every partition: the app cannot
    compute effective partition keys), never the history before it; then carries on with its change stream."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    cosmos = CosmosTokens(mock_db, partitions=1)
    now = utc_now()
    written = [now - 3 * DAY + i * 6 * 60 * MINUTE for i in range(12)]  # an action every 6 hours for 3 days
    for i, at in enumerate(written):
        set_clock(stopped_at(at))
        try:
            assert post_events(f"bottle-{i}", provisioned(f"bottle-{i}"), opened(at)).status == 202
        finally:
            set_clock(None)
    dispatched(cosmos, now)
    parent_checkpoint = written[8] + 60 * MINUTE  # the parent had aggregated the first 9 actions
    checkpoint_all(mock_db, parent_checkpoint)

    cosmos.split(0)
    children = [s for s in (p.feed_range for p in dispatched(cosmos, now)) if s != ("", "FF")]

    overlap = timedelta(seconds=get_settings().reports_poll_overlap_seconds)
    since_parent = sum(1 for at in written if at >= parent_checkpoint - overlap)
    assert len(children) == 2
    for span in children:
        assert span is not None
        run = process_partition(cosmos, partition_of(span), now=now, settings=get_settings(), watch=QuietStream)
        assert run.recovered
        assert run.caught_up
        assert run.changes == since_parent == 3  # not the 12 of the whole history


def test_a_reply_without_tokens_fails_the_dispatch_loudly_after_sending_the_tally(
    mock_db: Any, caplog: pytest.LogCaptureFixture
) -> None:
    class NoTokens(CosmosTokens):
        def command(self, command: Any) -> dict[str, Any]:
            return {"ok": 1}  # resumeAfterTokens missing

    messages: list[str] = []
    with caplog.at_level(logging.ERROR), pytest.raises(NoPartitionTokens, match="no resumeAfterTokens"):
        dispatch(NoTokens(mock_db, 2), now=utc_now(), settings=get_settings(), send=messages.extend, on_cosmos=True)

    sent = [json.loads(m) for m in messages]
    assert sent
    assert all(m["feed"] == "heartbeat_tally" for m in sent)  # the tally still runs
    assert "bottle_actions is not dispatched" in caplog.text
    assert mock_db[schema.LEASES].count_documents({"feed": ACTIONS_FEED.key}) == 0  # no bucket-filtered fallback


def test_a_work_message_for_a_cosmos_partition_must_name_its_feed_range() -> None:
    with pytest.raises(ValueError, match="without its feed range"):
        plugged.partition_of({"feed": ACTIONS_FEED.key, "partition": 0, "of": 2, "cosmos": True})
    message = Partition(ACTIONS_FEED, 1, 2, cosmos=True, feed_range=("2000", "FF")).message()
    assert plugged.partition_of(message).lease_id == "reports:bottle_actions:cosmos:2000-FF"


def stopped_at(moment: datetime) -> Callable[[], datetime]:
    return lambda: moment


def partition_of(span: tuple[str, str]) -> Partition:
    return Partition(ACTIONS_FEED, 0, 1, cosmos=True, feed_range=span)


def polling() -> Any:
    return get_settings().model_copy(update={"change_source": "polling"})


def test_a_partition_count_changed_back_revives_the_retired_leases_from_their_successors(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """REPORTS_PARTITIONS 4 -> 8 -> 4: the first layout's leases were retired once the second had run; when their
    ranges come back they must be read again, from the second layout's position, not left retired (never claimed,
    the feed stalled for good) nor resumed from their own frozen checkpoints."""
    settings = polling()
    now = utc_now()
    send: list[str] = []
    dispatch(mock_db, now=now, settings=settings, send=send.extend)
    mock_db[schema.LEASES].update_many({}, {"$set": {"checkpoint_time": now - DAY}})  # the first layout's position
    set_setting(monkeypatch, "REPORTS_PARTITIONS", "8")
    eight = get_settings().model_copy(update={"change_source": "polling"})
    dispatch(mock_db, now=now, settings=eight, send=send.extend)
    for i in range(8):
        assert process_partition(mock_db, Partition(ACTIONS_FEED, i, 8), now=now, settings=eight).claimed
    dispatch(mock_db, now=now + MINUTE, settings=eight, send=send.extend)  # the first layout retires
    assert mock_db[schema.LEASES].count_documents({"of": 4, "feed": ACTIONS_FEED.key, "retired_at": None}) == 0
    mock_db[schema.LEASES].update_many({"of": 8}, {"$set": {"checkpoint_time": now}})

    set_setting(monkeypatch, "REPORTS_PARTITIONS", "4")
    four = get_settings().model_copy(update={"change_source": "polling"})
    made = dispatch(mock_db, now=now + 2 * MINUTE, settings=four, send=send.extend).leases_created

    assert made == 4
    for i in range(4):
        lease = mock_db[schema.LEASES].find_one({"_id": Partition(ACTIONS_FEED, i, 4).lease_id})
        assert lease["retired_at"] is None
        assert lease["checkpoint_time"] == now  # the 8-layout's position, not the frozen day-old one
        run = process_partition(mock_db, Partition(ACTIONS_FEED, i, 4), now=now + 2 * MINUTE, settings=four)
        assert run.claimed


def test_a_reply_leaving_a_range_out_is_an_error_counted_and_the_range_s_lease_stays_with_its_lag(
    mock_db: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reply without the token of one split child: its parent was retired once the other child ran, and nothing
    read that range again, nor said so (its lag was nobody's)."""
    counted: list[tuple[str, str]] = []
    monkeypatch.setattr(metrics, "feed_ranges_uncovered", lambda feed, problem: counted.append((feed, problem)))
    cosmos = ReplyLeavingOut(mock_db, partitions=2)
    now = utc_now()
    dispatch_run(cosmos, now)
    checkpoint_all(mock_db, now - MINUTE)
    cosmos.split(0)  # ("", "2000") -> ("", "1000"), ("1000", "2000")
    cosmos.left_out = {(0x1000, 0x2000)}
    parent = "reports:bottle_actions:cosmos:-2000"

    with caplog.at_level(logging.ERROR):
        dispatch_run(cosmos, now + 10 * MINUTE)
        mock_db[schema.LEASES].update_one(  # the child that has a token ran
            {"_id": "reports:bottle_actions:cosmos:-1000"}, {"$set": {"updated_at": now + 11 * MINUTE}}
        )
        later = dispatch_run(cosmos, now + 20 * MINUTE)

    assert parent in {doc["_id"] for doc in actions_leases(mock_db).values()}  # kept: it alone knows the range
    assert "no token for the feed ranges ['1000', '2000')" in caplog.text
    assert parent in caplog.text
    assert counted == [(ACTIONS_FEED.key, "gap")] * 2
    assert later.lag_seconds[ACTIONS_FEED.key] == (21 * MINUTE).total_seconds()  # the parent's checkpoint, unread

    cosmos.left_out = set()  # the reply is whole again: the missing child starts from its parent
    dispatch_run(cosmos, now + 30 * MINUTE)
    child = actions_leases(mock_db)[("1000", "2000")]
    assert child["checkpoint_time"] == now - MINUTE
    mock_db[schema.LEASES].update_one({"_id": child["_id"]}, {"$set": {"updated_at": now + 31 * MINUTE}})
    dispatch_run(cosmos, now + 40 * MINUTE)
    assert parent not in {doc["_id"] for doc in actions_leases(mock_db).values()}
    assert len(counted) == 2


def test_a_reply_naming_a_range_twice_is_an_error_counted(
    mock_db: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted: list[tuple[str, str]] = []
    monkeypatch.setattr(metrics, "feed_ranges_uncovered", lambda feed, problem: counted.append((feed, problem)))
    cosmos = ReplyLeavingOut(mock_db, partitions=2)
    cosmos.extra = [(0x1000, 0x3000)]

    with caplog.at_level(logging.ERROR):
        dispatch_run(cosmos, utc_now())

    assert "overlap at ['1000', '2000'), ['2000', '3000')" in caplog.text
    assert counted == [(ACTIONS_FEED.key, "overlap")]


def state_of(token: dict[str, Any]) -> Any:
    return json.loads(token["_data"])["Continuation"][0]["State"]


class RefusingInherited(QuietStream):
    """A stream that opens on any token and refuses, at its first read, one holding the parent's position
    "parent" (a store that checks a token only then)."""

    def next_change(self) -> None:
        if state_of(self.resume_token)["value"] == '"parent"':
            raise OperationFailure("PartitionKeyRangeGone", code=280)


def test_a_split_child_starts_from_its_parents_token_narrowed_to_its_range_or_recovers_if_it_is_refused(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Cosmos DB's own change feed clients carry a parent's continuation on to its children: a child reads its own
    range from where its parent stopped, not every partition's writes since the parent's checkpoint time. A store
    that refuses that position at the first read leaves the child to recover from the checkpoint time next run."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    cosmos = CosmosTokens(mock_db, partitions=1)
    now = utc_now()
    dispatched(cosmos, now)
    parent_token = cosmos_token(0, EPK_TOP, position="parent")
    mock_db[schema.LEASES].update_one(
        {"range": ["", "FF"]}, {"$set": {"token": parent_token, "checkpoint_time": now - MINUTE}}
    )
    cosmos.split(0)

    children = [p for p in dispatched(cosmos, now) if p.feed_range != ("", "FF")]

    live = actions_leases(mock_db)
    assert len(children) == 2
    for child in children:
        inherited = live[child.span]["token"]
        assert feed_range(inherited) == child.feed_range
        assert state_of(inherited) == state_of(parent_token)
        assert live[child.span]["checkpoint_time"] == now - MINUTE

    with caplog.at_level(logging.WARNING):
        refused = process_partition(cosmos, children[0], now=now, settings=get_settings(), watch=RefusingInherited)
    assert (refused.caught_up, refused.recovered) == (False, False)
    assert "refused its saved position at its first read" in caplog.text
    lease = actions_leases(mock_db)[children[0].span]
    assert (lease["token"], lease["checkpoint_time"], lease["owner"]) == (None, now - MINUTE, None)

    again = process_partition(cosmos, children[0], now=now + MINUTE, settings=get_settings(), watch=RefusingInherited)
    assert (again.caught_up, again.recovered) == (True, True)


class OpenedAt(QuietStream):
    """A quiet stream that remembers the token each child's stream was opened at."""

    opened: ClassVar[dict[tuple[str, str], Any]] = {}

    def __init__(self, partition: Any, token: Any) -> None:
        super().__init__(partition, token)
        OpenedAt.opened[partition.span] = token


def test_a_split_child_takes_its_own_entry_of_a_parent_token_holding_one_per_child_and_each_child_says_how_it_starts(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The NoSQL SDKs keep a composite continuation across a split, one entry per range it left
    (Azure/azure-cosmos-dotnet-v3, FeedRangeCompositeContinuation: "FeedRangeContinuation using Composite
    Continuation Tokens and split proof. It uses a breath-first approach to transverse Composite Continuation
    Tokens."); https://learn.microsoft.com/azure/cosmos-db/nosql/change-feed-pull-model: "A continuation token is a
    string value that keeps of track of your FeedIterator's last processed changes and allows the FeedIterator to
    resume at this point later." The API for MongoDB documents its token's JSON only by its one-entry sample
    (custom-commands). A parent whose token holds an entry per child: each child starts from its own entry's
    position (narrowing the whole token to its range found no one entry holding it, and the child polled the whole
    collection from the checkpoint time); a child inside one entry's range starts from that entry narrowed. Each
    child logs which, and the dispatch counts them."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    cosmos = CosmosTokens(mock_db, partitions=1)
    now = utc_now()
    dispatched(cosmos, now)
    middle, quarter = EPK_TOP // 2, EPK_TOP // 4
    parent_token = composite_token([(0, middle, "left"), (middle, EPK_TOP, "right")])
    mock_db[schema.LEASES].update_one(
        {"range": ["", "FF"]}, {"$set": {"token": parent_token, "checkpoint_time": now - MINUTE}}
    )
    cosmos.split(0)  # [0, middle) and [middle, top): one entry each
    cosmos.split(0)  # [0, quarter) and [quarter, middle): inside the left entry
    messages: list[str] = []

    with caplog.at_level(logging.INFO, logger="shared.feeds.layouts"):
        run = dispatch(cosmos, now=now, settings=get_settings(), send=messages.extend, on_cosmos=True)

    live = actions_leases(mock_db)
    spans = {"left": (epk(0), epk(quarter)), "inner": (epk(quarter), epk(middle)), "right": (epk(middle), "FF")}
    starts = {name: (feed_range(live[span]["token"]), state_of(live[span]["token"])) for name, span in spans.items()}
    assert starts == {
        "left": (spans["left"], {"type": "continuation", "value": '"left"'}),
        "inner": (spans["inner"], {"type": "continuation", "value": '"left"'}),
        "right": (spans["right"], {"type": "continuation", "value": '"right"'}),
    }
    assert run.child_starts == {"narrowed": 2, "own_entry": 1}
    parent_id = "reports:bottle_actions:cosmos:-FF"
    assert sorted(r.getMessage() for r in caplog.records if "starts from" in r.getMessage()) == sorted(
        [
            f"reports: {partition_of(spans['left']).lease_id} starts from its parent {parent_id}'s token narrowed to "
            "its range",
            f"reports: {partition_of(spans['inner']).lease_id} starts from its parent {parent_id}'s token narrowed "
            "to its range",
            f"reports: {partition_of(spans['right']).lease_id} starts from its own entry of its parent {parent_id}'s "
            "token",
        ]
    )
    right = process_partition(cosmos, partition_of(spans["right"]), now=now, settings=get_settings(), watch=OpenedAt)
    assert (right.recovered, right.caught_up) == (False, True)  # read from its own position, nothing polled
    assert state_of(OpenedAt.opened[spans["right"]]) == {"type": "continuation", "value": '"right"'}


def test_a_merged_partition_recovers_by_time_and_says_so(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Two parents (a merge: https://learn.microsoft.com/azure/cosmos-db/merge) have two positions, and no token
    names both: the new range recovers from their oldest checkpoint time, polling the whole collection, and the
    dispatch logs and counts it."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    cosmos = CosmosTokens(mock_db, partitions=2)
    now = utc_now()
    dispatched(cosmos, now)
    for low, high in ((0, EPK_TOP // 2), (EPK_TOP // 2, EPK_TOP)):
        token = cosmos_token(low, high, position="parent")
        mock_db[schema.LEASES].update_one(
            {"range": [epk(low), epk(high)]}, {"$set": {"token": token, "checkpoint_time": now - MINUTE}}
        )
    cosmos.partitions = 1

    with caplog.at_level(logging.INFO, logger="shared.feeds.layouts"):
        run = dispatch(cosmos, now=now, settings=get_settings(), send=[].extend, on_cosmos=True)

    merged = actions_leases(mock_db)[("", "FF")]
    assert (merged["token"], merged["checkpoint_time"]) == (None, now - MINUTE)
    assert run.child_starts == {"by_time": 1}
    assert [r.getMessage() for r in caplog.records if "recovers by time" in r.getMessage()] == [
        "reports: reports:bottle_actions:cosmos:-FF recovers by time from its parents' (reports:bottle_actions:cosmos:"
        "-2000, reports:bottle_actions:cosmos:2000-FF) checkpoint less the overlap: no token of theirs holds its "
        "range, so it polls the whole collection from there"
    ]


def with_parent_token(db: Any, at: datetime) -> dict[str, Any]:
    """The one partition's lease holds a token at position "parent" and has checkpointed at `at`."""
    token = cosmos_token(0, EPK_TOP, position="parent")
    db[schema.LEASES].update_one({"range": ["", "FF"]}, {"$set": {"token": token, "checkpoint_time": at}})
    return token


def test_a_child_that_splits_again_before_it_ran_hands_its_parents_token_on_to_its_own_children(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dense splits (`./dev lifecycle --days 1`: four splits of bottle_actions in a day): a child's range can split
    again before any worker ran its lease, and its parent is still live then (a parent retires once all its
    children have run), so two live leases hold each grandchild's range. The grandchild starts from their token
    narrowed to its range and reads its own range on from there, as its parent would have; before, it took no
    token and recovered by polling every partition's writes since the checkpoint time (each of the four
    grandchildren re-read the whole collection's)."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    cosmos = CosmosTokens(mock_db, partitions=1)
    now = utc_now()
    dispatched(cosmos, now)
    parent_token = with_parent_token(mock_db, now - MINUTE)
    cosmos.split(0)
    dispatched(cosmos, now)  # the children's leases, which no worker runs before the next split
    cosmos.split(0)  # the lower child splits too

    grandchildren = [p for p in dispatched(cosmos, now + MINUTE) if p.span[1] <= "2000"]

    live = actions_leases(mock_db)
    assert sorted(p.span for p in grandchildren) == [("", "1000"), ("1000", "2000")]
    for grandchild in grandchildren:
        inherited = live[grandchild.span]["token"]
        assert feed_range(inherited) == grandchild.feed_range
        assert state_of(inherited) == state_of(parent_token)
        assert live[grandchild.span]["checkpoint_time"] == now - MINUTE
        run = process_partition(cosmos, grandchild, now=now + MINUTE, settings=get_settings(), watch=QuietStream)
        assert (run.caught_up, run.recovered) == (True, False)  # its own range by its stream, no polling


def test_a_child_that_ran_and_split_hands_its_own_newer_position_on_not_its_parents(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One child ran (its parent stays live while the other has not) and then split: its children start from
    where it got to, the most advanced position that holds their range, not from the parent's older one."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    cosmos = CosmosTokens(mock_db, partitions=1)
    now = utc_now()
    dispatched(cosmos, now - DAY)
    with_parent_token(mock_db, now - DAY)
    cosmos.split(0)
    dispatched(cosmos, now - DAY)
    child_token = cosmos_token(0, EPK_TOP // 2, position="child")
    mock_db[schema.LEASES].update_one(
        {"range": ["", "2000"]}, {"$set": {"token": child_token, "checkpoint_time": now - MINUTE, "updated_at": now}}
    )
    cosmos.split(0)

    dispatched(cosmos, now)

    live = actions_leases(mock_db)
    assert ("", "FF") in live  # the upper child has not run: the parent is still live
    for span in (("", "1000"), ("1000", "2000")):
        assert state_of(live[span]["token"]) == state_of(child_token)
        assert feed_range(live[span]["token"]) == span
        assert live[span]["checkpoint_time"] == now - MINUTE


def test_a_child_that_recovers_by_time_and_splits_before_it_ran_leaves_its_children_their_parents_token_entries(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child no one entry of its parent's token holds recovers by time: its lease has a checkpoint time and no
    token. If it splits again before any worker ran it, its parent is still live and holds each grandchild's range
    with a token: each grandchild starts from its entry of that token (its own, or the one holding its range,
    narrowed), not by polling the whole collection as the token-less child would have."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    cosmos = CosmosTokens(mock_db, partitions=1)
    now = utc_now()
    dispatched(cosmos, now)
    quarter, middle = EPK_TOP // 4, EPK_TOP // 2
    parent_token = composite_token([(0, quarter, "low"), (quarter, EPK_TOP, "high")])
    mock_db[schema.LEASES].update_one(
        {"range": ["", "FF"]}, {"$set": {"token": parent_token, "checkpoint_time": now - MINUTE}}
    )
    cosmos.split(0)  # [0, middle): no one entry holds it
    dispatched(cosmos, now)
    lower = actions_leases(mock_db)[(epk(0), epk(middle))]
    assert (lower["token"], lower["checkpoint_time"]) == (None, now - MINUTE)
    cosmos.split(0)  # before a worker ran it: [0, quarter) and [quarter, middle)

    run = dispatch(cosmos, now=now + MINUTE, settings=get_settings(), send=[].extend, on_cosmos=True)

    assert run.child_starts == {"own_entry": 1, "narrowed": 1}
    live = actions_leases(mock_db)
    starts = {
        span: state_of(live[span]["token"])["value"] for span in ((epk(0), epk(quarter)), (epk(quarter), epk(middle)))
    }
    assert starts == {(epk(0), epk(quarter)): '"low"', (epk(quarter), epk(middle)): '"high"'}


def test_a_range_a_merge_redrew_starts_from_the_lease_holding_it_not_from_a_newer_one_holding_part_of_it(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One child of a split ran and got far ahead; its sibling never ran, so their parent is still live. Then the
    layout is redrawn across the children's boundary (each split again, and the two middle quarters merged): the
    middle range starts from the parent's token narrowed to it, the one live lease that holds it. The ahead child
    holds only part of it: its token has no entry for the rest, and taking it left the range to poll the whole
    collection from the oldest checkpoint."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    cosmos = CosmosTokens(mock_db, partitions=1)
    now = utc_now()
    dispatched(cosmos, now - DAY)
    parent_token = with_parent_token(mock_db, now - DAY)
    cosmos.split(0)
    dispatched(cosmos, now - DAY)
    ahead = cosmos_token(EPK_TOP // 2, EPK_TOP, position="ahead")
    mock_db[schema.LEASES].update_one(
        {"range": ["2000", "FF"]}, {"$set": {"token": ahead, "checkpoint_time": now - MINUTE, "updated_at": now}}
    )
    quarter = EPK_TOP // 4
    cosmos.ranges = [(0, quarter), (quarter, 3 * quarter), (3 * quarter, EPK_TOP)]

    run = dispatch(cosmos, now=now, settings=get_settings(), send=[].extend, on_cosmos=True)

    assert run.child_starts == {"narrowed": 3}
    merged = actions_leases(mock_db)[(epk(quarter), epk(3 * quarter))]
    assert feed_range(merged["token"]) == (epk(quarter), epk(3 * quarter))
    assert state_of(merged["token"]) == state_of(parent_token)
    assert merged["checkpoint_time"] == now - DAY
