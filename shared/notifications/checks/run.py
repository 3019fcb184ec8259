"""One run of a check on one partition (`run_check`): its detect and resolve sweeps (rules.py), each one range
query over the partition's buckets, streamed and written in batches within CHECKS_TIME_BUDGET_SECONDS, then the
partition's pending notifications sent (sending.py). Nothing outside the partition is read or written.

Per batch: the notifications first (a duplicate-key no-op when recorded before), then the resolutions, then the
guarded marker writes; a marker write that a device request made miss is settled in the same run (`_settle`), so
a notification whose episode ended never stays unresolved (docs/checks.md, A device request during a run)."""

import functools
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from pymongo.collection import Collection
from pymongo.cursor import Cursor
from pymongo.database import Database
from pymongo.errors import PyMongoError

from shared.instants import to_stored
from shared.notifications import delivery
from shared.notifications import documents as notifications
from shared.notifications.checks.pacing import Pacer, pace_of
from shared.notifications.checks.partitions import partition_label
from shared.notifications.checks.rules import CHECKS, DETECT, Check, Document, Writes
from shared.notifications.checks.sending import RunSending, sending_until, still_pending
from shared.notifications.documents import Episode, Kind
from shared.settings import Settings
from shared.store.optimistic import AGAIN, Round, until_landed
from shared.store.partitioning import BUCKET_FIELD, BucketRange
from shared.store.retries import RetryPolicy, count_matched, with_retries
from shared.telemetry import metrics


@dataclass
class CheckRun:
    """What a check run of one partition did: for its invocation log line and the tests."""

    kind: Kind
    partition: BucketRange
    examined: int = 0
    notified: int = 0
    withheld: int = 0
    resolved: int = 0
    queued: int = 0
    send_failed: bool = False  # a queue send failed: the rest stays pending for the next run
    send_out_of_time: bool = False  # the send deadline passed: the rest stays pending for the next run
    complete: bool = True  # False: the time budget ran out; the next run carries on
    paced: bool = False  # its detect sweep waited for batches to be due (pace_of)


def run_check(
    db: Database[Any],
    kind: Kind,
    *,
    partition: BucketRange,
    now: datetime,
    settings: Settings,
    send: delivery.Send,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] | None = None,
    wall: Callable[[], datetime] | None = None,
) -> CheckRun:
    """One run of a check on one partition at `now`: its sweeps within the partition's buckets (for at most
    CHECKS_TIME_BUDGET_SECONDS of work), then the partition's pending notifications of the kind (at most
    QUEUE_MESSAGES_PER_PARTITION), sent one `send` each. Nothing outside the partition is read or written.

    With `sleep` (the function's), a sweep with a spread (pace_of) waits for each batch to be due, sending the
    notifications recorded so far before it waits, so its writes and sends spread over the spread instead of
    landing in its first minute; the waits count neither against the budget nor against the run's deadline for
    the store (the budget plus REQUEST_DEADLINE_SECONDS of work). Without it (tools, tests) it runs unpaced.

    A notification's `created_at` is the instant its batch is written, read from `wall` (the function's: the server
    clock) or, without it, `now` plus the time gone by on `clock`: not the run's start, which a paced sweep writes
    minutes after (the read API's feed orders and follows by it: docs/api.md, Following the feed)."""
    check = CHECKS[kind]
    run = CheckRun(kind, partition)
    within = partition.selector(BUCKET_FIELD)
    started = clock()
    deadline = started + settings.checks_time_budget_seconds
    paused = 0.0  # the paced waits so far: no work, so neither the budget nor the store's deadline counts them

    def working() -> float:
        return time.monotonic() - paused

    # The store's deadline is on the monotonic clock, as every policy's, with the waits (measured on `clock`, the
    # same clock in the function) taken off: a paced sweep waits for minutes, and a deadline that counted them
    # refused every store request after the first minute (the run failed, and its retried message paced again).
    policy = RetryPolicy.for_run(settings, settings.checks_time_budget_seconds, clock=working)
    sending = RunSending(db, kind, partition, now, send, settings.queue_messages_per_partition)
    pace = None if sleep is None else pace_of(db, kind, within, now=now, settings=settings, policy=policy)
    pacer = None if pace is None or sleep is None else Pacer(pace, now, started, clock, sleep)
    batches_done = 0
    for sweep in check.sweeps(now, settings):
        # The partition's range first: a store that bounds one range per query (SecantusDB) plans by the first.
        selector = {**within, **sweep.selector}
        for batch in _batches(db[check.collection], selector, check.projection, settings.check_batch_size, policy):
            if pacer is not None and sweep.name == DETECT:
                send_recorded = functools.partial(sending.send, sending_until(settings, deadline, clock))
                waited = pacer.wait_for_batch(batches_done, send_recorded)
                deadline += waited
                paused += waited
                run.paced = run.paced or waited > 0
            writes = Writes()
            for document in batch:
                sweep.handle(document, writes)
            written_at = to_stored(wall() if wall is not None else now + timedelta(seconds=clock() - started))
            _apply(db, check, writes, now=now, written_at=written_at, settings=settings, policy=policy, run=run)
            run.examined += len(batch)
            batches_done += sweep.name == DETECT
            if clock() > deadline:
                run.complete = False
                break
        if not run.complete:
            break
    sending.send(sending_until(settings, deadline, clock))
    run.queued, run.send_failed, run.send_out_of_time = sending.queued, sending.failed, sending.out_of_time
    pending = still_pending(sending, sending_until(settings, deadline, clock).request_policy())
    exhausted = not run.complete or sending.out_of_time
    metrics.check_run(kind, partition=partition_label(partition), budget_exhausted=exhausted, pending=pending)
    return run


