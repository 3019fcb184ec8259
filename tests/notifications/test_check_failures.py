"""What a check run reports when its queue or its store fails: the notifications a failed send left pending are
counted for the metric (not taken as all sent), and a store down through the whole sweep fails the run with
StoreUnavailable (so the invocation fails as an outage and the host retries the message)."""

from collections.abc import Iterator
from typing import Any

import pytest

from shared import metrics
from shared.settings import get_settings
from shared.store.retries import StoreUnavailable
from tests.checking import World, sweep_all
from tests.cosmos_fakes import ThrottlingDatabase
from tests.notifications.test_left_open import START
from tests.report_client import set_setting


@pytest.fixture
def world(mock_db: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    set_setting(monkeypatch, "CHECK_PARTITIONS", "1")
    bench = World(mock_db, START)
    for bottle_id in ("bottle-1", "bottle-2", "bottle-3"):
        bench.provision(bottle_id)
        bench.open(bottle_id)
    bench.after(minutes=10)
    yield bench
    bench.stop()


def test_the_notifications_a_failed_send_left_pending_are_counted_for_the_metric(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    reported: list[int | None] = []
    monkeypatch.setattr(metrics, "check_run", lambda kind, **labels: reported.append(labels["pending"]))
    world.queue.accepting = 1  # the queue takes one message, then fails

    done = sweep_all(world.db, "left_open", now=world.now, send=world.queue)

    assert (done.notified, done.queued, done.send_failed) == (3, 1, True)
    assert reported == [2]


def test_a_store_down_through_the_sweep_fails_the_run_as_an_outage(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_setting(monkeypatch, "STORE_MAX_RETRIES", "1")
    set_setting(monkeypatch, "STORE_RETRY_BASE_MS", "1")
    down = ThrottlingDatabase(world.db, {"bottles.find": float("inf")})

    with pytest.raises(StoreUnavailable):
        sweep_all(down, "left_open", now=world.now, send=world.queue, settings=get_settings())

    assert world.queue.messages == []
