"""The benchmarks' cost model (benchmarks/cost_model.py) reproduces the documented examples it is built on; the
meter (benchmarks/cost_meter.py) sees what a write changes; the design-scale table adds up what it is given."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from benchmarks import design_scale
from benchmarks.cost_meter import CostMeter, IndexedPaths
from benchmarks.cost_model import KB, MODEL, SMALL_ITEMS_AS_1KB, DocumentWrite, Operation
from shared.instants import set_clock, utc_now
from shared.settings import Settings
from shared.store import client as store
from shared.store import schema
from shared.store.schema import collection_specs
from shared.store.setup import ensure_store


def test_the_documented_examples():
    # RU_CONSUMPTION: create 1 KB with 10 terms = 7; update 1 KB changing two terms = 10.8; delete 1 KB, 10 terms = 7.
    assert DocumentWrite(None, KB, 0, 10).ru(MODEL) == pytest.approx(7.0, abs=0.06)
    assert DocumentWrite(KB, KB, 2, 2).ru(MODEL) == pytest.approx(10.8, abs=0.11)
    assert DocumentWrite(KB, None, 10, 0).ru(MODEL) == pytest.approx(7.0, abs=0.06)
    # Point reads: 1 KB is 1 RU; the size table's points.
    assert MODEL.read(KB) == 1.0
    assert MODEL.read(128 * KB) == pytest.approx(9.95)
    assert MODEL.write(2 * KB) == pytest.approx(6.29)


def test_below_1_kb_the_model_is_proportional_and_the_opposite_assumption_is_the_1_kb_charge():
    assert MODEL.write(KB // 2) == pytest.approx(4.95 / 2)
    assert SMALL_ITEMS_AS_1KB.write(KB // 2) == pytest.approx(4.95)
    assert SMALL_ITEMS_AS_1KB.read(100) == 1.0


def test_a_query_costs_its_documents_and_no_less_than_a_point_read():
    assert Operation("find", "x", returned=[KB] * 3).ru() == pytest.approx(3.0)
    assert Operation("find", "x", returned=[]).ru() == 1.0
    assert Operation("getMore", "x", returned=[100]).ru() == 1.0


def test_a_write_that_matched_nothing_is_a_read_and_a_find_and_modify_reads_its_reply():
    assert DocumentWrite(KB, KB, unchanged=True).ru(MODEL) == 1.0
    update = Operation("findAndModify", "x", writes=[DocumentWrite(KB, KB, 1, 1)], reply_document=KB // 2)
    assert update.ru() == pytest.approx(2 * 4.95 + 0.4 + 0.5)


def test_index_terms_follow_the_schema_on_cosmos_db():
    paths = {spec.name: IndexedPaths.of(spec) for spec in collection_specs(Settings())}
    beats = paths[schema.BOTTLE_HEARTBEATS]
    now = datetime(2026, 11, 20, tzinfo=UTC)
    before = {"_id": "b", "bottle_id": "b", "user_id": "u", "ub": 7, "alive_at": now, "silent_pending": True, "r": now}
    after = {**before, "alive_at": now + timedelta(minutes=30), "r": now + timedelta(minutes=30), "w": {"a": 5}}
    # `_id` and the shard key, the tally's (ub, user_id), the silent check's two (silent_resolve's with a null).
    assert len(beats.terms(before)) == 5
    assert beats.changed(before, after) == (1, 1)
    assert beats.changed_indexes(before, after) == ("silent_check",)
    owned = {**after, "owners": [{"user_id": "a", "until": now}, {"user_id": "b", "until": now}]}
    assert beats.changed(after, owned) == (0, 2)  # a multikey index: a term per element
    actions = paths[schema.BOTTLE_ACTIONS]
    assert actions.ttl
    assert actions.changed(None, {"_id": "x", "bottle_id": "b", "time": now, "user_id": "u", "received_at": now}) == (
        0,
        6,  # _id, the shard key, (bottle_id, time), received_at, (user_id, time), and `_ts` for the TTL
    )


@pytest.mark.integration
def test_the_meter_sees_that_a_heartbeat_changes_only_the_silent_checks_index_terms(
    secantus_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.api import SPEC, heartbeat, post_events, provisioned

    meter = CostMeter(Settings(), observe=secantus_uri)
    client: Any = store.create_client(secantus_uri, event_listeners=[meter])
    monkeypatch.setenv("MONGODB_DATABASE", "meter_test")
    from shared.settings import get_settings

    get_settings.cache_clear()
    db = client["meter_test"]
    ensure_store(db, get_settings(), on_cosmos=False)
    store.use_client(client)
    now = utc_now()
    try:
        set_clock(lambda: now - timedelta(hours=2))
        key = provisioned("bottle-1", SPEC)
        set_clock(lambda: now - timedelta(minutes=40))
        post_events("bottle-1", key, heartbeat(now - timedelta(minutes=40)))
        set_clock(lambda: now)
        meter.clear()
        with meter.labelled("heartbeat"):
            post_events("bottle-1", key, heartbeat(now - timedelta(seconds=2)))
        [operation] = meter.operations("heartbeat")
        [write] = operation.writes
        assert (operation.command, operation.collection) == ("findAndModify", schema.BOTTLE_HEARTBEATS)
        assert write.indexes == ("silent_check",)
        assert (write.terms_deleted, write.terms_inserted) == (1, 1)
        assert write.after is not None
        assert write.after <= 512
    finally:
        set_clock(None)
        store.use_client(None)
        client.drop_database("meter_test")
        client.close()
        meter.close()


def test_the_design_scale_table_multiplies_rates_and_holds_growing_collections_at_their_retention():
    measured = design_scale.Measured(
        heartbeat={schema.BOTTLE_HEARTBEATS: 5.0},
        opened={schema.BOTTLES: 1.0},
        closed={},
        consumer_change={},
        consumer_run={},
        swept_in_trouble={},
        sweep_run={},
        ttl_delete={schema.BOTTLE_ACTIONS: 2.0},
        sizes={schema.BOTTLE_HEARTBEATS: 500, schema.BOTTLE_ACTIONS: 300},
    )
    rows = {row.collection: row for row in design_scale.table(measured, Settings())}

    assert rows[schema.BOTTLE_HEARTBEATS].ru_per_second == pytest.approx(30_000_000 / 1800 * 5.0)
    assert rows[schema.BOTTLE_HEARTBEATS].storage_gb == pytest.approx(30_000_000 * 500 / 1e9)
    assert rows[schema.BOTTLES].ru_per_second == pytest.approx(700.0)
    actions = rows[schema.BOTTLE_ACTIONS]
    assert actions.ru_per_second == pytest.approx(1400 * 2.0)  # the TTL deletes: as many as are written
    assert actions.storage_gb == pytest.approx(1400 * 86_400 * 60 * 300 / 1e9)  # 60 days' worth, not a year's
    assert "**total**" in design_scale.markdown(list(rows.values()))
    split = design_scale.by_work(list(rows.values()))
    assert split[design_scale.HEARTBEATS] == pytest.approx(30_000_000 / 1800 * 5.0)
    assert split[design_scale.EVENTS] == pytest.approx(700.0)
    assert split[design_scale.TTL] == pytest.approx(1400 * 2.0)
