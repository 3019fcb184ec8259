"""The checks' notifications on a real Storage queue (Azurite), sent by the app's own queue client from inside the
partition worker's invocation: each new notification once, base64-encoded as a queue trigger reads it by default,
marked queued only once the queue has it; an unreachable queue keeps them pending without hanging or failing the
run, and the next run sends them; a crash between a send and its mark sends again (at least once,
`notification_id` dedupes)."""

import base64
import itertools
import json
import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from azure.identity import ManagedIdentityCredential
from azure.storage.queue import QueueClient

from shared.notifications import delivery, documents
from shared.notifications.checks.run import run_check
from shared.notifications.documents import Episode
from shared.notifications.queue import get_sender, queue_client
from shared.settings import Settings, get_settings
from shared.store.partitioning import BucketRange
from shared.store.retries import RetryPolicy
from tests import azurite
from tests.checking import World

REAL_MARK = delivery._mark_queued

_queues = itertools.count()


@pytest.fixture
def queue(azurite_port: int, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh queue name on Azurite, set as the app's queue (not created: the app creates it on first use)."""
    name = f"notifications-{next(_queues)}"
    use_storage(monkeypatch, azurite.connection_string(azurite_port))
    monkeypatch.setenv("NOTIFICATIONS_QUEUE", name)
    monkeypatch.setenv("QUEUE_SEND_TIMEOUT_SECONDS", "1")
    monkeypatch.setenv("QUEUE_SEND_RETRIES", "0")
    get_settings.cache_clear()
    return name


@pytest.fixture
def world(mock_db: Any, queue: str) -> Iterator[World]:
    bench = World(mock_db, datetime(2026, 5, 4, 9, 0, tzinfo=UTC), fake_queue=False)
    yield bench
    bench.stop()


def use_storage(monkeypatch: pytest.MonkeyPatch, connection_string: str) -> None:
    monkeypatch.setenv("AzureWebJobsStorage", connection_string)
    get_settings.cache_clear()


def received(port: int, queue: str) -> list[dict[str, Any]]:
    """Every message now on the queue, read as a consumer would: the raw body is base64 of the JSON."""
    client = QueueClient.from_connection_string(azurite.connection_string(port), queue)  # no decode policy: raw
    found: list[dict[str, Any]] = []
    try:
        while batch := list(client.receive_messages(messages_per_page=32, max_messages=32)):
            for message in batch:
                found.append(json.loads(base64.b64decode(message.content, validate=True)))
                client.delete_message(message)
    finally:
        client.close()
    return found


def left_open(world: World, *bottle_ids: str) -> None:
    for bottle_id in bottle_ids:
        world.provision(bottle_id)
        world.open(bottle_id)
    world.after(minutes=10)


@pytest.mark.azurite
def test_a_check_run_sends_each_new_notification_once_and_marks_it_queued(world, queue, azurite_port):
    left_open(world, "bottle-1", "bottle-2")

    world.check("left_open")
    world.after(minutes=1).check("left_open")  # nothing new: nothing sent again

    messages = sorted(received(azurite_port, queue), key=lambda m: m["bottle_id"])
    notifications = world.notifications("left_open")
    assert [m["notification_id"] for m in messages] == [n["_id"] for n in notifications]
    assert messages[0] == {
        "notification_id": "bottle-1|left_open|2026-05-04T09:00:00.000Z",
        "user_id": notifications[0]["user_id"],
        "bottle_id": "bottle-1",
        "medication": notifications[0]["medication"],
        "kind": "left_open",
        "episode_start": "2026-05-04T09:00:00.000Z",
        "created_at": "2026-05-04T09:10:00.000Z",
    }
    assert [(n["delivery"], n["queued_at"]) for n in notifications] == [("queued", world.now.replace(minute=10))] * 2


@pytest.mark.azurite
def test_an_unreachable_queue_leaves_them_pending_and_the_next_run_sends_them(
    world, queue, azurite_port, monkeypatch, caplog
):
    left_open(world, "bottle-1", "bottle-2")
    use_storage(monkeypatch, azurite.connection_string(azurite.free_port()))  # nothing listens there

    started = time.monotonic()
    with caplog.at_level(logging.INFO):
        world.check("left_open")  # does not raise
    took = time.monotonic() - started

    assert took < 5
    assert [n["delivery"] for n in world.notifications("left_open")] == ["pending", "pending"]
    for partition in ("2/4", "3/4"):  # bottle-1's and bottle-2's: each partition sends its own
        assert f"1 left_open notifications stay pending for the next run of partition {partition}" in caplog.text
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("invocation run_check_partition")]
    runs = [json.loads(line.split(" ", 2)[2]) for line in lines]
    assert [(r["notified"], r["queued"], r["send_failed"]) for r in runs if r["notified"]] == [(1, 0, True)] * 2

    use_storage(monkeypatch, azurite.connection_string(azurite_port))  # the queue is back
    world.after(minutes=1).check("left_open")

    assert sorted(m["bottle_id"] for m in received(azurite_port, queue)) == ["bottle-1", "bottle-2"]
    assert [n["delivery"] for n in world.notifications("left_open")] == ["queued", "queued"]