def _batches(
    collection: Collection[Any], selector: Document, projection: Document, size: int, policy: RetryPolicy
) -> Iterator[list[Document]]:
    """The sweep's documents, `size` at a time, each batch fetched (find, then getMore) through the run's retry
    policy. A cursor whose getMore failed is closed, so a retry opens the query again: the documents the run has
    handled left its range (their markers were cleared), and one it meets again (a guarded write that lost a
    race) is handled again, harmlessly."""
    cursor: Cursor[Any] | None = None

    def next_batch() -> list[Document]:
        nonlocal cursor
        if cursor is None:
            cursor = collection.find(selector, projection, batch_size=size)
        try:
            return list(itertools.islice(cursor, size))
        except PyMongoError:
            cursor.close()
            cursor = None
            raise

    try:
        while batch := with_retries(next_batch, policy):
            yield batch
    finally:
        if cursor is not None:
            cursor.close()


def _apply(
    db: Database[Any],
    check: Check,
    writes: Writes,
    *,
    now: datetime,
    written_at: datetime,
    settings: Settings,
    policy: RetryPolicy,
    run: CheckRun,
) -> None:
    """Notifications first (created at `written_at`), then resolutions, then the markers: a run that dies part-way
    leaves the bottle in range for the next run, which finds the notification already there. A marker write that
    missed (a device request came between the sweep's read and the write) is settled at once (_settle)."""
    new = notifications.record(db, writes.episodes, written_at, policy)
    run.notified += len(new)
    run.withheld += sum(1 for e in new if not e.push)
    run.resolved += notifications.apply_resolutions(db, writes.resolutions, policy)
    if not writes.status:
        return
    matched = count_matched(db[check.collection], writes.status, policy)
    if matched < len(writes.status) and writes.episodes:
        run.resolved += _settle(db, check, writes.episodes, now=now, settings=settings, policy=policy)


def _settle(
    db: Database[Any], check: Check, episodes: list[Episode], *, now: datetime, settings: Settings, policy: RetryPolicy
) -> int:
    """Make sure every episode just recorded is resolved or marked, after a batch's marker writes matched fewer
    bottles than they were sent to; how many notifications this resolved.

    A guarded marker write misses when a device request changed the bottle after the sweep read it (closed,
    heard from, a dose uploaded), and that request usually takes the bottle out of the detect range; without its
    marker the resolve sweep would never look at it again, and the notification would stay unresolved. So the
    bottles that had an episode recorded are read again (one query, only after a miss, so a run without races
    pays nothing), and each check's settler resolves an episode that has ended now, or marks it, guarded by the
    marker as read (which only the checks write), so that the resolve sweep sees it. A settle write that loses to
    another check run (the marker cleared, replaced or added to) is read and settled again (at most MAX_ROUNDS
    rounds; then the run fails and its message is retried)."""
    by_bottle: dict[str, list[Episode]] = {}
    for episode in sorted(episodes, key=lambda e: e.start):
        by_bottle.setdefault(episode.bottle_id, []).append(episode)
    settle = check.settler(now, settings)
    collection = db[check.collection]
    resolved = 0

    def settle_round() -> Literal[Round.AGAIN] | None:
        nonlocal by_bottle, resolved
        ids = list(by_bottle)
        selector = {"_id": {"$in": ids}, "bottle_id": {"$in": ids}}  # the shard key: routed to their partitions
        found = with_retries(lambda: list(collection.find(selector, check.projection)), policy)
        writes, marking = Writes(), {}
        for document in found:
            marked = len(writes.status)
            settle(document, by_bottle[document["_id"]], writes)
            if len(writes.status) > marked:
                marking[document["_id"]] = by_bottle[document["_id"]]
        resolved += notifications.apply_resolutions(db, writes.resolutions, policy)
        if writes.status and count_matched(collection, writes.status, policy) < len(writes.status):
            by_bottle = marking  # one of these lost to another run's marker write: read them again
            return AGAIN
        return None

    until_landed(settle_round, f"the {check.kind} markers", policy)
    return resolved
