"""What the lifecycle run does to the app from the outside, while it runs: each queue worker's clock skewed by
its own offset, workers killed at random in the middle of their store calls, splits landing while a report
worker reads a partition, and a count of every document the report workers read (to measure re-reads).

The store calls are caught where pymongo 4.20 (requirements.txt pins it) sends every command and cursor read:
`pymongo.synchronous.command_runner._run_command`. A command listener sees them too, but pymongo swallows what
a listener raises, so a kill could not be thrown from one. `store_calls_watched` replaces the function for the
block's duration and puts it back after."""

import contextlib
import random
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pymongo.synchronous import command_runner

from tools.local_host import invoking_thread_name

WORKER_PREFIX = "queue-worker-"  # tools/local_delivery.py names its delivery threads so
# A function runs on the Functions runtime's thread pool, not on the delivery thread that invoked it: a store call
# is told to be a worker's by the thread that asked for its invocation (invoking_thread_name).


class WorkerKilled(Exception):
    """A queue worker's instance died mid-run (raised from inside one of its store calls). Not a PyMongoError,
    so the app's handlers for store errors do not release its lease: as after a real crash, the lease expires
    and the host delivers the message again."""


def is_worker() -> bool:
    """Whether this store call is made by a function a queue worker invoked."""
    return invoking_thread_name().startswith(WORKER_PREFIX)


@dataclass
class SkewedClock:
    """The app's server clock (`shared.instants.set_clock`): the simulated instant, plus each queue worker's own
    offset (up to `max_skew` either way, fixed per worker), as instances of one app disagree on the time."""

    now: datetime
    offsets: dict[str, timedelta] = field(default_factory=dict)

    @classmethod
    def for_workers(cls, start: datetime, workers: int, rng: random.Random, max_skew: timedelta) -> "SkewedClock":
        seconds = max_skew.total_seconds()
        offsets = {f"{WORKER_PREFIX}{i}": timedelta(seconds=rng.uniform(-seconds, seconds)) for i in range(workers)}
        return cls(start, offsets)

    def __call__(self) -> datetime:
        return self.now + self.offsets.get(invoking_thread_name(), timedelta(0))


@dataclass
class Watch:
    """What the watched store calls do and saw. `kill_rate`: the chance that a queue worker's store call kills
    it; `before_read`: called on a worker's thread before each of its reads of a collection (with its name), where
    a split can land mid-page. `reads`: how often each document of `read_collection` reached a worker."""

    rng: random.Random
    kill_rate: float = 0.0
    read_collection: str = "bottle_actions"
    before_read: Callable[[str], None] | None = None
    killing: bool = True
    kills: int = 0
    mark_kill_rate: float = 0.0  # the chance that a worker dies sending a batch's "queued" marks (after its sends)
    killed_marks: Counter[Any] = field(default_factory=Counter)  # notification ids whose mark a kill prevented
    reads: Counter[Any] = field(default_factory=Counter)
    # What a killed worker had read of `read_collection` since its last checkpoint or release: the next run of its
    # partition reads it again (part of the re-read bound, tools/lifecycle/run.py).
    killed_unsaved: int = 0
    _unsaved: dict[str, set[Any]] = field(default_factory=dict)  # per worker thread, read since its last save
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _feed_cursors: set[Any] = field(default_factory=set)
    _hooked: threading.local = field(default_factory=threading.local)  # inside before_read: its own reads pass

    def before(self, command: Mapping[str, Any]) -> None:
        if not is_worker() or getattr(self._hooked, "inside", False):
            return
        name = _collection_of(command)
        if name is not None and self.before_read is not None and _is_read(command):
            self._hooked.inside = True
            try:
                self.before_read(name)
            finally:
                self._hooked.inside = False
        marked = _queued_marks(command)
        with self._lock:
            rate = self.mark_kill_rate if marked else self.kill_rate
            killed = self.killing and self.rng.random() < rate
            self.kills += killed
            if killed:
                self.killed_marks.update(marked)
                self.killed_unsaved += len(self._unsaved.pop(invoking_thread_name(), set()))
        if killed:
            raise WorkerKilled(f"{invoking_thread_name()} killed before its {next(iter(command))}")

    def after(self, command: Mapping[str, Any], replies: list[dict[str, Any]]) -> None:
        """Count what the feed's reads returned: change streams and polling by `received_at` (not the actions the
        aggregation loads to recompute an hour, which it reads whole by design)."""
        if not is_worker() or getattr(self._hooked, "inside", False):
            return
        if _saves_position(command, replies):
            with self._lock:
                self._unsaved.pop(invoking_thread_name(), None)
        if _collection_of(command) != self.read_collection:
            return
        with self._lock:
            if next(iter(command)) == "getMore":
                if command["getMore"] not in self._feed_cursors:
                    return
            elif _is_feed_read(command):
                self._feed_cursors.update(_cursor_id(reply) for reply in replies)
            else:
                return
            ids = [i for i in (_document_id(doc) for reply in replies for doc in _batch(reply)) if i is not None]
            self.reads.update(ids)
            self._unsaved.setdefault(invoking_thread_name(), set()).update(ids)

    @property
    def re_reads(self) -> int:
        """Documents read again after their first read (by any worker, for any reason)."""
        return sum(count - 1 for count in self.reads.values())


