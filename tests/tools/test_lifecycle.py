"""`./dev lifecycle`: a tiny run (one day, a few bottles, splits forced by the small partitions) prints its
screen and passes on a clean run; a report planted wrong, a notification sent twice or an event archived twice makes
it exit 1."""

import contextlib
import dataclasses
import functools
import json
import random
import re
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from shared.archive import parquet
from shared.archive.current import get_archive
from shared.instants import utc_now
from shared.notifications.checks.partitions import CheckPartition
from shared.settings import get_settings
from shared.store import schema
from shared.store.partitioning import BucketRange
from tests.checking import work
from tests.lifecycle_results import PERFECT, clean_result
from tools import lifecycle
from tools.archive_truth import ArchiveCheck
from tools.host.worker import InvocationFailed
from tools.lifecycle import run, screen, verdict
from tools.lifecycle.faults import WORKER_PREFIX, SkewedClock, Watch, WorkerKilled, store_calls_watched
from tools.lifecycle.result import PeakDrain
from tools.simulate.result import ReportCheck, Score

pytestmark = pytest.mark.integration

TINY = ["--days", "1", "--bottles", "4", "--seed", "3"]


def run_main(monkeypatch, registered_functions, tmp_path, tamper=None) -> int:
    """`./dev lifecycle` on a tiny plan, with the app's functions this process already has."""
    runner = functools.partial(run.run_lifecycle, progress=False, tamper=tamper)
    monkeypatch.setattr(run, "run_lifecycle", runner)  # where main imports it from
    return lifecycle.main([*TINY, "--chart", str(tmp_path / "lifecycle.png")])


def plant_a_wrong_report_and_a_second_send(db: Any, host: Any) -> None:
    """The latest hourly report counts a dose more than the source; one notification goes to the queue twice."""
    latest = max(db[schema.USER_HOURLY_REPORTS].find(), key=lambda report: report["hour"])
    db[schema.USER_HOURLY_REPORTS].update_one({"_id": latest["_id"]}, {"$inc": {"doses": 1}})
    queue = get_settings().notifications_queue
    message = json.dumps(
        {"notification_id": "n", "user_id": "u", "bottle_id": "b", "kind": "silent", "episode_start": "x"}
    )
    for _ in range(2):
        host.service.send(queue, message)


def test_a_clean_tiny_run_prints_its_screen_and_passes(monkeypatch, registered_functions, tmp_path, capsys):
    status = run_main(monkeypatch, registered_functions, tmp_path)

    out = capsys.readouterr().out
    assert "Lifecycle: 1 days, 4 bottles" in out
    assert "splits: " in out
    assert "bottle_actions" in out
    assert "throttled operations:" in out
    assert "hourly reports against the source" in out
    assert "all match" in out
    assert "duplicate notifications sent: 0" in out
    assert re.search(r"archive against the source \(\d+ events, \d+ bottle-hours of heartbeats .*\): all match", out)
    assert "late-dose notifications: sent once " in out
    assert "never sent 0" in out
    assert "verdict: PASS" in out, out
    assert status == 0
    assert (tmp_path / "lifecycle.png").stat().st_size > 10_000


def plant_an_event_twice_in_the_archive(db: Any, host: Any) -> None:
    """The first archived event copied into another file of the archive, as a second write by another name would."""
    archive = get_archive(get_settings())
    assert archive is not None
    name = archive.names("actions/")[0]
    found = archive.read(name)
    assert found is not None
    rows = parquet.decode(found.data)
    archive.write(name.replace(".parquet", "-again.parquet"), parquet.encode_actions(rows[:1]))


def plant_every_fault(db: Any, host: Any) -> None:
    plant_a_wrong_report_and_a_second_send(db, host)
    plant_an_event_twice_in_the_archive(db, host)


