"""How the lifecycle run (tools/lifecycle/play.py) ends and redelivers, so that what it checks at the end is what the
app would have done: no check runs after the devices stopped, and no report dispatch is left half done."""

from datetime import UTC, datetime, timedelta

from shared.reports.feeds import HEARTBEAT_TALLY
from shared.store import schema
from tools.lifecycle.lag import tally_behind
from tools.lifecycle.play import MAX_EXTRA_DISPATCHES, one_more_dispatch, redelivery_at
from tools.lifecycle.result import Sample
from tools.local_delivery import Delivery, DeliveryReport

T0 = datetime(2026, 3, 29, 5, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
SECONDS_30 = timedelta(seconds=30)


def test_failed_messages_are_delivered_again_when_they_are_visible_again_not_at_the_next_timer():
    """`./dev lifecycle --days 2 --seed 1`: a silent check killed at the last firing (05:00) ran again only at the
    report dispatch after the end (06:10), when bottles whose heartbeats stopped with the plan at 03:33 had been
    silent for 150 minutes: two silent notifications the plan could not expect (precision 0.333)."""
    report = DeliveryReport(
        [
            Delivery("check-partitions", "run_check_partition", "m1", 1, "retry", "killed", T0 + SECONDS_30),
            Delivery(
                "report-partitions", "aggregate_report_partition", "m2", 2, "retry", "killed", T0 + 2 * SECONDS_30
            ),
            Delivery("check-partitions", "run_check_partition", "m3", 1, "delivered"),
            Delivery("check-partitions", "run_check_partition", "m4", 5, "poisoned", "killed"),
        ]
    )

    assert redelivery_at(report) == T0 + SECONDS_30
    assert (
        redelivery_at(DeliveryReport([Delivery("check-partitions", "run_check_partition", "m3", 1, "delivered")]))
        is None
    )


def test_the_run_dispatches_once_more_after_its_last_dispatch_while_something_disrupted_it():
    """`./dev lifecycle --days 1 --seed 2` split bottle_actions inside its last dispatch's read: two actions of
    04:58 were left for a next dispatch the run never made, and their hour failed against the source."""
    last = T0 + HOUR
    split, clean = "a split of bottle_actions mid-page", ""

    assert one_more_dispatch(Sample(last, 71, {}, 130, split), last, extra=0)
    assert one_more_dispatch(Sample(last + 2 * HOUR, 9, {}, 250, split), last, extra=1)
    assert not one_more_dispatch(Sample(last, 0, {}, 0, clean), last, extra=0)
    assert not one_more_dispatch(Sample(last - 2 * HOUR, 71, {}, 120, split), last, extra=0)  # more are due anyway
    assert not one_more_dispatch(Sample(last + 12 * HOUR, 9, {}, 850, split), last, extra=MAX_EXTRA_DISPATCHES)


def test_the_run_dispatches_once_more_while_the_heartbeat_tally_has_not_counted_the_last_hour(mock_db):
    """`./dev lifecycle --days 2 --seed 4`: the last dispatch's tally pass, on a worker clock 2 minutes slow, was
    paced over the hour (it was not behind), so the run ended with 03:00 and 04:00 uncounted for every user and
    those hours failed against the source; the app's next dispatches would have counted them."""
    last = T0 + HOUR
    clean = Sample(last, 0, {}, 0, "")
    lease = {"_id": "tally", "feed": HEARTBEAT_TALLY.name, "retired_at": None, "checkpoint_time": T0 - 2 * HOUR}
    mock_db[schema.LEASES].insert_one(lease)

    assert tally_behind(mock_db, T0)
    assert one_more_dispatch(clean, last, extra=0, tally_done=not tally_behind(mock_db, T0))
    mock_db[schema.LEASES].update_one({"_id": "tally"}, {"$set": {"checkpoint_time": T0}})
    assert not tally_behind(mock_db, T0)
    assert not one_more_dispatch(clean, last, extra=0, tally_done=not tally_behind(mock_db, T0))
    assert not one_more_dispatch(clean, last, extra=MAX_EXTRA_DISPATCHES, tally_done=False)
    mock_db[schema.LEASES].insert_one({**lease, "_id": "retired", "retired_at": T0})  # a retired layout's: ignored
    assert not tally_behind(mock_db, T0)
