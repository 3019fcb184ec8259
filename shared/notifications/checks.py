"""The three notification checks: bottles left open, silent bottles, late doses. Each finds its bottles with
indexed range queries over status fields that ingestion keeps current, so a sweep reads only the bottles in
trouble (or whose trouble just ended), never the fleet; results are streamed and written in batches.

A check's timer runs on one instance (timers never scale out), so it only dispatches one work message per
partition (`dispatch`: CHECK_PARTITIONS ranges of the 1024 hash buckets of `bottle_id`), and a queue-triggered
worker sweeps each (`run_check`) with one range query per sweep over its buckets, within its own time budget,
sending only its own pending notifications. Per check, two sweeps: **detect** (bottles in trouble not yet
notified: a notification per episode, then a guarded write that marks the episode handled) and **resolve**
(bottles whose notified trouble ended: `resolved_at`, and the marker goes). Every write is guarded by the state it
read, so a run racing ingestion or another run never undoes either; a notification recorded twice is a
duplicate-key no-op. A marker write that a device request made miss is settled in the same run (`_settle`), so
a notification whose episode ended never stays unresolved. Why the queries have this shape, and which fields each
check reads and sets: docs/checks.md.
"""

import itertools
import json
import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, cast

from pymongo import UpdateMany, UpdateOne
from pymongo.collection import Collection
from pymongo.cursor import Cursor
from pymongo.database import Database
from pymongo.errors import PyMongoError

from shared import metrics
from shared.doses.due_tracking import plan_of, review_update
from shared.doses.schedules import DosePlan, Review
from shared.notifications import delivery
from shared.notifications import documents as notifications
from shared.notifications.documents import KINDS, Episode, Kind
from shared.settings import Settings
from shared.store import schema
from shared.store.optimistic import AGAIN, Round, until_landed
from shared.store.pacing import Pace
from shared.store.partitioning import BUCKET_FIELD, BucketRange
from shared.store.retries import RetryPolicy, StoreUnavailable, count_matched, with_retries

log = logging.getLogger(__name__)

# A late dose found this long after it went late (the checks were down) is recorded but not sent.
PUSH_WITHIN = timedelta(hours=24)
# Every stored instant is after this. As the lower bound of every sweep's range it keeps the index scan off the
# null keys of bottles without that state (most of the fleet), on any engine, and turns "this marker is set"
# into a range.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

Document = dict[str, Any]


@dataclass
class Writes:
    """What one batch of bottles leads to, written as (at most) three bulk writes."""

    episodes: list[Episode] = field(default_factory=list)
    resolutions: list[UpdateOne | UpdateMany] = field(default_factory=list)
    status: list[UpdateOne] = field(default_factory=list)


Handler = Callable[[Document, Writes], None]
# What a check does for a bottle whose episodes it recorded when the marker write may have missed: given the bottle
# as read again and those episodes (the same bottle's, oldest first), the writes that make the notifications
# resolved now or seen by the resolve sweep (_settle).
Settler = Callable[[Document, list[Episode], Writes], None]


@dataclass(frozen=True)
class Sweep:
    name: str
    selector: Document
    handle: Handler


@dataclass(frozen=True)
class Check:
    kind: Kind
    collection: str
    projection: Document
    sweeps: Callable[[datetime, Settings], list[Sweep]]
    settler: Callable[[datetime, Settings], Settler]


@dataclass(frozen=True)
class CheckPartition:
    """One check's sweep of one bucket range: what a work message names, e.g.
    `{"kind": "late_dose", "partition": 2, "of": 4}`."""

    kind: Kind
    buckets: BucketRange

    @property
    def name(self) -> str:
        return f"{self.kind}:{self.buckets.index}/{self.buckets.count}"

    def message(self) -> str:
        """The work message the dispatcher sends for this partition (JSON)."""
        body = {"kind": self.kind, "partition": self.buckets.index, "of": self.buckets.count}
        return json.dumps(body, separators=(",", ":"))

    @classmethod
    def from_message(cls, body: str | bytes) -> "CheckPartition":
        """The partition a work message names; ValueError for anything else (the invocation fails, so the host
        retries the message and then moves it to the poison queue)."""
        try:
            message = json.loads(body)
        except ValueError as error:
            raise ValueError(f"a check's work message is JSON, not {body!r:.200}") from error
        if not isinstance(message, dict) or set(message) != {"kind", "partition", "of"}:
            raise ValueError(f"not a check's work message: {message!r:.200}")
        kind, index, count = message["kind"], message["partition"], message["of"]
        if kind not in KINDS or type(index) is not int or type(count) is not int:
            raise ValueError(f"not a check's work message: {message!r:.200}")
        return cls(cast(Kind, kind), BucketRange(index, count))  # BucketRange refuses a partition out of range