def test_a_planted_report_mismatch_a_second_send_and_an_event_archived_twice_each_fail_the_run(
    monkeypatch, registered_functions, tmp_path, capsys
):
    """The three faults planted in one tiny run, after its last step: the run's own checks find each, name it,
    and each is a reason of the verdict. One run rather than one a fault: a run costs the same whatever is
    planted, and each fault is found by a check of its own (the reports' ledger, the queue's sends, the archive's
    ledger) that the others do not touch; test_each_failure_alone_fails_the_verdict holds that each reason alone
    fails the verdict."""
    status = run_main(monkeypatch, registered_functions, tmp_path, tamper=plant_every_fault)

    out = capsys.readouterr().out
    assert status == 1
    assert "1 hourly reports differ from the source" in out
    assert "1 notifications sent more than once" in out
    assert "event archived 1x more than stored" in out
    assert "event in the wrong file" in out
    assert (
        "verdict: FAIL: 1 hourly reports differ from the source; 1 notifications sent more than once; "
        "the archive differs from the source in 2 ways"
    ) in out


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"daily_check": ReportCheck(1, None, ["user-000 2026-03-28: ..."])}, "1 daily reports differ from the source"),
        ({"duplicates": ["silent bottle-0001 episode x x2"]}, "1 notifications sent more than once"),
        ({"scores": {**PERFECT, "silent": Score(2, 3, 2)}}, "silent: precision 0.667, recall 1.000"),
        ({"scores": {**PERFECT, "left_open": Score(2, 1, 1)}}, "left_open: precision 1.000, recall 0.500"),
        ({"peak": PeakDrain(cap=2, sent_once=3, never_sent=1)}, "1 late-dose notifications never sent"),
        (
            {"archive_check": ArchiveCheck(None, None, None, problems=["event missing bottle-0001 opened at ..."])},
            "the archive differs from the source in 1 ways",
        ),
        (
            {"re_reads": 35, "re_read_floor": 34},
            "bottle actions re-read 35 times, over the bound of 34 (written since each split parent's last"
            " checkpoint, plus the overlap, and what killed workers had read since theirs)",
        ),
    ],
)
def test_each_failure_alone_fails_the_verdict(change, reason):
    assert clean_result().failures() == []

    failed = dataclasses.replace(clean_result(), **change)

    assert failed.failures() == [reason]
    assert "verdict: FAIL: " + reason in screen.describe(failed)


def test_re_reads_at_the_bound_pass():
    assert dataclasses.replace(clean_result(), re_reads=34, re_read_floor=34).failures() == []


class Queued:
    """A host whose notifications queue holds `messages` (what tools/lifecycle/verdict.py reads of it)."""

    def __init__(self, *messages: tuple[str, str]) -> None:
        self.queues = {
            get_settings().notifications_queue: [
                json.dumps(
                    {"notification_id": nid, "bottle_id": "bottle-1", "kind": "late_dose", "episode_start": episode}
                )
                for nid, episode in messages
            ]
        }


def test_a_resend_after_a_killed_mark_is_no_duplicate_but_any_other_second_send_is():
    resent = Queued(("n1", "e1"), ("n1", "e1"))
    twice_under_two_ids = Queued(("n1", "e1"), ("n2", "e1"))

    assert verdict.notifications_sent(resent, Counter({"n1": 1}))[1] == []
    assert verdict.notifications_sent(resent, Counter()) == (
        Counter({"late_dose": 2}),
        ["late_dose bottle-1 episode e1 x2"],
    )
    assert verdict.notifications_sent(twice_under_two_ids, Counter({"n1": 1, "n2": 1}))[1] == [
        "late_dose bottle-1 episode e1 x2"
    ]


def test_the_peak_counts_its_backlog_its_runs_and_each_notification_s_sends():
    host = Queued(("n1", "e1"), ("n2", "e2"), ("n2", "e2"), ("n3", "e3"))
    notifications = [
        {"_id": nid, "kind": "late_dose", "delivery": delivery}
        for nid, delivery in (("n1", "queued"), ("n2", "queued"), ("n3", "queued"), ("n4", "pending"))
    ]
    runs = [(0, 0), (2, 5), (2, 3), (2, 1), (1, 0), (0, 0), (1, 0)]  # a backlog of 7 drained in 4 runs

    drain = verdict.peak_drain(runs, notifications, host, Counter({"n2": 1}))

    assert drain == PeakDrain(cap=2, largest_backlog=7, runs_to_drain=4, sent_once=2, resent_after_kill=1, never_sent=1)


