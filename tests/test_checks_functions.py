"""The three timer functions as the Functions host sees them: their binding metadata (a schedule from app
settings, and no output binding: they send with the Storage Queue SDK inside the invocation), a direct
invocation, and the local host adapter."""

import json
import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.settings import Settings, get_settings
from tests.checking import TIMERS as HANDLERS
from tests.checking import FakeTimer, World
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
    return list(json.loads(registered_functions[name].get_function_json())["bindings"])


@pytest.mark.parametrize("name", TIMERS)
def test_each_check_is_a_timer_on_its_schedule_setting_and_has_no_output_binding(registered_functions, name):
    found = bindings(registered_functions, name)

    [trigger] = [b for b in found if b["type"] == "timerTrigger"]
    assert trigger["schedule"] == f"%{TIMERS[name]}%"
    assert trigger["runOnStartup"] is False
    assert found == [trigger]  # a queue output binding would be written only after the function returned
    assert Settings.model_fields[TIMERS[name].lower()].default == DEFAULT_SCHEDULES[name]


def test_the_notifications_endpoint_is_registered(registered_functions):
    [trigger] = [b for b in bindings(registered_functions, "get_user_notifications") if b["type"] == "httpTrigger"]
    assert (trigger["route"], trigger["methods"], trigger["authLevel"]) == (
        "users/{user_id}/notifications",
        ["GET"],
        "FUNCTION",
    )


@pytest.mark.parametrize("past_due", [False, True])
def test_a_timer_invoked_directly_sends_json_messages_during_the_invocation(mock_db, past_due, caplog):
    world = World(mock_db, datetime(2026, 5, 4, 9, 0, tzinfo=UTC))
    try:
        world.provision()
        world.open()
        world.after(minutes=6)
        with caplog.at_level(logging.INFO):
            HANDLERS["left_open"](timer=FakeTimer(past_due=past_due))
        delivery = [n["delivery"] for n in world.notifications("left_open")]
    finally:
        world.stop()

    assert [json.loads(m)["kind"] for m in world.queue.messages] == ["left_open"]
    assert delivery == ["queued"]
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("invocation check_open_bottles")]
    logged = json.loads(line.split(" ", 2)[2])
    assert (logged["notified"], logged["queued"], logged["send_failed"], logged["past_due"]) == (1, 1, False, past_due)


def test_a_timer_whose_queue_is_down_logs_it_and_keeps_the_notification_pending(mock_db, caplog):
    world = World(mock_db, datetime(2026, 5, 4, 9, 0, tzinfo=UTC))
    try:
        world.provision()
        world.open()
        world.after(minutes=6)
        world.queue.accepting = 0
        with caplog.at_level(logging.INFO):
            HANDLERS["left_open"](timer=FakeTimer())  # returns: the run did its sweeps
        delivery = [n["delivery"] for n in world.notifications("left_open")]
    finally:
        world.stop()

    assert delivery == ["pending"]
    assert "1 left_open notifications stay pending for the next run" in caplog.text
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("invocation check_open_bottles")]
    logged = json.loads(line.split(" ", 2)[2])
    assert (logged["notified"], logged["queued"], logged["send_failed"]) == (1, 0, True)


def test_the_local_host_runs_the_checks_and_queues_their_messages_by_the_setting(
    registered_functions, mock_db, monkeypatch
):
    monkeypatch.setenv("NOTIFICATIONS_QUEUE", "alerts-test")
    get_settings.cache_clear()
    host = LocalHost.from_functions(registered_functions.values())
    world = World(mock_db, datetime(2026, 5, 4, 9, 0, tzinfo=UTC))
    try:
        world.provision()
        world.after(hours=2)
        host.run_timer("check_silent_bottles")
        host.run_timer("check_late_doses")
        host.run_timer("check_open_bottles")
    finally:
        world.stop()

    assert set(host.timers) >= set(TIMERS)
    assert [json.loads(m)["kind"] for m in host.queues["alerts-test"]] == ["silent"]
    firings = host.due_timers(datetime(2026, 5, 4, 9, 0, tzinfo=UTC), datetime(2026, 5, 4, 9, 10, tzinfo=UTC))
    counts = {name: sum(1 for _, n in firings if n == name) for name in TIMERS}
    assert counts == {"check_open_bottles": 10, "check_silent_bottles": 2, "check_late_doses": 2}