def partitions(kind: Kind, settings: Settings) -> list[CheckPartition]:
    """The partitions of a check: CHECK_PARTITIONS bucket ranges covering every bucket once."""
    return [CheckPartition(kind, BucketRange(i, settings.check_partitions)) for i in range(settings.check_partitions)]


def dispatch(kind: Kind, *, settings: Settings, send: Callable[[list[str]], None]) -> list[CheckPartition]:
    """One run of a check's timer: a work message per partition, all handed to `send` at once (the queue output
    binding, which the host writes after the function returns: a message lost there costs that partition one
    sweep, and the next timer run sends it again). The partitions dispatched."""
    dispatched = partitions(kind, settings)
    send([partition.message() for partition in dispatched])
    return dispatched


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
) -> CheckRun:
    """One run of a check on one partition at `now`: its sweeps within the partition's buckets (for at most
    CHECKS_TIME_BUDGET_SECONDS of work), then the partition's pending notifications of the kind (at most
    QUEUE_MESSAGES_PER_PARTITION), sent one `send` each. Nothing outside the partition is read or written.

    With `sleep` (the function's), a sweep with a spread (pace_of) waits for each batch to be due, sending the
    notifications recorded so far before it waits, so its writes and sends spread over the spread instead of
    landing in its first minute; the waits do not count against the budget. Without it (tools, tests) it runs
    unpaced."""
    check = CHECKS[kind]
    policy = RetryPolicy.for_run(settings, settings.checks_time_budget_seconds)
    run = CheckRun(kind, partition)
    within = partition.selector(BUCKET_FIELD)
    started = clock()
    deadline = started + settings.checks_time_budget_seconds
    sending = _Delivering(db, kind, partition, now, send, settings.queue_messages_per_partition)
    pace = None if sleep is None else pace_of(db, kind, within, now=now, settings=settings, policy=policy)
    pacer = None if pace is None or sleep is None else _Pacer(pace, now, started, clock, sleep)
    batches_done = 0
    for sweep in check.sweeps(now, settings):
        # The partition's range first: a store that bounds one range per query (SecantusDB) plans by the first.
        selector = {**within, **sweep.selector}
        for batch in _batches(db[check.collection], selector, check.projection, settings.check_batch_size, policy):
            if pacer is not None and sweep.name == DETECT:
                waited = pacer.wait_for_batch(batches_done, sending, _sending(settings, deadline, clock))
                deadline += waited
                run.paced = run.paced or waited > 0
            writes = Writes()
            for document in batch:
                sweep.handle(document, writes)
            _apply(db, check, writes, now=now, settings=settings, policy=policy, run=run)
            run.examined += len(batch)
            batches_done += sweep.name == DETECT
            if clock() > deadline:
                run.complete = False
                break
        if not run.complete:
            break
    sending.send(_sending(settings, deadline, clock))
    run.queued, run.send_failed, run.send_out_of_time = sending.queued, sending.failed, sending.out_of_time
    pending = _still_pending(
        db,
        kind,
        partition,
        found=sending.found,
        all_sent=not (sending.failed or sending.out_of_time),
        limit=sending.limit,
        policy=_sending(settings, deadline, clock).request_policy(),
    )
    exhausted = not run.complete or sending.out_of_time
    metrics.check_run(kind, partition=_label(partition), budget_exhausted=exhausted, pending=pending)
    return run


DETECT = "detect"


