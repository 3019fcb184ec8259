"""Queue triggers in the local host: in-process Storage queues with the host's delivery rules (batches,
visibility timeout after a failure, poison queue after maxDequeueCount), on fake functions registered
through azure.functions as the app's are, in an injected clock's time."""

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import azure.functions as func
import pytest

from functions.bindings import QueueMessages
from shared.instants import set_clock
from shared.settings import get_settings
from tools.local_delivery import PROCESSING_LEASE, QueueTally
from tools.local_host import LocalHost
from tools.local_queues import MessageNotFound, QueueOptions, QueueService, parse_timespan
from tools.serve import LocalServer

T0 = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)
WORK = "work-items"  # the queue `%NOTIFICATIONS_QUEUE%` names in these tests
OPTIONS = QueueOptions(
    batch_size=4, new_batch_threshold=2, max_dequeue_count=5, visibility_timeout=timedelta(seconds=30)
)


@dataclass
class Recorder:
    """What the fake functions saw."""

    calls: list[tuple[str, str, int]] = field(default_factory=list)  # (function, body, dequeue count)
    messages: list[func.QueueMessage] = field(default_factory=list)
    visible_during: list[int] = field(default_factory=list)  # visible messages of `work` during each call
    fails: Counter[str] = field(default_factory=Counter)  # body -> failures still to come
    holders: set[str] = field(default_factory=set)
    concurrent: int = 0
    most_concurrent: int = 0
    collisions: list[str] = field(default_factory=list)
    host: LocalHost | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def saw(self, function: str, msg: func.QueueMessage) -> str:
        body = msg.get_body().decode()
        with self.lock:
            self.calls.append((function, body, msg.dequeue_count))
            self.messages.append(msg)
        return body


def fake_functions(rec: Recorder) -> func.FunctionApp:
    bp = func.Blueprint()

    @bp.function_name("tick")
    @bp.timer_trigger(schedule="* * * * * *", arg_name="timer")
    @bp.queue_output(arg_name="out", queue_name="%NOTIFICATIONS_QUEUE%", connection="AzureWebJobsStorage")
    def tick(timer: func.TimerRequest, out: func.Out[str]) -> None:
        out.set('{"tick":1}')

    @bp.function_name("work")
    @bp.queue_trigger(arg_name="msg", queue_name="%NOTIFICATIONS_QUEUE%", connection="AzureWebJobsStorage")
    def work(msg: func.QueueMessage) -> None:
        rec.saw("work", msg)
        if rec.host is not None:
            rec.visible_during.append(rec.host.service.visible_count(WORK))

    @bp.function_name("relay")
    @bp.queue_trigger(arg_name="msg", queue_name="relay", connection="AzureWebJobsStorage")
    @bp.queue_output(arg_name="forward", queue_name="%NOTIFICATIONS_QUEUE%", connection="AzureWebJobsStorage")
    @bp.queue_output(arg_name="outbox", queue_name="outbox", connection="AzureWebJobsStorage")
    def relay(msg: func.QueueMessage, forward: func.Out[QueueMessages], outbox: func.Out[str]) -> None:
        body = rec.saw("relay", msg)
        forward.set([f"{body}-a", f"{body}-b"])
        outbox.set(f"{body}-out")

    @bp.function_name("flaky")
    @bp.queue_trigger(arg_name="msg", queue_name="flaky", connection="AzureWebJobsStorage")
    @bp.queue_output(arg_name="out", queue_name="outbox", connection="AzureWebJobsStorage")
    def flaky(msg: func.QueueMessage, out: func.Out[str]) -> None:
        body = rec.saw("flaky", msg)
        out.set(f"{body} attempted")  # not sent when the function raises
        with rec.lock:
            if rec.fails[body] > 0:
                rec.fails[body] -= 1
                raise RuntimeError(f"{body} fails")

    @bp.function_name("doomed")
    @bp.queue_trigger(arg_name="msg", queue_name="doomed", connection="AzureWebJobsStorage")
    def doomed(msg: func.QueueMessage) -> None:
        rec.saw("doomed", msg)
        raise RuntimeError("always")

    @bp.function_name("slow")
    @bp.queue_trigger(arg_name="msg", queue_name="slow", connection="AzureWebJobsStorage")
    def slow(msg: func.QueueMessage) -> None:
        with rec.lock:
            if msg.id in rec.holders:
                rec.collisions.append(msg.id)
            rec.holders.add(msg.id)
            rec.concurrent += 1
            rec.most_concurrent = max(rec.most_concurrent, rec.concurrent)
        time.sleep(0.02)
        rec.saw("slow", msg)
        with rec.lock:
            rec.concurrent -= 1
            rec.holders.discard(msg.id)

    app = func.FunctionApp()
    app.register_functions(bp)
    return app


