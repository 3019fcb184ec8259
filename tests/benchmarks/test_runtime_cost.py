"""The runtime benchmark (benchmarks/runtime_cost.py) measures the requests a device in service sends: its bottle
provisioned before its first event, each event new, sent at its time. It used to send heartbeats dated before
their bottles were provisioned, each of which cost a second database command (the ring write's filter could not
prove it new), and so overstated the CPU a heartbeat takes by ~1.6x: the figure the bill sized its instances from."""

import pytest

from benchmarks import runtime_cost
from benchmarks.runtime_cost import ACTION, BATCH, BATCHES, DIRECT, HEARTBEAT, RUNTIME
from shared.instants import utc_now
from tests.fake_time import QUIET_HOUR

# A benchmark's figures may not depend on when it runs: its clock runs from a fixed quiet hour.
pytestmark = pytest.mark.own_clock(QUIET_HOUR)


@pytest.mark.integration
def test_a_provisioned_bottles_heartbeat_is_one_database_command_each_way_and_every_event_is_stored():
    costs = {(c.shape, c.way): c for c in runtime_cost.request_costs(12, bottles=3, shapes=(HEARTBEAT, ACTION))}

    assert set(costs) == {(shape, way) for shape in (HEARTBEAT, ACTION) for way in (DIRECT, RUNTIME)}
    for way in (DIRECT, RUNTIME):
        heartbeats, actions = costs[(HEARTBEAT, way)], costs[(ACTION, way)]
        assert (heartbeats.requests, heartbeats.events) == (12, 12)
        assert heartbeats.commands == 12  # the ring write alone: no findAndModify to tell a repeat
        assert (actions.requests, actions.events) == (6, 6)
        assert actions.commands_per_request == 3.0  # the bottle's read, the action's insert, its status write
        assert heartbeats.cpu_ms_per_request > 0


def test_a_batch_of_the_mix_is_a_bottles_events_a_slot_apart_sent_after_the_last():
    start = utc_now().replace(second=0, microsecond=0)
    [batch] = runtime_cost.batch_sends(["a"], 1, start)
    assert batch.body.count(b'"type"') == BATCH
    assert batch.at == start + (BATCH - 1) * runtime_cost.SLOT + runtime_cost.SENT_AFTER


def test_the_device_sends_heartbeats_every_30_minutes_and_actions_opened_then_closed():
    start = utc_now().replace(second=0, microsecond=0)
    heartbeats = runtime_cost.heartbeat_sends(["a", "b"], 4, start)
    assert [s.bottle_id for s in heartbeats] == ["a", "b", "a", "b"]
    assert heartbeats[2].at - heartbeats[0].at == runtime_cost.HEARTBEAT_EVERY
    assert all(b'"heartbeat"' in s.body for s in heartbeats)
    actions = runtime_cost.action_sends(["a"], 2, start)
    assert b'"opened"' in actions[0].body
    assert b'"closed"' in actions[1].body
    assert b'"pills_taken": 1' in actions[1].body
    assert runtime_cost.counts(600) == {HEARTBEAT: 600, ACTION: 300, BATCHES: 30}