def spread_of(kind: Kind, settings: Settings) -> timedelta:
    """How long a check's sweep spreads its batches over: CHECK_LATE_DOSES_SPREAD_MINUTES for the late-dose
    check, whose morning peak lands in one sweep; the others find a few bottles a sweep and run unpaced."""
    return timedelta(minutes=settings.check_late_doses_spread_minutes if kind == "late_dose" else 0)


def pace_of(
    db: Database[Any], kind: Kind, within: Document, *, now: datetime, settings: Settings, policy: RetryPolicy
) -> Pace | None:
    """The pace of a partition's detect sweep (shared/store/pacing.py: its batches spread evenly from `now` over the
    check's spread), counting on the batches its bottles in trouble fill now (one indexed count, only when the
    check has a spread); None: unpaced (no spread, or fewer batches than the spread has minutes)."""
    spread = spread_of(kind, settings)
    if not spread:
        return None
    check = CHECKS[kind]
    [detect] = [sweep for sweep in check.sweeps(now, settings) if sweep.name == DETECT]
    selector = {**within, **detect.selector}
    found = with_retries(lambda: db[check.collection].count_documents(selector), policy)
    return Pace.over(now, spread, math.ceil(found / settings.check_batch_size))


@dataclass(frozen=True)
class _Pacer:
    """How a paced run waits for its detect batches: its pace, when it began (`now`, and `started` on `clock`)."""

    pace: Pace
    now: datetime
    started: float
    clock: Callable[[], float]
    sleep: Callable[[float], None]

    def wait_for_batch(self, done: int, sending: "_Delivering", by: delivery.Sending) -> float:
        """Wait until the detect batch after `done` ones is due, first sending what those recorded (so each
        notification goes out about when its batch was due, not at the end of the spread); the seconds waited.
        The first batch is due at once."""
        wall = self.now + timedelta(seconds=self.clock() - self.started)
        due_in = 0.0 if done == 0 else self.pace.wait(done, wall, wall)  # the batches so far just done
        if due_in <= 0:
            return 0.0
        before = self.clock()
        sending.send(by)
        if (left := before + due_in - self.clock()) > 0:
            self.sleep(left)
        return self.clock() - before


@dataclass
class _Delivering:
    """A run's sending, once at its end or also between paced batches: what it queued, and how the last send
    ended (`found` of at most `limit` pending; `limit` 0: the cap was used up, so more may be pending)."""

    db: Database[Any]
    kind: Kind
    partition: BucketRange
    now: datetime
    send_one: delivery.Send
    cap: int
    queued: int = 0
    found: int = 0
    limit: int = 0
    failed: bool = False
    out_of_time: bool = False

    def send(self, sending: delivery.Sending) -> None:
        """Send the partition's pending notifications, up to what is left of the run's cap; nothing more once a
        send failed or the deadline passed (the rest stays pending for the partition's next run)."""
        left = self.cap - self.queued
        if self.failed or self.out_of_time or left <= 0:
            self.found = self.limit = 0
            return
        sent = delivery.send_pending(
            self.db,
            self.kind,
            partition=self.partition,
            now=self.now,
            limit=left,
            send=self.send_one,
            sending=sending,
        )
        self.queued += sent.queued
        self.found, self.limit = sent.found, left
        self.failed, self.out_of_time = sent.failed, sent.out_of_time


def _sending(settings: Settings, deadline: float, clock: Callable[[], float]) -> delivery.Sending:
    """Sending stops at the run's budget, but has at least one request deadline's time even when the sweep used
    the budget up (notifications are what the run is for; at QUEUE_SEND_CONCURRENCY sends at once that time
    covers a partition's cap, benchmarks/checks.py measures it); each store request gets a deadline of its own."""
    return delivery.Sending(
        send_until=max(deadline, clock() + settings.request_deadline_seconds),
        concurrency=settings.queue_send_concurrency,
        request_policy=lambda: RetryPolicy.for_request(settings, clock),
        clock=clock,
    )


def _label(partition: BucketRange) -> str:
    """The partition as the metrics name it: `index/count`."""
    return f"{partition.index}/{partition.count}"