def test_a_worker_killed_marking_a_sent_batch_records_the_batch_s_ids():
    watch = Watch(random.Random(1), mark_kill_rate=1.0)
    mark = {
        "update": "notifications",
        "updates": [
            {"q": {"_id": nid, "delivery": "pending"}, "u": {"$set": {"delivery": "queued"}}} for nid in ("a", "b")
        ],
    }
    other = {"update": "notifications", "updates": [{"q": {"_id": "c"}, "u": {"$set": {"resolved_at": 1}}}]}

    with worker_thread():
        watch.before(other)  # kill_rate 0: not a mark, not killed
        with pytest.raises(WorkerKilled):
            watch.before(mark)

    assert watch.killed_marks == Counter({"a": 1, "b": 1})
    assert watch.kills == 1


@contextlib.contextmanager
def worker_thread() -> Iterator[None]:
    """Run the block as a queue worker would (tools/local_delivery.py names its delivery threads so)."""
    thread = threading.current_thread()
    name, thread.name = thread.name, f"{WORKER_PREFIX}0"
    try:
        yield
    finally:
        thread.name = name


def feed_read(*ids: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A change stream's first page of the actions, as pymongo sends and receives it."""
    command = {"aggregate": "bottle_actions", "pipeline": [{"$changeStream": {}}]}
    batch = [{"documentKey": {"_id": i}} for i in ids]
    return command, [{"cursor": {"id": 0, "firstBatch": batch}}]


def lease_update(fields: dict[str, Any], matched: int = 1) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    command = {"update": "leases", "updates": [{"q": {"_id": "x", "owner": "o"}, "u": {"$set": fields}}]}
    return command, [{"n": matched, "nModified": matched, "ok": 1}]


def test_what_a_killed_worker_read_since_its_last_checkpoint_joins_the_re_read_bound():
    """A killed report worker's partition is read again from its last checkpoint: what it read after that is a
    re-read the splits do not explain, and the bound counts it (the run's bound was the splits' alone)."""
    watch = Watch(random.Random(1), kill_rate=1.0)
    with worker_thread():
        watch.after(*feed_read("a", "b"))
        watch.after(*lease_update({"checkpoint_time": 1, "token": 1}))  # saved: a and b are not read again
        watch.after(*feed_read("c", "d", "e"))
        watch.after(*lease_update({"checkpoint_time": 2}, matched=0))  # fenced: not saved
        with pytest.raises(WorkerKilled):
            watch.before({"update": "leases"})

    assert watch.killed_unsaved == 3
    assert watch.reads == Counter(dict.fromkeys("abcde", 1))


def test_a_worker_that_released_its_lease_has_nothing_unsaved_when_it_is_killed_later():
    watch = Watch(random.Random(1), kill_rate=1.0)
    with worker_thread():
        watch.after(*feed_read("a"))
        watch.after(*lease_update({"owner": None, "released_at": 1}))
        with pytest.raises(WorkerKilled):
            watch.before({"find": "bottles"})

    assert watch.killed_unsaved == 0


def test_a_function_a_queue_worker_invoked_is_that_worker_s_to_kill_and_skew(real_db: Any) -> None:
    """The function runs on the Functions runtime's thread pool, not on the delivery thread that invoked it: the
    run's faults tell a worker's store calls and clock by the thread that asked for the invocation. (Told by the
    running thread's name, no worker was ever killed or skewed once every invocation went through the runtime.)"""
    clock = SkewedClock(utc_now(), {f"{WORKER_PREFIX}0": timedelta(minutes=2)})
    seen: dict[str, Any] = {}
    # Called inside the function, on the runtime's thread, before the worker's first read.
    watch = Watch(random.Random(1), kill_rate=1.0, before_read=lambda name: seen.setdefault("clock", clock()))

    def sweep_as_worker() -> None:
        try:
            work(CheckPartition("silent", BucketRange(0, 1)).message())
        except InvocationFailed as error:
            seen["failure"] = str(error)

    with store_calls_watched(watch):
        worker = threading.Thread(target=sweep_as_worker, name=f"{WORKER_PREFIX}0")
        worker.start()
        worker.join(timeout=120)
        work(CheckPartition("silent", BucketRange(0, 1)).message())  # the main thread's invocation: no worker's

    assert watch.kills == 1
    assert f"{WORKER_PREFIX}0 killed before its" in seen["failure"]
    assert seen["clock"] == clock.now + timedelta(minutes=2)
