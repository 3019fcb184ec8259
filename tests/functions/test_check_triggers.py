"""The check functions as the Functions host sees them: three timers on their schedule settings, each with a
queue output binding for its work messages, and the queue-triggered partition worker that sends notifications
with the Storage Queue SDK inside its invocation; direct invocations, and the local host adapter."""

import json
import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.settings import Settings, get_settings
from tests.checking import World, dispatched, work
from tools.local_host import LocalHost

TIMERS = {
    "check_open_bottles": "CHECK_OPEN_BOTTLES_SCHEDULE",
    "check_silent_bottles": "CHECK_SILENT_BOTTLES_SCHEDULE",
    "check_late_doses": "CHECK_LATE_DOSES_SCHEDULE",
}
DEFAULT_SCHEDULES = {
    "check_open_bottles": "0 */1 * * * *",
    "check_silent_bottles": "0 */5 * * * *",
    "check_late_doses": "0 */5 * * * *",
}


def bindings(registered_functions: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in registered_functions[name].raw_bindings]


def logged(caplog: pytest.LogCaptureFixture, function: str) -> list[dict[str, Any]]:
    """The fields of each `invocation <function>` line logged."""
    prefix = f"invocation {function} "
    return [json.loads(r.getMessage()[len(prefix) :]) for r in caplog.records if r.getMessage().startswith(prefix)]


@pytest.mark.parametrize("name", TIMERS)
def test_each_check_is_a_timer_on_its_schedule_setting_that_outputs_to_the_checks_queue(registered_functions, name):
    found = bindings(registered_functions, name)

    [trigger] = [b for b in found if b["type"] == "timerTrigger"]
    assert trigger["schedule"] == f"%{TIMERS[name]}%"
    assert trigger["runOnStartup"] is False
    [output] = [b for b in found if b["type"] == "queue"]  # its work messages; never a notification
    assert (output["direction"], output["queueName"], output["connection"]) == (
        "OUT",
        "%CHECKS_QUEUE%",
        "AzureWebJobsStorage",
    )
    assert len(found) == 2
    assert Settings.model_fields[TIMERS[name].lower()].default == DEFAULT_SCHEDULES[name]


def test_the_partition_worker_is_triggered_by_the_checks_queue_and_has_no_output_binding(registered_functions):
    [trigger] = bindings(registered_functions, "run_check_partition")  # notifications go with the SDK

    assert (trigger["type"], trigger["queueName"], trigger["connection"]) == (
        "queueTrigger",
        "%CHECKS_QUEUE%",
        "AzureWebJobsStorage",
    )
    assert Settings.model_fields["checks_queue"].default == "check-partitions"


def test_the_notifications_endpoint_is_registered(registered_functions):
    [trigger] = [b for b in bindings(registered_functions, "get_user_notifications") if b["type"] == "httpTrigger"]
    assert (trigger["route"], trigger["methods"], trigger["authLevel"]) == (
        "users/{user_id}/notifications",
        ["GET"],
        "FUNCTION",
    )


@pytest.mark.parametrize("past_due", [False, True])
def test_a_timer_dispatches_and_its_partition_s_worker_sends_json_messages_during_the_invocation(
    mock_db, past_due, caplog
):
    world = World(mock_db, datetime(2026, 5, 4, 9, 0, tzinfo=UTC))
    try:
        world.provision()
        world.open()
        world.after(minutes=6)
        with caplog.at_level(logging.INFO):
            messages = dispatched("left_open", past_due=past_due)
            sent_by_dispatch = list(world.queue.messages)
            for message in messages:
                work(message, dequeue_count=1)
        delivery = [n["delivery"] for n in world.notifications("left_open")]
    finally:
        world.stop()

    assert sent_by_dispatch == []  # the timer only dispatches
    assert [json.loads(m) for m in messages] == [{"kind": "left_open", "partition": i, "of": 4} for i in range(4)]
    assert [json.loads(m)["kind"] for m in world.queue.messages] == ["left_open"]
    assert delivery == ["queued"]
    [timer_line] = logged(caplog, "check_open_bottles")
    assert (timer_line["dispatched"], timer_line["past_due"]) == (4, past_due)
    runs = logged(caplog, "run_check_partition")
    assert [run["partition"] for run in runs] == [f"left_open:{i}/4" for i in range(4)]
    assert [(run["notified"], run["queued"], run["send_failed"]) for run in runs] == [
        (0, 0, False),
        (0, 0, False),
        (1, 1, False),  # bottle-1's bucket, 734, is in partition 2: [512, 768)
        (0, 0, False),
    ]
    assert {run["dequeue_count"] for run in runs} == {1}


def test_a_worker_whose_queue_is_down_logs_it_and_keeps_the_notification_pending(mock_db, caplog):
    world = World(mock_db, datetime(2026, 5, 4, 9, 0, tzinfo=UTC))
    try:
        world.provision()
        world.open()
        world.after(minutes=6)
        world.queue.accepting = 0
        with caplog.at_level(logging.INFO):
            world.check("left_open")  # every invocation returns: the runs did their sweeps
        delivery = [n["delivery"] for n in world.notifications("left_open")]
    finally:
        world.stop()

    assert delivery == ["pending"]
    assert "1 left_open notifications stay pending for the next run of partition 2/4" in caplog.text
    [failed] = [run for run in logged(caplog, "run_check_partition") if run["notified"]]
    assert (failed["partition"], failed["notified"], failed["queued"], failed["send_failed"]) == (
        "left_open:2/4",
        1,
        0,
        True,
    )


def test_the_local_host_runs_the_checks_and_queues_their_messages_by_the_settings(
    registered_functions, mock_db, monkeypatch
):
    monkeypatch.setenv("NOTIFICATIONS_QUEUE", "alerts-test")
    monkeypatch.setenv("CHECKS_QUEUE", "sweeps-test")
    monkeypatch.setenv("CHECK_PARTITIONS", "3")
    get_settings.cache_clear()
    host = LocalHost.load()
    world = World(mock_db, datetime(2026, 5, 4, 9, 0, tzinfo=UTC))
    try:
        world.provision()
        world.after(hours=2)
        for timer in ("check_silent_bottles", "check_late_doses", "check_open_bottles"):
            host.run_timer(timer)
        report = host.deliver(workers=2)
    finally:
        world.stop()

    assert set(host.timers) >= set(TIMERS)
    assert host.triggers["run_check_partition"].queue == "sweeps-test"
    assert sorted(json.loads(m)["kind"] for m in host.queues["sweeps-test"]) == sorted(
        ["silent", "late_dose", "left_open"] * 3
    )
    assert (report.delivered, report.failed) == (9, 0)
    assert [json.loads(m)["kind"] for m in host.queues["alerts-test"]] == ["silent"]
    firings = host.due_timers(datetime(2026, 5, 4, 9, 0, tzinfo=UTC), datetime(2026, 5, 4, 9, 10, tzinfo=UTC))
    counts = {name: sum(1 for _, n in firings if n == name) for name in TIMERS}
    assert counts == {"check_open_bottles": 10, "check_silent_bottles": 2, "check_late_doses": 2}