@pytest.mark.azurite
def test_a_crash_between_the_send_and_the_mark_sends_it_again(world, queue, azurite_port, monkeypatch):
    left_open(world, "bottle-1")

    def crash(*args: Any, **kwargs: Any) -> int:
        raise RuntimeError("worker recycled after the send")

    monkeypatch.setattr(delivery, "_mark_queued", crash)
    with pytest.raises(RuntimeError):
        world.check("left_open")
    monkeypatch.setattr(delivery, "_mark_queued", REAL_MARK)
    [notification] = world.notifications("left_open")
    assert notification["delivery"] == "pending"

    world.after(minutes=1).check("left_open")

    ids = [m["notification_id"] for m in received(azurite_port, queue)]
    assert ids == [notification["_id"]] * 2  # a duplicate, which the consumer drops by notification_id
    assert world.notifications("left_open")[0]["delivery"] == "queued"


def test_in_azure_the_client_reaches_the_queue_endpoint_with_the_apps_managed_identity():
    settings = Settings(
        AzureWebJobsStorage__queueServiceUri="https://stexample.queue.core.windows.net",
        AzureWebJobsStorage__clientId="00000000-0000-0000-0000-000000000001",
        NOTIFICATIONS_QUEUE="notifications",
    )

    client = queue_client(settings)  # nothing connects yet

    assert client.url == "https://stexample.queue.core.windows.net/notifications"
    assert isinstance(client.credential, ManagedIdentityCredential)
    client.close()


@pytest.mark.azurite
def test_a_peak_is_sent_side_by_side_through_the_app_s_client_each_notification_once(world, queue, azurite_port):
    """The morning peak, scaled down, on a real queue: the app's one queue client shared by the run's send threads
    (QUEUE_SEND_CONCURRENCY) delivers every notification exactly once and every one is marked queued."""
    episodes = [
        Episode(f"bottle-{i}", f"user-{i}", "aspirin", "left_open", world.now - timedelta(minutes=20))
        for i in range(250)
    ]
    documents.record(world.db, episodes, world.now, RetryPolicy())
    sender = get_sender(get_settings())

    run = run_check(
        world.db, "left_open", partition=BucketRange(0, 1), now=world.now, settings=get_settings(), send=sender
    )

    ids = [m["notification_id"] for m in received(azurite_port, queue)]
    assert (run.queued, run.send_failed, run.send_out_of_time) == (250, False, False)
    assert sorted(ids) == sorted(e.notification_id for e in episodes)  # each once
    assert {n["delivery"] for n in world.notifications("left_open")} == {"queued"}
