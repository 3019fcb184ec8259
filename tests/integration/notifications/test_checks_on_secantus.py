"""The notification checks on a real wire-protocol server (SecantusDB): from provisioning through device requests
to notifications and queue messages, all through the registered functions as the host would run them; and what
a sweep costs in database commands, which must not grow with the fleet."""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.instants import set_clock
from shared.notifications.checks.partitions import partitions
from shared.notifications.checks.run import run_check
from shared.notifications.documents import KINDS
from shared.settings import get_settings
from shared.store import schema
from shared.store.partitioning import bucket_of
from tests.api import SPEC, closed, heartbeat, opened
from tests.checking import World
from tests.command_counter import CommandCounter
from tools.local_host import LocalHost

pytestmark = pytest.mark.integration
START = datetime(2026, 5, 4, 5, 0, tzinfo=UTC)
TROUBLE = bucket_of("trouble")  # Europe/Rome: 07:00; the default schedule's 08:00 is 06:00 UTC


class Device:
    def __init__(self, host: LocalHost, bottle_id: str, spec: dict[str, Any]) -> None:
        self.host, self.bottle_id = host, bottle_id
        response = host.handle(
            "PUT", f"/api/bottles/{bottle_id}", headers={}, params={}, body=json.dumps(spec).encode()
        )
        assert response.status_code == 201
        self.key = json.loads(response.get_body())["device_key"]

    def send(self, *events: dict[str, Any]) -> None:
        response = self.host.handle(
            "POST",
            f"/api/bottles/{self.bottle_id}/events",
            headers={"X-Device-Key": self.key},
            params={},
            body=json.dumps({"events": list(events)}).encode(),
        )
        assert response.status_code == 202, response.get_body()


def test_from_provisioning_through_ingestion_to_notifications_and_queue_messages(real_db, registered_functions):
    """Three bottles for two and a half hours, every request and run through the registered functions as the host
    runs them: the devices' requests, then every 5 minutes each check's timer (when its schedule is due) and its
    partitions' workers, two side by side. Each kind of episode is notified and sent once, the two that end are
    resolved, and the careful bottle (heard from every 30 minutes, dosed on time) is never notified. Each behaviour
    happens once: the rules behind them, at every edge, are tests/notifications/'s."""
    host = LocalHost.load()
    clock = [START]
    set_clock(lambda: clock[0])
    try:
        careful = Device(host, "careful", SPEC)
        forgetful = Device(host, "forgetful", {**SPEC, "user_id": "forgetful-user"})
        interval = Device(host, "interval", {**SPEC, "schedule": {"every_hours": 1}, "grace_minutes": 30})
        end = START + timedelta(hours=2, minutes=35)
        while clock[0] < end:
            now = clock[0]
            if (now - START) % timedelta(minutes=30) == timedelta(0):  # a device's heartbeat: every 30 minutes
                for device in (careful, interval):
                    device.send(heartbeat(now))
            if now == START + timedelta(hours=1, minutes=5):  # careful: its 08:00 dose, on time
                careful.send(opened(now - timedelta(seconds=30)), closed(now, taken=1))
            if now == START + timedelta(hours=1, minutes=10):  # forgetful is heard from, opens the bottle, walks away
                forgetful.send(heartbeat(now), opened(now))
            if now == START + timedelta(hours=1, minutes=30):
                forgetful.send(closed(now, taken=0))
            due = {name for _, name in host.due_timers(now - timedelta(minutes=5), now)}  # each, once, at `now`
            for name in sorted(due):
                if name.startswith("check_"):  # the report consumer has its own tests
                    host.run_timer(name)  # its work messages, one per partition
            host.deliver(workers=2)  # to the partition workers, side by side
            clock[0] = now + timedelta(minutes=5)
    finally:
        set_clock(None)

    found = {(n["bottle_id"], n["kind"], n["episode_start"]) for n in real_db[schema.NOTIFICATIONS].find()}
    heard = START + timedelta(hours=1, minutes=10)
    assert found == {
        # Its 08:00 (06:00 UTC) passed without a dose, late at 07:00; silent from provisioning until 06:10, and
        # again from then; opened at 06:10, closed at 06:30.
        ("forgetful", "late_dose", START + timedelta(hours=1)),
        ("forgetful", "silent", START),
        ("forgetful", "silent", heard),
        ("forgetful", "left_open", heard),
        # every hour from provisioning, never taken: due at +1 h and +2 h, late 30 minutes later.
        ("interval", "late_dose", START + timedelta(hours=1)),
        ("interval", "late_dose", START + timedelta(hours=2)),
    }
    sent = [json.loads(m) for m in host.queues["notifications"]]
    assert sorted(m["notification_id"] for m in sent) == sorted(
        f"{b}|{k}|{e:%Y-%m-%dT%H:%M:%S.000Z}" for b, k, e in found
    )
    resolved = {
        (n["kind"], n["episode_start"]) for n in real_db[schema.NOTIFICATIONS].find({"resolved_at": {"$ne": None}})
    }
    assert resolved == {("silent", START), ("left_open", heard)}


def sweep_commands(db: Any, counter: CommandCounter, healthy: int, now: datetime) -> dict[str, list[int]]:
    """Provision `healthy` bottles that are fine plus one in trouble of every kind; count the commands of each
    check's run on each of its partitions."""
    world = World(db, START)
    try:
        for i in range(healthy):
            world.provision(f"fine-{i}")
            world.heartbeat(f"fine-{i}")
        world.provision("trouble")
        world.open("trouble")
        for i in range(healthy):
            world.at(now - timedelta(minutes=10)).heartbeat(f"fine-{i}")
            world.dose(f"fine-{i}", at=START + timedelta(hours=1))
        world.at(now)
        counts: dict[str, list[int]] = {}
        for kind in KINDS:
            counts[kind] = []
            for partition in partitions(kind, get_settings()):
                counter.reset()
                run_check(
                    db, kind, partition=partition.buckets, now=now, settings=get_settings(), send=lambda message: None
                )
                counts[kind].append(len(counter.commands))
        assert {n["kind"] for n in db[schema.NOTIFICATIONS].find({"bottle_id": "trouble"})} == set(KINDS)
        assert db[schema.NOTIFICATIONS].count_documents({}) == len(KINDS)  # the healthy bottles: none
        return counts
    finally:
        world.stop()


def test_a_sweep_costs_the_same_commands_for_a_small_and_a_four_times_larger_fleet(counted):
    db, counter = counted
    now = START + timedelta(hours=3)
    small = sweep_commands(db, counter, healthy=5, now=now)
    for name in db.list_collection_names():
        db[name].delete_many({})
    large = sweep_commands(db, counter, healthy=20, now=now)

    assert small == large, (small, large)
    for kind, per_partition in large.items():
        [trouble] = [i for i, p in enumerate(partitions(kind, get_settings())) if p.buckets.holds(TROUBLE)]
        # Two range queries, the notification insert, the bottle's marker, the pending query and its mark;
        # the partitions without trouble: the range queries and the pending query.
        assert per_partition[trouble] <= 6, (kind, per_partition)
        assert [count for i, count in enumerate(per_partition) if i != trouble] == [3, 3, 3], (kind, per_partition)