def _still_pending(
    db: Database[Any],
    kind: Kind,
    partition: BucketRange,
    *,
    found: int,
    all_sent: bool,
    limit: int,
    policy: RetryPolicy,
) -> int | None:
    """The partition's notifications of `kind` left pending after delivery: none when every send succeeded below
    its cap (it sent all it found), else counted with one query over the delivery_pending index. None if that
    fails, an outage or a fault alike (a fault is logged with its trace): the run's sends and marks are done and
    stay done, and failing the run for a figure would only run it again."""
    if all_sent and found < limit:
        return 0
    try:
        return with_retries(
            lambda: db[schema.NOTIFICATIONS].count_documents(delivery.pending_selector(kind, partition)), policy
        )
    except StoreUnavailable as error:
        log.warning("%s %s: pending notifications not counted: %s", kind, _label(partition), error)
        return None
    except PyMongoError:
        log.exception("%s %s: pending notifications not counted: a database fault", kind, _label(partition))
        return None


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
    settings: Settings,
    policy: RetryPolicy,
    run: CheckRun,
) -> None:
    """Notifications first, then resolutions, then the markers: a run that dies part-way leaves the bottle in
    range for the next run, which finds the notification already there. A marker write that missed (a device
    request came between the sweep's read and the write) is settled at once (_settle)."""
    new = notifications.record(db, writes.episodes, now, policy)
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
    marker alone (which only the checks write), so that the resolve sweep sees it. A marker write that loses to
    another check run is read and settled again (at most MAX_ROUNDS rounds; then the run fails and its message
    is retried)."""
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


def _key(document: Document) -> Document:
    return {"_id": document["_id"], "bottle_id": document["_id"]}


def _episode(document: Document, kind: Kind, start: datetime, push: bool = True) -> Episode:
    return Episode(document["_id"], document["user_id"], document["medication"], kind, start, push)


def _one_marker_settler(
    kind: Kind, marker: str, pending: str, ended: Callable[[Document, datetime], bool]
) -> Callable[[datetime, Settings], Settler]:
    """The settler of a check whose marker holds one episode and whose notifications are resolved one by one (left
    open, silent). `ended(document, start)`: the bottle as read again shows that episode over.

    The latest episode recorded: already marked, nothing to do; over, resolved now (by the owner it was recorded
    for); else marked, guarded by the marker as read (which only the checks write, so a device request cannot make
    it miss), with `pending` set so the resolve sweep looks at it: an earlier episode's marker found there is of an
    episode over (this one began after it), resolved too. An earlier episode recorded for the bottle in the same
    batch (a cursor that met it twice) is over for the same reason."""

    def settler(now: datetime, settings: Settings) -> Settler:
        def settle(document: Document, recorded: list[Episode], writes: Writes) -> None:
            *earlier, latest = recorded
            over = [(e.user_id, e.start) for e in earlier if e.start != latest.start]  # (owner, episode start)
            notified = document.get(marker)
            if notified != latest.start and ended(document, latest.start):
                over.append((latest.user_id, latest.start))
            elif notified != latest.start:
                if notified is not None:
                    over.append((document["user_id"], notified))
                writes.status.append(
                    UpdateOne({**_key(document), marker: notified}, {"$set": {marker: latest.start, pending: True}})
                )
            for user_id, start in over:
                writes.resolutions.append(notifications.resolve_episode(user_id, document["_id"], kind, start, now))

        return settle

    return settler


# --- left open ------------------------------------------------------------------------------------------------


def _open_sweeps(now: datetime, settings: Settings) -> list[Sweep]:
    cutoff = now - timedelta(minutes=settings.left_open_minutes)

    def handle(bottle: Document, writes: Writes) -> None:
        episode = bottle.get("open_since") if bottle.get("last_action") == "opened" else None
        notified = bottle.get("open_episode")
        if notified is not None and notified != episode:  # closed, or opened again since
            writes.resolutions.append(
                notifications.resolve_episode(bottle["user_id"], bottle["_id"], "left_open", notified, now)
            )
            writes.status.append(
                UpdateOne({**_key(bottle), "open_episode": notified}, {"$unset": {"open_episode": ""}})
            )
        if episode is not None and (episode < cutoff or episode == notified):
            if episode != notified:
                writes.episodes.append(_episode(bottle, "left_open", episode))
            writes.status.append(
                UpdateOne(
                    {**_key(bottle), "open_since": episode, "open_pending": True},
                    {"$set": {"open_pending": False, "open_episode": episode}},
                )
            )

    return [
        Sweep("detect", {"open_pending": True, "open_since": {"$gte": EPOCH, "$lt": cutoff}}, handle),
        Sweep("resolve", {"open_pending": True, "open_episode": {"$gte": EPOCH}}, handle),
    ]


def _over_if_not_open_since(bottle: Document, start: datetime) -> bool:
    """A left-open episode is over once the bottle was closed, or opened again, since `start`."""
    return bottle.get("last_action") != "opened" or bottle.get("open_since") != start


# --- silent ---------------------------------------------------------------------------------------------------


def _silent_sweeps(now: datetime, settings: Settings) -> list[Sweep]:
    cutoff = now - timedelta(minutes=settings.silent_minutes)

    def handle(beats: Document, writes: Writes) -> None:
        alive_at = beats["alive_at"]
        notified = beats.get("silent_episode")
        if notified is not None and alive_at > notified:  # heard from since
            writes.resolutions.append(
                notifications.resolve_episode(beats["user_id"], beats["_id"], "silent", notified, now)
            )
            writes.status.append(
                UpdateOne({**_key(beats), "silent_episode": notified}, {"$unset": {"silent_episode": ""}})
            )
        if alive_at < cutoff or alive_at == notified:
            if alive_at != notified:
                writes.episodes.append(_episode(beats, "silent", alive_at))
            writes.status.append(
                UpdateOne(
                    {**_key(beats), "alive_at": alive_at, "silent_pending": True},
                    {"$set": {"silent_pending": False, "silent_episode": alive_at}},
                )
            )

    return [
        Sweep("detect", {"silent_pending": True, "alive_at": {"$gte": EPOCH, "$lt": cutoff}}, handle),
        Sweep("resolve", {"silent_pending": True, "silent_episode": {"$gte": EPOCH}}, handle),
    ]


def _over_if_heard_since(beats: Document, start: datetime) -> bool:
    """A silence is over once the bottle was heard from after `start` (its last heartbeat then)."""
    return bool(beats["alive_at"] > start)


# --- late doses -----------------------------------------------------------------------------------------------


def _review(bottle: Document, plan: DosePlan, now: datetime, settings: Settings) -> Review:
    """The bottle's due slot reviewed at `now` against the doses it holds (shared/doses/schedules.py)."""
    doses = bottle.get("doses", [])
    return plan.review(
        bottle["dose_due"],
        doses,
        now,
        since=bottle.get("dose_review_from"),
        history_full=len(doses) >= settings.dose_history,
    )