@contextlib.contextmanager
def store_calls_watched(watch: Watch) -> Iterator[Watch]:
    original = command_runner._run_command

    def watched(conn: Any, cmd: Any, *args: Any, **kwargs: Any) -> Any:
        watch.before(cmd)
        result = original(conn, cmd, *args, **kwargs)
        watch.after(cmd, result[0])
        return result

    command_runner._run_command = watched
    try:
        yield watch
    finally:
        command_runner._run_command = original


def _queued_marks(command: Mapping[str, Any]) -> list[Any]:
    """The notification ids a command marks queued (shared/notifications/delivery.py marks a batch once its
    messages were sent): a kill here is a kill between the sends and their mark."""
    if command.get("update") != "notifications":
        return []
    updates = command.get("updates") or []
    return [
        u["q"].get("_id")
        for u in updates
        if isinstance(u, Mapping) and str(u.get("u", {}).get("$set", {}).get("delivery")) == "queued"
    ]


def _saves_position(command: Mapping[str, Any], replies: list[dict[str, Any]]) -> bool:
    """A lease's checkpoint or release that took (shared/feeds/leases.py: an update of `leases` setting
    `checkpoint_time` or `released_at`, guarded by its owner): what the worker read before it is not read again."""
    if command.get("update") != "leases" or not any(reply.get("n") for reply in replies):
        return False
    sets = [u.get("u", {}).get("$set", {}) for u in command.get("updates") or [] if isinstance(u, Mapping)]
    return any(isinstance(s, Mapping) and ("checkpoint_time" in s or "released_at" in s) for s in sets)


def _collection_of(command: Mapping[str, Any]) -> str | None:
    name = next(iter(command), "")
    if name == "getMore":
        value = command.get("collection")
    elif name in ("find", "aggregate"):
        value = command.get(name)
    else:
        return None
    return value if isinstance(value, str) else None


def _is_read(command: Mapping[str, Any]) -> bool:
    return next(iter(command), "") in ("find", "aggregate", "getMore")


def _is_feed_read(command: Mapping[str, Any]) -> bool:
    """A change stream's aggregate, or a find polling by the server's receive time; not the archive's sweep, which
    reads each receive hour once more by design (a range with an upper bound: shared/archive/actions.py)."""
    if "aggregate" in command:
        stages = command.get("pipeline") or []
        return bool(stages) and isinstance(stages[0], Mapping) and "$changeStream" in stages[0]
    received = (command.get("filter") or {}).get("received_at")
    return received is not None and not (isinstance(received, Mapping) and "$lt" in received)


def _cursor_id(reply: Mapping[str, Any]) -> Any:
    cursor = reply.get("cursor")
    return cursor.get("id") if isinstance(cursor, Mapping) else None


def _batch(reply: Mapping[str, Any]) -> list[Any]:
    cursor = reply.get("cursor")
    if not isinstance(cursor, Mapping):
        return []
    batch = cursor.get("firstBatch", cursor.get("nextBatch", []))
    return batch if isinstance(batch, list) else []


def _document_id(document: Any) -> Any:
    """A change event's document key, or a found document's `_id`."""
    if not isinstance(document, Mapping):
        return None
    key = document.get("documentKey")
    if isinstance(key, Mapping):
        return key.get("_id")
    full = document.get("fullDocument")
    if isinstance(full, Mapping):
        return full.get("_id")
    return document.get("_id")
