"""The lifecycle run's report lag (tools/lifecycle/lag.py): measured as what no lease holding a key has read, and held
to a bound in the verdict: 0 at a report dispatch nothing disrupted, and at a disrupted one the time since the
last dispatch nothing disrupted (docs/lifecycle.md, "Reading the chart")."""

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

from shared.store import schema
from tests.lifecycle_results import clean_result
from tools.lifecycle.lag import LagBound, report_lag
from tools.lifecycle.result import Sample
from tools.lifecycle.screen import lag_line

T0 = datetime(2026, 3, 31, 6, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


class Keys:
    """The proxy's hashing as report_lag uses it: an action's key is its `key` field."""

    def __init__(self) -> None:
        self.partitions = self

    def collection(self, database: str, name: str) -> "Keys":
        return self

    def hash_of(self, action: dict[str, Any]) -> int:
        return int(action["key"])


def lease(db: Any, low: str, high: str, checkpoint: datetime) -> None:
    db[schema.LEASES].insert_one(
        {
            "_id": f"reports:bottle_actions:cosmos:{low}-{high}",
            "feed": schema.BOTTLE_ACTIONS,
            "range": [low, high],
            "checkpoint_time": checkpoint,
            "created_at": T0,
            "retired_at": None,
        }
    )


def test_a_split_parent_still_live_leaves_no_lag_once_its_children_read_its_range(mock_db):
    """The parent stays live until the dispatch after its children ran: its old checkpoint is no unread action.
    (The chart showed ~240 minutes two hours after each mid-page split, with every action read.)"""
    lease(mock_db, "", "FF", T0)
    lease(mock_db, "", "80", T0 + 3 * HOUR)
    lease(mock_db, "80", "FF", T0 + 3 * HOUR)
    mock_db[schema.BOTTLE_ACTIONS].insert_many(
        [{"_id": "a", "key": 0x10, "received_at": T0 + HOUR}, {"_id": "b", "key": 0x90, "received_at": T0 + 2 * HOUR}]
    )

    assert report_lag(mock_db, Keys(), T0 + 4 * HOUR) == 0.0


def test_an_action_that_no_lease_holding_its_key_has_read_is_the_lag(mock_db):
    lease(mock_db, "", "FF", T0)
    lease(mock_db, "", "80", T0)  # a child that has not run
    lease(mock_db, "80", "FF", T0 + 3 * HOUR)
    mock_db[schema.BOTTLE_ACTIONS].insert_many(
        [{"_id": "a", "key": 0x10, "received_at": T0 + HOUR}, {"_id": "b", "key": 0x90, "received_at": T0 + 2 * HOUR}]
    )

    assert report_lag(mock_db, Keys(), T0 + 4 * HOUR) == 180.0


def test_the_bound_is_0_at_an_undisrupted_dispatch_and_the_time_since_the_last_one_at_a_disrupted_one():
    bound = LagBound(T0 - HOUR)

    assert bound.at_dispatch(T0) == (0.0, "")
    bound.disrupted("a split of bottle_actions mid-page")
    assert bound.at_dispatch(T0 + 2 * HOUR) == (120.0, "a split of bottle_actions mid-page")
    bound.disrupted("throttling")
    bound.disrupted("a report worker's run failed")
    assert bound.at_dispatch(T0 + 4 * HOUR) == (240.0, "a report worker's run failed, throttling")
    assert bound.at_dispatch(T0 + 6 * HOUR) == (0.0, "")
    bound.disrupted("throttling")
    assert bound.at_dispatch(T0 + 8 * HOUR) == (120.0, "throttling")


def samples(*lags: tuple[float, float]) -> list[Sample]:
    return [
        Sample(T0 + 2 * i * HOUR, lag, {}, bound, "throttling" if bound else "") for i, (lag, bound) in enumerate(lags)
    ]


def test_a_lag_over_its_bound_fails_the_verdict_and_one_at_it_passes():
    at_bound = dataclasses.replace(clean_result(), samples=samples((0, 0), (120, 120), (0, 0)))
    over = dataclasses.replace(clean_result(), samples=samples((0, 0), (121, 120), (5, 0)))

    assert at_bound.failures() == []
    assert over.failures() == [
        "the actions' reports lagged 5.0 min at 2026-03-31 10:00, over the bound of 0 (since the last dispatch"
        " nothing disrupted; 2 dispatches over it)"
    ]
    assert lag_line(at_bound.samples).startswith("actions' report lag: 0 at 2 of 3 dispatches; the most: 120.0 min")
    assert "over its bound: 5.0 min at 2026-03-31 10:00, bound 0 (not disrupted" in lag_line(over.samples)