def _reach(bottle: Document, now: datetime, settings: Settings) -> datetime | None:
    """The latest slot whose late-dose notification the bottle's doses resolve (None: it has no dose). A late
    slot's notification is resolved by a dose the schedule counts for that slot or a later one (the late dose, one
    uploaded late that was in time), or by a dose taken after the slot's grace ran out (the next dose), never by a
    dose counted for an earlier slot (docs/checks.md). That is every slot up to the later of the latest slot
    counted for a dose and the last dose minus grace: on `times` a dose counted for a later slot is past the grace
    of every earlier slot left unsatisfied (within it, it would have taken that slot), and a dose at exactly a
    slot plus grace is within that slot's grace, so both bounds are inclusive."""
    last_dose: datetime | None = bottle.get("last_dose_time")
    if last_dose is None:
        return None
    plan = plan_of(bottle)
    counted = _review(bottle, plan, now, settings).latest_counted
    return last_dose - plan.grace if counted is None else max(counted, last_dose - plan.grace)


def _late_sweeps(now: datetime, settings: Settings) -> list[Sweep]:
    def detect(bottle: Document, writes: Writes) -> None:
        plan = plan_of(bottle)
        review = _review(bottle, plan, now, settings)
        for slot in review.late:
            writes.episodes.append(_episode(bottle, "late_dose", slot, push=now - (slot + plan.grace) <= PUSH_WITHIN))
        writes.status.append(review_update(bottle, plan, review))

    def resolve(bottle: Document, writes: Writes) -> None:
        """Resolve the bottle's late-dose notifications up to the slot its doses reach (_reach); the marker goes
        once that covers it."""
        last_dose = bottle.get("last_dose_time")
        notified = bottle["late_episode"]
        # Guarded by the doses it read too: one uploaded late moves `dose_seq`, not always `last_dose_time`.
        guard = {**_key(bottle), "last_dose_time": last_dose, "dose_seq": bottle.get("dose_seq")}
        reach = _reach(bottle, now, settings)
        if reach is None:
            writes.status.append(UpdateOne(guard, {"$set": {"dose_pending": False}}))
            return
        writes.resolutions.append(
            notifications.resolve_up_to(bottle["user_id"], bottle["_id"], "late_dose", reach, now)
        )
        if notified <= reach:
            writes.status.append(
                UpdateOne(
                    {**guard, "late_episode": notified},
                    {"$set": {"dose_pending": False}, "$unset": {"late_episode": ""}},
                )
            )
        else:  # a later slot is still unresolved
            writes.status.append(UpdateOne(guard, {"$set": {"dose_pending": False}}))

    return [
        Sweep("detect", {"dose_late_at": {"$gte": EPOCH, "$lte": now}}, detect),
        Sweep("resolve", {"dose_pending": True, "late_episode": {"$gte": EPOCH}}, resolve),
    ]


