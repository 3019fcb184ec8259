"""The cost model (tools/costs/rules.py, request_units.py, billing.py): each rule reproduces the worked example it is
documented with; the meter (tools/costs/meter.py) sees what a write changes and which partitions a read
reaches; the design-scale bill (benchmarks/design_scale.py) bills each hour's peak, the storage floor and the
regions."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from benchmarks import design_scale
from shared import instants
from shared.instants import set_clock, utc_now
from shared.settings import Settings
from shared.store import client as store
from shared.store import schema
from shared.store.schema import collection_specs
from shared.store.setup import ensure_store
from tests.tally_fleet import CLOCK
from tools.costs.billing import (
    AUTOSCALE_MODE,
    PRICE,
    STANDARD,
    autoscale_billed,
    autoscale_max,
    billed_in_hour,
    cheaper_mode,
    monthly_cost,
    partition_peaks,
    physical_partitions,
    reserved_equivalent,
    standard_minimum,
    standard_throughput,
    storage_floor,
    throughput_cost,
)
from tools.costs.meter import CostMeter, IndexedPaths, command_reach, shard_key_values
from tools.costs.request_units import ALL, KB, DocumentWrite, Operation, UnitCost, fanout_ru, read_ru, write_ru
from tools.costs.rules import RULES

# The tests play their instants from a fixed day: the clock runs from a week after it (tests/tally_fleet.py).
pytestmark = pytest.mark.own_clock(CLOCK)


def test_every_rule_cites_a_microsoft_page_and_a_worked_example():
    assert len({rule.name for rule in RULES}) == len(RULES)
    for rule in RULES:
        assert "https://learn.microsoft.com/" in rule.source, rule.name
        assert rule.example, rule.name


def test_point_reads_are_floored_at_1_kb():
    # REQUEST_UNITS: a point read of 1 KB is 1 RU; an item under 1 KB costs as 1 KB; the size table above it.
    assert read_ru(300) == 1.0
    assert read_ru(KB) == 1.0
    assert read_ru(128 * KB) == pytest.approx(9.95)


def test_writes_are_floored_at_1_kb():
    # RU_CONSUMPTION: writing 1 KB is 4.95 RU (about 5); under 1 KB costs the same; 2 KB 6.29.
    assert write_ru(300) == pytest.approx(4.95)
    assert write_ru(2 * KB) == pytest.approx(6.29)


def test_create_update_and_delete_add_index_terms_as_documented():
    # RU_CONSUMPTION: create 1 KB with 10 terms about 7; a replace of 1 KB changing two terms about 10.8; delete
    # 1 KB with 10 terms about 7.
    assert DocumentWrite(None, KB, 0, 10).ru() == pytest.approx(6.95)
    assert DocumentWrite(KB, KB, 2, 2).ru() == pytest.approx(10.7)
    assert DocumentWrite(KB, None, 10, 0).ru() == pytest.approx(6.95)
    assert DocumentWrite(None, 300, 0, 10).ru() == pytest.approx(6.95)  # a small document costs as 1 KB


def test_a_feed_page_costs_its_documents_as_point_reads_and_no_less_than_one():
    # RU_CONSUMPTION (Feed operations): five 1 KB documents cost about five point reads.
    assert Operation("getMore", "x", returned=[KB] * 5).ru() == pytest.approx(5.0)
    assert Operation("getMore", "x", returned=[]).ru() == 1.0
    assert Operation("find", "x", returned=[100] * 3).ru() == 3.0  # each floored at 1 KB


def test_a_write_that_matched_nothing_is_a_read_and_a_find_and_modify_reads_its_reply():
    assert DocumentWrite(KB, KB, unchanged=True).ru() == 1.0
    update = Operation("findAndModify", "x", writes=[DocumentWrite(300, 300, 1, 1)], reply_document=300)
    assert update.ru() == pytest.approx(4.95 * 2 + 0.4 + 1.0)


def test_a_query_that_fans_out_pays_for_every_partition_it_reaches():
    # A sorted page over 200 partitions: 200 x 2.5 = 500 RU on top of its documents.
    assert Operation("find", "x", returned=[], reach=ALL).ru(200) == pytest.approx(1 + 500)
    # `$in` of 200 users over 191 partitions reaches 124.2 of them on average: 310 RU.
    assert fanout_ru(200, 191) == pytest.approx(310.4, abs=0.1)
    # A query pinned to one shard key value pays nothing for the others, however many there are.
    assert Operation("find", "x", returned=[KB], reach=1).ru(500) == 1.0
    # getMore carries on the query it continues: the same reach.
    assert Operation("getMore", "x", returned=[KB], reach=ALL).ru(4) == pytest.approx(1 + 10)


def test_the_meter_reads_the_reach_of_a_filter_on_the_shard_key():
    assert shard_key_values({"_id": "a", "bottle_id": "a"}, "bottle_id") == 1
    assert shard_key_values({"bottle_id": {"$in": ["a", "b", "a"]}}, "bottle_id") == 2
    assert shard_key_values({"$and": [{"x": 1}, {"user_id": {"$eq": "u"}}]}, "user_id") == 1
    assert shard_key_values({"ub": {"$gte": 0, "$lt": 4}}, "bottle_id") == ALL
    assert shard_key_values({"bottle_id": {"$gt": "a"}}, "bottle_id") == ALL  # a range fans out
    assert shard_key_values({"anything": 1}, None) == 1  # an unsharded collection is one partition
    stream = {"aggregate": "bottle_actions", "pipeline": [{"$changeStream": {}}, {"$match": {}}]}
    assert command_reach(stream, "aggregate", "bottle_id") == 1  # read a physical partition at a time
    assert command_reach({"find": "x", "filter": {"silent_pending": True}}, "find", "bottle_id") == ALL


def test_autoscale_bills_each_hours_peak_and_at_least_a_tenth_of_the_maximum():
    # AUTOSCALE: Tmax 10,000: an hour that peaked at 6,000 bills 6,000; an idle hour bills 1,000.
    assert billed_in_hour(6_000, 10_000) == 6_000
    assert billed_in_hour(0, 10_000) == 1_000


def test_the_storage_floor_raises_the_maximum():
    # AUTOSCALE: MAX(1,000, GB x 10) rounded up to 1,000: 9,531 GB needs 96,000 RU/s, whatever the peak.
    assert storage_floor(9_531) == 96_000
    assert storage_floor(0) == 1_000
    assert autoscale_max(43_000, 9_531) == 96_000
    assert autoscale_max(43_000, 9_531, headroom=3.0) == 129_000


def test_physical_partitions_follow_the_storage_and_the_maximum():
    # 50 GB and 10,000 RU/s each.
    assert physical_partitions(9_531, 96_000) == 191
    assert physical_partitions(10, 95_000) == 10
    assert physical_partitions(0, 1_000) == 1


def test_the_price_and_the_regions_reproduce_the_documented_bill():
    # REGIONS: 10,000 RU/s standard for 730 hours at $0.008 per 100 RU/s = $584; 512 GB at $0.25 = $128.
    assert 10_000 / 100 * PRICE.standard_per_100_ru_hour * 730 == pytest.approx(584)
    assert PRICE.autoscale_per_100_ru_hour == pytest.approx(0.012)  # 1.5 x the standard rate
    assert monthly_cost(10_000, 512) == pytest.approx(876 + 128)
    assert monthly_cost(10_000, 512, regions=2) == pytest.approx(2 * (876 + 128))  # T x N, storage in each


def test_standard_throughput_bills_what_is_set_every_hour_and_has_a_minimum_by_storage():
    """how-to-choose-offer (Billing model): standard 400 RU/s bills 400 in hour 1 and 400 in hour 2, used or not;
    concepts-limits (Minimum throughput limits): a container raised to 50,000 RU/s holding 20 GB may go back down
    to MAX(400, 20 x 1, 50,000 / 100) = 500 RU/s."""
    assert throughput_cost(STANDARD, 400, hours=2) == pytest.approx(2 * 400 / 100 * 0.008)
    assert standard_minimum(20, highest_ever=50_000) == 500
    assert standard_minimum(0) == 400
    assert standard_minimum(11_697) == 11_700  # 1 RU/s per GB, in steps of 100: a tenth of autoscale's floor
    assert standard_throughput(48_700, 11_697) == 48_700
    assert standard_throughput(48_700, 11_697, headroom=1.05) == 51_200
    assert standard_throughput(100, 11_697) == 11_700


def test_the_cheaper_of_standard_and_autoscale_is_chosen_by_the_pages_rule():
    """how-to-choose-offer: autoscale bills each hour the highest RU/s it scaled to (Tmax 4,000: 3,500 in hour 1,
    the 10 % floor of 400 in an idle hour 2), at 1.5 x the standard rate; standard saves when the maximum is used
    in 66 % of the hours or more."""
    hours = [autoscale_billed([3_500], 4_000), autoscale_billed([0], 4_000)]
    assert hours == [3_500, 400]
    assert throughput_cost(AUTOSCALE_MODE, sum(hours)) == pytest.approx(1.5 * throughput_cost(STANDARD, 3_900))
    assert cheaper_mode(4_000, hours) == AUTOSCALE_MODE  # 5,850 standard-rate RU/s-hours against 8,000
    two_thirds = [4_000.0] * 66 + [400.0] * 34  # the maximum used in 66 % of the hours, idle in the rest
    assert cheaper_mode(4_000, two_thirds) == STANDARD  # 1.5 x (0.66 + 0.034) = 1.04 x standard
    assert cheaper_mode(4_000, [4_000.0] * 60 + [400.0] * 40) == AUTOSCALE_MODE  # 1.5 x 0.64 = 0.96 x
    assert cheaper_mode(10_000, [6_666.0] * 24) == AUTOSCALE_MODE  # flat at two thirds: 0.9999 x
    assert cheaper_mode(10_000, [6_667.0] * 24) == STANDARD


def test_dynamic_scaling_bills_each_partition_and_region_its_own_peak():
    """autoscale-per-partition-region (Example): 1,000 RU/s over 2 partitions, in a write and a read region, peaks
    of 500 and 200 (write), 150 and 50 (read): every partition scaled to the busiest bills 2,000 RU/s, dynamic
    scaling 900."""
    peaks = [500.0, 200.0, 150.0, 50.0]  # two regions' partitions, a maximum of 1,000 in each
    assert autoscale_billed(peaks, 2 * 1_000, dynamic=False) == 2_000
    assert autoscale_billed(peaks, 2 * 1_000) == 900
    assert autoscale_billed([0.0, 0.0], 1_000) == pytest.approx(100)  # an idle hour: the tenth, shared
    # A peak spread over partitions keeps its total; a skew puts more on the busiest.
    assert sum(partition_peaks(9_000, 3)) == pytest.approx(9_000)
    assert partition_peaks(9_000, 3, skew=2.0) == pytest.approx([6_000, 1_500, 1_500])
    assert autoscale_billed(partition_peaks(9_000, 3, skew=2.0), 10_000) == pytest.approx(9_000)
    assert autoscale_billed(partition_peaks(9_000, 3, skew=2.0), 10_000, dynamic=False) == pytest.approx(18_000)


def test_reserved_capacity_covers_standard_ru_and_an_autoscale_ru_takes_one_and_a_half():
    """autoscale-faq: to cover 10,000 autoscale RU/s, plan to buy 15,000; reserved-capacity: up to 63 % off."""
    assert reserved_equivalent(AUTOSCALE_MODE, 10_000) == pytest.approx(15_000)
    assert reserved_equivalent(STANDARD, 10_000) == 10_000
    assert throughput_cost(STANDARD, 10_000, 730) * (1 - 0.63) == pytest.approx(216.08)


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
    now, before = utc_now(), instants._clock  # the test's own clock (its module's mark), put back at the end
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
        # An update: every heartbeat new, so no reply (a findAndModify's, charged as a read) is needed.
        assert (operation.command, operation.collection) == ("update", schema.BOTTLE_HEARTBEATS)
        assert operation.reply_document is None
        assert write.indexes == ("silent_check",)
        assert (write.terms_deleted, write.terms_inserted) == (1, 1)
        assert write.after is not None
        assert write.after <= 512
    finally:
        set_clock(before)
        store.use_client(None)
        client.drop_database("meter_test")
        client.close()
        meter.close()


def _measured(**given: Any) -> design_scale.Measured:
    empty = UnitCost()
    fields: dict[str, Any] = {
        "heartbeat": empty,
        "opened": empty,
        "closed": empty,
        "actions_feed": empty,
        "tally": [],
        "consumer_run": empty,
        "swept": {},
        "sweep_run": {},
        "sizes": {},
    }
    return design_scale.Measured(**(fields | given))


def test_steady_work_bills_its_rate_and_a_burst_bills_its_peak_for_the_hour():
    measured = _measured(
        heartbeat=UnitCost({schema.BOTTLE_HEARTBEATS: 5.0}),
        tally=[UnitCost({schema.USER_HOURLY_REPORTS: 1.0})],  # per change, its pages paced over the hour
    )
    rows = {row.collection: row for row in design_scale.table(measured, Settings())}

    beats = rows[schema.BOTTLE_HEARTBEATS]
    assert beats.billed == pytest.approx(30_000_000 / 1800 * 5.0)
    assert beats.average == pytest.approx(beats.billed)
    hourly = rows[schema.USER_HOURLY_REPORTS]
    assert hourly.average == pytest.approx(design_scale.CHANGES_PER_SECOND)
    assert hourly.billed == pytest.approx(design_scale.CHANGES_PER_SECOND)  # spread over the hour: as steady
    assert design_scale.total(list(rows.values())) == pytest.approx(sum(r.billed for r in rows.values()))


def test_a_steady_collection_takes_standard_throughput_and_a_bursting_one_autoscale():
    measured = _measured(
        heartbeat=UnitCost({schema.BOTTLE_HEARTBEATS: 5.0}),
        swept={"late_dose": UnitCost({schema.NOTIFICATIONS: 10.0})},
    )
    unpaced = design_scale.Variant("unpaced", sweep_spread=0)
    rows = {row.collection: row for row in design_scale.table(measured, Settings(), unpaced)}

    beats = rows[schema.BOTTLE_HEARTBEATS]  # every hour bills its peak: 1.5 x on autoscale
    assert beats.mode == STANDARD
    assert beats.standard == 87_500  # 30 M / 1,800 x 5.0 RU = 83,333 RU/s, plus a twentieth, in steps of 100
    assert beats.monthly() == pytest.approx(87_500 / 100 * 0.008 * 730)
    assert beats.monthly() < beats.monthly(mode=AUTOSCALE_MODE)
    assert beats.partitions == 9  # 87,500 RU/s over partitions of 10,000
    notifications = rows[schema.NOTIFICATIONS]  # the morning's burst bills one hour of 24 at its peak
    assert notifications.mode == AUTOSCALE_MODE
    assert notifications.hourly() == notifications.hourly_billed
    assert notifications.monthly() < notifications.monthly(mode=STANDARD)


def test_reserved_capacity_is_the_accounts_least_hour_in_standard_ru():
    measured = _measured(
        heartbeat=UnitCost({schema.BOTTLE_HEARTBEATS: 5.0}),
        swept={"late_dose": UnitCost({schema.NOTIFICATIONS: 10.0})},
    )
    rows = design_scale.table(measured, Settings(), design_scale.Variant("unpaced", sweep_spread=0))
    by_name = {row.collection: row for row in rows}
    notifications = by_name[schema.NOTIFICATIONS]  # autoscale: its quietest hour, 1.5 standard RU/s each
    expected = by_name[schema.BOTTLE_HEARTBEATS].standard + 1.5 * min(notifications.hourly_billed)

    found = design_scale.reserved(rows)

    assert found.steady == pytest.approx(expected)
    assert found.monthly == pytest.approx(expected / 100 * 0.008 * 730)
    assert found.saving(0.63) == pytest.approx(0.63 * found.monthly)


def test_a_collection_that_mostly_stores_is_cheaper_on_standard_and_a_hot_partition_favours_autoscale(monkeypatch):
    """Standard throughput needs 1 RU/s per GB stored, autoscale a tenth of 10 x the GB at 1.5 x the rate; a skew
    must be provisioned on standard (T / P a partition) but dynamic autoscale bills only what each uses."""
    measured = _measured(sizes={schema.BOTTLE_ACTIONS: 300, f"{schema.BOTTLE_ACTIONS} index": 200})
    [actions] = [r for r in design_scale.table(measured, Settings()) if r.collection == schema.BOTTLE_ACTIONS]
    assert actions.mode == STANDARD
    assert actions.standard == standard_minimum(actions.storage_gb)
    assert actions.monthly() < actions.monthly(mode=AUTOSCALE_MODE)

    steady = _measured(heartbeat=UnitCost({schema.BOTTLE_HEARTBEATS: 5.0}))
    monkeypatch.setattr(design_scale, "PARTITION_SKEW", 2.0)
    [beats] = [r for r in design_scale.table(steady, Settings()) if r.collection == schema.BOTTLE_HEARTBEATS]
    assert beats.standard == 175_000  # twice the even load, for the busiest partition
    assert beats.billed == pytest.approx(30_000_000 / 1800 * 5.0)  # dynamic scaling: each partition its own
    assert beats.mode == AUTOSCALE_MODE


def test_a_collection_with_no_requests_bills_a_tenth_of_its_storage_floor_and_its_ttl_deletes_bill_nothing():
    measured = _measured(sizes={schema.BOTTLE_ACTIONS: 300, f"{schema.BOTTLE_ACTIONS} index": 200})
    rows = {row.collection: row for row in design_scale.table(measured, Settings())}

    actions = rows[schema.BOTTLE_ACTIONS]
    stored = 1400 * 86_400 * 60 * 500 / 1e9  # 60 days' worth of data and index
    assert actions.storage_gb == pytest.approx(stored)
    assert actions.maximum == storage_floor(stored)
    assert actions.billed == pytest.approx(actions.maximum / 10)  # the deletes of expired actions add nothing
    assert actions.partitions == physical_partitions(stored, actions.maximum)
    assert actions.monthly(2) == pytest.approx(2 * actions.monthly(1))


def test_the_morning_sweep_unpaced_bills_its_minute_in_the_morning_hour():
    measured = _measured(swept={"late_dose": UnitCost({schema.NOTIFICATIONS: 10.0})})
    unpaced = design_scale.Variant("unpaced", sweep_spread=0)
    rows = design_scale.table(measured, Settings(), unpaced)
    [notifications] = [r for r in rows if r.collection == schema.NOTIFICATIONS]

    morning = design_scale.ASSUMED_RATES["late doses found by a sweep in the morning hour"] / 60 * 10.0
    other = design_scale.ASSUMED_RATES["late doses found by a sweep in any other hour"] / 60 * 10.0
    assert notifications.billed == pytest.approx(morning)
    assert notifications.hourly_billed[design_scale.MORNING_HOUR] == pytest.approx(morning)
    assert notifications.hourly_billed[design_scale.MORNING_HOUR + 1] == pytest.approx(max(other, morning * 1.2 / 10))


def test_the_alternatives_bill_a_burst_at_its_peak_a_paced_tally_over_its_spread_and_staggered_roll_ups_evenly():
    ordinary = UnitCost({schema.USER_HOURLY_REPORTS: 1.0})
    rollup = UnitCost({schema.USER_HOURLY_REPORTS: 3.0, schema.USER_DAILY_REPORTS: 2.0})
    measured = _measured(tally=[ordinary] * 5 + [rollup])
    hourly = schema.USER_HOURLY_REPORTS
    changes = design_scale.CHANGES_PER_SECOND

    def row(variant: design_scale.Variant) -> design_scale.Row:
        return {r.collection: r for r in design_scale.table(measured, Settings(), variant)}[hourly]

    before = row(design_scale.Variant("unpaced", tally_minutes=15, rollup=design_scale.BLOCK))
    assert before.billed == pytest.approx(4 * 3.0 * changes)  # the roll-up hour's pages in 15 minutes
    paced = row(design_scale.Variant("paced", rollup=design_scale.BLOCK))
    assert paced.billed == pytest.approx(3.0 * changes)  # over REPORTS_TALLY_SPREAD_MINUTES (60): the hour
    today = row(design_scale.TODAY)  # staggered: every hour a sixth of the roll-ups
    # and in hours 1-5 a sixth of the users roll up a second day, of today's first hours (the measured roll-up
    # read 18 hours): a daily write (2.0) and that many hours' reads (2.0 x hour / 18) each
    second = [2.0 * hour / 18 / 6 if 0 < hour < 6 else 0.0 for hour in range(24)]
    assert today.hourly_billed == pytest.approx([((5 * 1.0 + 3.0) / 6 + extra) * changes for extra in second])
    every_hour = row(design_scale.Variant("hourly roll-ups", rollup=design_scale.EVERY_HOUR))
    assert every_hour.hourly_billed == pytest.approx([paced.billed] * 24)
    autoscale = AUTOSCALE_MODE
    assert every_hour.monthly(mode=autoscale) > paced.monthly(mode=autoscale)
    # on autoscale, the second roll-ups of the hours that straddle midnight cost more
    assert today.monthly(mode=autoscale) > paced.monthly(mode=autoscale)
    assert today.billed < paced.billed  # but no burst
    # and the staggered hours, nearly flat, are cheaper on standard throughput; the bursts of the block's end not
    assert (today.mode, paced.mode) == (STANDARD, AUTOSCALE_MODE)
    assert today.monthly() < paced.monthly()
    printed = design_scale.alternatives(measured, Settings())
    assert [line[0] for line in printed] == [variant.name for variant in design_scale.ALTERNATIVES]
    assert [line[3] for line in printed if line[1] == "yes"] == ["1.00x"]


def test_the_paced_late_dose_sweep_bills_a_quarter_and_a_heartbeat_insert_is_priced_by_the_rules():
    measured = _measured(
        swept={"late_dose": UnitCost({schema.NOTIFICATIONS: 10.0})},
        heartbeat=UnitCost({schema.BOTTLE_HEARTBEATS: 10.3}),
    )

    def rows(variant: design_scale.Variant, settings: Settings | None = None) -> dict[str, design_scale.Row]:
        return {r.collection: r for r in design_scale.table(measured, settings or Settings(), variant)}

    unpaced = design_scale.Variant("unpaced", sweep_spread=0)
    in_a_minute = rows(unpaced)[schema.NOTIFICATIONS].billed
    # The app's: each partition's 25,000 morning late doses (100,000 over 4 partitions) fill 50 batches of 500,
    # paced over CHECK_LATE_DOSES_SPREAD_MINUTES (4).
    assert rows(design_scale.TODAY)[schema.NOTIFICATIONS].billed == pytest.approx(in_a_minute / 4)
    # Batches of 10,000 fill 3 a partition, fewer than the spread's minutes: unpaced, as the app runs them.
    big_batches = Settings(check_batch_size=10_000)
    assert rows(design_scale.TODAY, big_batches)[schema.NOTIFICATIONS].billed == pytest.approx(in_a_minute)
    assert pytest.approx(4.95 + 0.2 * 4) == design_scale.HEARTBEAT_INSERT_RU  # RULES: create, under 1 KB
    beats = design_scale.HEARTBEATS_PER_SECOND
    lost = rows(design_scale.Variant("insert", heartbeat_insert=True, keep_last_heard=False))
    assert lost[schema.BOTTLE_HEARTBEATS].billed == pytest.approx(beats * 5.75)
    kept = rows(design_scale.Variant("insert and update", heartbeat_insert=True))
    assert kept[schema.BOTTLE_HEARTBEATS].billed == pytest.approx(beats * (5.75 + 10.3))


@pytest.mark.integration
def test_the_meter_carries_a_querys_reach_to_its_get_mores(secantus_uri: str) -> None:
    meter = CostMeter(Settings())
    client: Any = store.create_client(secantus_uri, event_listeners=[meter])
    try:
        bottles = client["meter_reach"][schema.BOTTLES]
        bottles.insert_many([{"_id": f"b{i}", "bottle_id": f"b{i}", "user_id": "u"} for i in range(5)])
        meter.clear()
        assert len(list(bottles.find({"user_id": "u"}, batch_size=2))) == 5
        assert len(list(bottles.find({"bottle_id": {"$in": ["b1", "b2", "b3"]}}, batch_size=2))) == 3

        reads = [(op.command, op.reach) for op in meter.operations()]
        assert reads == [("find", ALL), ("getMore", ALL), ("getMore", ALL), ("find", 3), ("getMore", 3)]
    finally:
        client.drop_database("meter_reach")
        client.close()
        meter.close()


def test_the_tally_reads_reports_one_user_a_query_and_the_in_of_before_fans_out_over_the_pages_users_partitions():
    measured = UnitCost({schema.USER_HOURLY_REPORTS: 1.0, schema.BOTTLE_HEARTBEATS: 1.0})
    settings = Settings()
    pages_per_hour = 30_000_000 / 500 + 2 * design_scale.REPORTS_PARTITIONS
    per_change = pages_per_hour / (design_scale.CHANGES_PER_SECOND * 3600)

    today = design_scale.tally_at_scale(measured, settings)
    before = design_scale.tally_at_scale(measured, settings, by_in=True)

    assert today.queries == {}  # one user a query: each pins its shard key value
    # A page of 500 heartbeat documents holds ~167 users (3 bottles each): one `$in` of them, under 200 a query.
    assert before.queries == {schema.USER_HOURLY_REPORTS: {167: pytest.approx(per_change)}}
    # At 234 partitions it reaches 234 x (1 - (1 - 1/234)^167) = 119.7 of them: ~299 RU a page more.
    assert before.ru(schema.USER_HOURLY_REPORTS, 234) - today.ru(schema.USER_HOURLY_REPORTS, 234) == pytest.approx(
        per_change * 2.5 * 234 * (1 - (1 - 1 / 234) ** 167)
    )
    assert pytest.approx(299, abs=1) == 2.5 * 234 * (1 - (1 - 1 / 234) ** 167)


def test_a_row_by_a_setting_bills_with_it_and_heartbeats_uploaded_k_at_a_time_bill_a_kth():
    measured = _measured(
        heartbeat=UnitCost({schema.BOTTLE_HEARTBEATS: 10.3}),
        tally=[UnitCost({schema.USER_HOURLY_REPORTS: 1.0})],
    )

    def rows(variant: design_scale.Variant) -> dict[str, design_scale.Row]:
        return {r.collection: r for r in design_scale.table(measured, Settings(), variant)}

    spread = design_scale.Variant("45", settings=(("reports_tally_spread_minutes", 45),))
    changes = design_scale.CHANGES_PER_SECOND
    assert rows(spread)[schema.USER_HOURLY_REPORTS].billed == pytest.approx(60 / 45 * changes)
    assert rows(design_scale.TODAY)[schema.USER_HOURLY_REPORTS].billed == pytest.approx(changes)  # over the hour
    earlier = design_scale.Variant("40", settings=(("reports_tally_spread_minutes", 40),))
    assert rows(earlier)[schema.USER_HOURLY_REPORTS].billed == pytest.approx(60 / 40 * changes)
    pairs = design_scale.Variant("pairs", heartbeats_per_write=2)
    beats = design_scale.HEARTBEATS_PER_SECOND
    assert rows(pairs)[schema.BOTTLE_HEARTBEATS].billed == pytest.approx(beats / 2 * 10.3)


def test_the_floor_prices_the_heartbeats_write_and_what_a_calibration_would_change_first():
    measured = _measured(heartbeat=UnitCost({schema.BOTTLE_HEARTBEATS: 13.0}))  # nothing else billed

    found = design_scale.floor(measured, Settings())

    beats = 30_000_000 / 1800
    assert found.heartbeats == pytest.approx(beats * 13.0)  # 216,667 RU/s, steady: on standard throughput
    dollars = beats * 13.0 * 1.05 / 100 * 0.008 * 730
    assert found.heartbeats_monthly == pytest.approx(dollars)
    assert found.today_monthly == pytest.approx(dollars, rel=1e-3)  # the rounding to 100 RU/s
    # The insert without the update would bill less, but it loses the silent check: never the floor.
    kept = {v.name for v in design_scale.ALTERNATIVES if v.keeps_every_feature}
    assert found.cheapest in kept
    assert found.storage_monthly == 0.0
    # An update charged as its insert half alone (no delete of the old document): 13.0 - 4.95 RU a heartbeat.
    assert found.update_as_insert_monthly == pytest.approx(beats * (13.0 - 4.95) * 1.05 / 100 * 0.008 * 730, rel=1e-3)
    assert found.per_write_for_goal == 1  # $13.3 K a month already
    assert [line[1] for line in found.lines()][:3] == ["13.00", "16,667", "216,667"]
    assert design_scale.GOAL_DOLLARS == 20_000
    assert not hasattr(design_scale, "GOAL")  # the earlier goal of 200,000 RU/s, retired