@pytest.fixture
def rec(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    monkeypatch.setenv("NOTIFICATIONS_QUEUE", WORK)
    get_settings.cache_clear()
    return Recorder()


@pytest.fixture
def clock() -> list[datetime]:
    return [T0]


def make_host(rec: Recorder, clock: list[datetime], options: QueueOptions = OPTIONS) -> LocalHost:
    host = LocalHost.for_app_object(fake_functions(rec), clock=lambda: clock[0], options=options)
    rec.host = host
    return host


def test_the_host_finds_queue_triggers_and_resolves_their_queue_names(rec, clock):
    host = make_host(rec, clock)
    assert {name: t.queue for name, t in host.triggers.items()} == {
        "work": WORK,
        "relay": "relay",
        "flaky": "flaky",
        "doomed": "doomed",
        "slow": "slow",
    }
    assert host.triggers["relay"].outputs == {"forward": WORK, "outbox": "outbox"}
    assert host.timers["tick"].outputs == {"out": WORK}


def test_a_timers_message_reaches_the_triggered_function_as_the_host_builds_it(rec, clock):
    host = make_host(rec, clock)
    assert host.run_timer("tick") == ['{"tick":1}']
    clock[0] = T0 + timedelta(seconds=5)
    report = host.deliver()

    (msg,) = rec.messages
    assert isinstance(msg, func.QueueMessage)
    assert msg.get_body() == b'{"tick":1}'
    assert msg.get_json() == {"tick": 1}
    assert msg.dequeue_count == 1
    assert msg.insertion_time == T0
    assert msg.expiration_time == T0 + timedelta(days=7)
    assert msg.time_next_visible == clock[0] + PROCESSING_LEASE
    assert msg.id
    assert msg.pop_receipt
    assert report.queues == {WORK: QueueTally(delivered=1)}
    assert (report.delivered, report.failed, report.poisoned) == (1, 0, 0)
    assert host.service.messages(WORK) == []  # deleted once the function returned
    assert host.queues[WORK] == ['{"tick":1}']  # every message ever sent stays listed
    assert host.deliver().deliveries == []


def test_a_failed_message_reappears_only_after_the_visibility_timeout(rec, clock):
    host = make_host(rec, clock)
    rec.fails["m1"] = 2
    host.service.send("flaky", "m1")

    first = host.deliver()
    assert [(d.outcome, d.dequeue_count) for d in first.deliveries] == [("retry", 1)]
    assert first.deliveries[0].next_visible_time == T0 + timedelta(seconds=30)
    assert "RuntimeError" in (first.deliveries[0].error or "")
    assert host.service.visible_count("flaky") == 0

    clock[0] = T0 + timedelta(seconds=29)
    assert host.deliver().deliveries == []
    clock[0] = T0 + timedelta(seconds=30)
    assert [d.outcome for d in host.deliver().deliveries] == ["retry"]
    clock[0] = T0 + timedelta(seconds=60)
    last = host.deliver()
    assert [(d.outcome, d.dequeue_count) for d in last.deliveries] == [("delivered", 2 + 1)]
    assert [count for name, _, count in rec.calls if name == "flaky"] == [1, 2, 3]
    assert host.queues["outbox"] == ["m1 attempted"]  # only the successful invocation's output was sent
    assert host.service.messages("flaky") == []


def test_after_max_dequeue_count_failures_the_message_moves_to_the_poison_queue(rec, clock, caplog):
    host = make_host(rec, clock)
    host.service.send("doomed", "bad")
    reports = []
    with caplog.at_level(logging.WARNING, logger="tools.local_delivery"):
        for attempt in range(7):
            clock[0] = T0 + attempt * timedelta(seconds=30)
            reports.append(host.deliver())
    assert [count for name, _, count in rec.calls if name == "doomed"] == [1, 2, 3, 4, 5]
    assert [d.outcome for r in reports for d in r.deliveries] == ["retry"] * 4 + ["poisoned"]
    assert sum((Counter(vars(r.queues.get("doomed", QueueTally()))) for r in reports), Counter()) == {
        "failed": 5,
        "poisoned": 1,
    }
    assert host.queues["doomed-poison"] == ["bad"]
    (poisoned,) = host.service.messages("doomed-poison")
    assert (poisoned.body, poisoned.dequeue_count) == (b"bad", 0)
    assert host.service.messages("doomed") == []
    assert "Message has reached MaxDequeueCount of 5" in caplog.text
    assert "doomed-poison" in caplog.text


def test_a_message_back_over_the_limit_without_a_verdict_is_poisoned_unseen(rec, clock):
    host = make_host(rec, clock, QueueOptions(max_dequeue_count=2))
    host.service.send("doomed", "crashed")
    for second in range(3):  # three receivers that died holding it: their leases ran out
        assert host.service.receive(
            "doomed", visibility_timeout=timedelta(seconds=1), now=T0 + timedelta(seconds=2 * second)
        )
    clock[0] = T0 + timedelta(seconds=10)
    report = host.deliver()
    assert [(d.outcome, d.dequeue_count, d.invoked) for d in report.deliveries] == [("poisoned", 4, False)]
    assert rec.calls == []
    assert host.queues["doomed-poison"] == ["crashed"]


def test_with_no_visibility_timeout_the_retries_happen_in_the_same_call(rec, clock):
    host = make_host(rec, clock, QueueOptions(max_dequeue_count=3))
    host.service.send("doomed", "bad")
    report = host.deliver()
    assert [d.outcome for d in report.deliveries] == ["retry", "retry", "poisoned"]
    assert report.queues == {"doomed": QueueTally(failed=3, poisoned=1)}


def test_each_dequeue_takes_at_most_batch_size_messages(rec, clock):
    host = make_host(rec, clock, QueueOptions(batch_size=3))
    for n in range(7):
        host.service.send(WORK, f"m{n}")
    report = host.deliver()
    assert report.delivered == 7
    # While a batch is processed its messages are invisible, the rest still visible.
    assert rec.visible_during == [4, 4, 4, 1, 1, 1, 0]
    assert [body for _, body, _ in rec.calls] == [f"m{n}" for n in range(7)]  # in the order sent


def test_receive_returns_at_most_the_batch_and_leases_it(clock):
    service = QueueService(lambda: clock[0])
    for n in range(5):
        service.send("q-one", f"m{n}")
    batch = service.receive("q-one", 4, visibility_timeout=timedelta(seconds=30))
    assert [m.body for m in batch] == [b"m0", b"m1", b"m2", b"m3"]
    assert [m.body for m in service.receive("q-one", 4, visibility_timeout=timedelta(seconds=30))] == [b"m4"]
    assert service.receive("q-one", 4, visibility_timeout=timedelta(seconds=30)) == []
    clock[0] = T0 + timedelta(seconds=30)
    again = service.receive("q-one", 32, visibility_timeout=timedelta(seconds=30))
    assert [(m.body, m.dequeue_count) for m in again] == [(f"m{n}".encode(), 2) for n in range(5)]


def test_two_workers_never_hold_the_same_message(rec, clock):
    host = make_host(rec, clock, QueueOptions(batch_size=2))
    for n in range(24):
        host.service.send("slow", f"s{n}")
    report = host.deliver(workers=4)
    assert report.delivered == 24
    assert rec.collisions == []
    assert rec.most_concurrent > 1  # side by side
    slow = [(body, count) for name, body, count in rec.calls if name == "slow"]
    assert sorted(slow) == sorted((f"s{n}", 1) for n in range(24))  # each once, first try


def test_concurrent_receivers_get_disjoint_messages(clock):
    service = QueueService(lambda: clock[0])
    for n in range(400):
        service.send("q-many", str(n))
    got: list[list[str]] = [[] for _ in range(8)]

    def receiver(mine: list[str]) -> None:
        while batch := service.receive("q-many", 3, visibility_timeout=timedelta(minutes=1)):
            mine.extend(m.id for m in batch)

    threads = [threading.Thread(target=receiver, args=(mine,)) for mine in got]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [message_id for mine in got for message_id in mine]
    assert len(every) == len(set(every)) == 400


def test_messages_a_triggered_function_sends_are_delivered_in_the_same_call(rec, clock):
    host = make_host(rec, clock)
    host.service.send("relay", "r1")
    report = host.deliver(workers=2)
    assert sorted(rec.calls) == [("relay", "r1", 1), ("work", "r1-a", 1), ("work", "r1-b", 1)]
    assert report.queues == {"relay": QueueTally(delivered=1), WORK: QueueTally(delivered=2)}
    # A queue nobody triggers on accumulates.
    assert host.queues["outbox"] == ["r1-out"]
    assert [m.body for m in host.service.messages("outbox")] == [b"r1-out"]


def test_a_visibility_delay_holds_a_message_back(rec, clock):
    host = make_host(rec, clock)
    host.service.send(WORK, "later", visibility_delay=timedelta(minutes=1))
    assert host.deliver().deliveries == []
    assert host.deliver(now=T0 + timedelta(minutes=1)).delivered == 1
    (msg,) = rec.messages
    assert msg.insertion_time == T0


def test_by_default_the_queues_keep_the_apps_clock(rec):
    set_clock(lambda: T0)
    try:
        host = LocalHost.for_app_object(fake_functions(rec))
        host.run_timer("tick")
        assert host.deliver().delivered == 1
    finally:
        set_clock(None)
    (msg,) = rec.messages
    assert (msg.insertion_time, msg.time_next_visible) == (T0, T0 + PROCESSING_LEASE)


def test_pop_receipts_and_expiry_follow_storage(clock):
    service = QueueService(lambda: clock[0])
    sent = service.send("q-two", "x", time_to_live=timedelta(minutes=5))
    (held,) = service.receive("q-two", visibility_timeout=timedelta(seconds=10))
    assert held.id == sent.id
    clock[0] = T0 + timedelta(seconds=10)
    (again,) = service.receive("q-two", visibility_timeout=timedelta(seconds=10))  # the first lease ran out
    with pytest.raises(MessageNotFound):
        service.delete("q-two", held.id, held.pop_receipt)  # that receipt is stale now
    released = service.update_visibility("q-two", again.id, again.pop_receipt, timedelta(0))
    with pytest.raises(MessageNotFound):
        service.delete("q-two", again.id, again.pop_receipt)
    assert service.visible_count("q-two") == 1
    clock[0] = T0 + timedelta(minutes=5)
    assert service.receive("q-two", visibility_timeout=timedelta(seconds=10)) == []  # expired
    with pytest.raises(MessageNotFound):
        service.delete("q-two", released.id, released.pop_receipt)
    assert service.sent() == {"q-two": ["x"]}


def test_the_queue_settings_come_from_host_json(rec, clock, tmp_path: Path):
    assert QueueOptions.from_host_json() == QueueOptions(
        batch_size=4,
        new_batch_threshold=2,
        max_dequeue_count=5,
        visibility_timeout=timedelta(seconds=30),
        max_polling_interval=timedelta(seconds=2),
    )
    assert LocalHost.for_app_object(fake_functions(rec)).options == QueueOptions.from_host_json()
    bare = tmp_path / "host.json"
    bare.write_text(json.dumps({"version": "2.0", "extensions": {"queues": {"batchSize": 8}}}))
    assert QueueOptions.from_host_json(bare) == QueueOptions(batch_size=8, new_batch_threshold=4)  # host defaults
    bare.write_text(json.dumps({"extensions": {"queues": {"batchSize": 33}}}))
    with pytest.raises(ValueError, match="batchSize"):
        QueueOptions.from_host_json(bare)
    assert parse_timespan("1.02:03:04.5") == timedelta(days=1, hours=2, minutes=3, seconds=4.5)
    with pytest.raises(ValueError, match="not a timespan"):
        parse_timespan("30s")


def test_a_queue_name_storage_refuses_fails_at_indexing():
    app = func.FunctionApp()

    @app.function_name("bad")
    @app.queue_trigger(arg_name="msg", queue_name="Bad_Queue", connection="AzureWebJobsStorage")
    def bad(msg: func.QueueMessage) -> None:
        pass

    with pytest.raises(ValueError, match="Bad_Queue"):
        LocalHost.for_app_object(app)


# --- ./dev serve -----------------------------------------------------------------------------------


@pytest.fixture
def serving(rec: Recorder) -> Iterator[LocalServer]:
    host = LocalHost.for_app_object(fake_functions(rec))  # the real clock and host.json
    rec.host = host
    running = LocalServer(host, ("127.0.0.1", 0), queue_workers=2)
    running.start()
    yield running
    running.stop()


def test_serve_delivers_a_timers_message_to_the_triggered_function(rec, serving, caplog):
    with caplog.at_level(logging.INFO, logger="serve"):
        deadline = time.monotonic() + 3
        while not any(name == "work" for name, _, _ in rec.calls) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.1)  # the delivery's log line follows the function's return
    assert ("work", '{"tick":1}', 1) in rec.calls
    assert any(
        m.startswith(f"queue {WORK}: message ") and m.endswith("to work (dequeue count 1) delivered")
        for m in caplog.messages
    )