def _late_settler(now: datetime, settings: Settings) -> Settler:
    """The late-dose check's settler. Its marker is the latest slot notified and not yet resolved (written with
    `$max`) and its resolutions reach every slot up to one (_reach), so nothing needs a guard: the slots the
    bottle's doses reach (as read again) are resolved now, and a later one recorded is marked with `$max` and
    `dose_pending`, so the resolve sweep looks at it. Already marked (at or past the latest slot recorded):
    nothing to do."""

    def settle(bottle: Document, recorded: list[Episode], writes: Writes) -> None:
        earliest, latest = recorded[0], recorded[-1]
        notified = bottle.get("late_episode")
        if notified is not None and notified >= latest.start:
            return
        reach = _reach(bottle, now, settings)
        if reach is not None and reach >= earliest.start:
            writes.resolutions.append(
                notifications.resolve_up_to(earliest.user_id, bottle["_id"], "late_dose", reach, now)
            )
        if reach is None or reach < latest.start:
            writes.status.append(
                UpdateOne(_key(bottle), {"$max": {"late_episode": latest.start}, "$set": {"dose_pending": True}})
            )

    return settle


_BOTTLE_FIELDS = ("user_id", "medication")
CHECKS: dict[Kind, Check] = {
    "left_open": Check(
        "left_open",
        schema.BOTTLES,
        dict.fromkeys((*_BOTTLE_FIELDS, "last_action", "open_since", "open_pending", "open_episode"), 1),
        _open_sweeps,
        _one_marker_settler("left_open", "open_episode", "open_pending", _over_if_not_open_since),
    ),
    "silent": Check(
        "silent",
        schema.BOTTLE_HEARTBEATS,
        dict.fromkeys((*_BOTTLE_FIELDS, "alive_at", "silent_pending", "silent_episode"), 1),
        _silent_sweeps,
        _one_marker_settler("silent", "silent_episode", "silent_pending", _over_if_heard_since),
    ),
    "late_dose": Check(
        "late_dose",
        schema.BOTTLES,
        dict.fromkeys(
            (
                *_BOTTLE_FIELDS,
                "schedule",
                "grace_minutes",
                "provisioned_at",
                "schedule_from",
                "dose_due",
                "dose_review_from",
                "dose_seq",
                "doses",
                "last_dose_time",
                "late_episode",
            ),
            1,
        ),
        _late_sweeps,
        _late_settler,
    ),
}
