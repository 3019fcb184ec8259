"""Azure Storage queues in process, as the Functions host's queue trigger sees them: what `LocalHost` sends queue
output bindings to and delivers queue triggers from (`QueueService`, whose docstring states the Storage semantics
it keeps). Where the local server uses them: docs/local-development.md.
"""

import heapq
import itertools
import json
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from shared.instants import utc_now

Clock = Callable[[], datetime]

HOST_JSON = Path(__file__).resolve().parent.parent / "host.json"
TIME_TO_LIVE = timedelta(days=7)  # Storage's default, which the queue output binding keeps
MAX_BATCH = 32  # the most messages one Get Messages returns
_TIMESPAN = re.compile(r"^(?:(\d+)\.)?(\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.(\d{1,7}))?$")
_QUEUE_NAME = re.compile(r"^(?!.*--)[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")


def parse_timespan(text: str) -> timedelta:
    """A .NET TimeSpan as host.json writes it: `[d.]hh:mm:ss[.fffffff]`."""
    match = _TIMESPAN.match(text.strip())
    if match is None:
        raise ValueError(f"'{text}' is not a timespan ([d.]hh:mm:ss[.fff])")
    days, hours, minutes, seconds, fraction = match.groups()
    return timedelta(
        days=int(days or 0),
        hours=int(hours),
        minutes=int(minutes),
        seconds=int(seconds),
        microseconds=round(float(f"0.{fraction or 0}") * 1_000_000),
    )


def check_queue_name(name: str) -> str:
    """`name` if it keeps Storage's rule for queue names (3-63 lower-case letters, digits and single hyphens),
    else ValueError naming it; the host enforces the rule when it indexes a binding."""
    if not _QUEUE_NAME.match(name):
        raise ValueError(f"'{name}' is not a valid queue name (3-63 characters: a-z, 0-9, single hyphens inside)")
    return name


@dataclass(frozen=True)
class QueueOptions:
    """host.json's `extensions.queues`, with the host's defaults for what it leaves out.

    `batch_size`: messages one dequeue takes; `max_dequeue_count`: failed deliveries before a message moves
    to `<queue>-poison`; `visibility_timeout`: how long a message whose function failed stays invisible
    before it is tried again; `max_polling_interval`: the longest wait between polls of an empty queue;
    `new_batch_threshold`: read and checked, not modelled (concurrency here is the number of workers)."""

    batch_size: int = 16
    new_batch_threshold: int = 8
    max_dequeue_count: int = 5
    visibility_timeout: timedelta = timedelta(0)
    max_polling_interval: timedelta = timedelta(minutes=1)

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= MAX_BATCH:
            raise ValueError(f"queues batchSize {self.batch_size} is not within 1-{MAX_BATCH}")
        if self.new_batch_threshold < 0:
            raise ValueError(f"queues newBatchThreshold {self.new_batch_threshold} is negative")
        if self.max_dequeue_count < 1:
            raise ValueError(f"queues maxDequeueCount {self.max_dequeue_count} is below 1")
        if self.visibility_timeout < timedelta(0):
            raise ValueError(f"queues visibilityTimeout {self.visibility_timeout} is negative")
        if self.max_polling_interval < timedelta(milliseconds=100):
            raise ValueError(f"queues maxPollingInterval {self.max_polling_interval} is below 100 ms")

    @classmethod
    def from_host_json(cls, path: Path = HOST_JSON) -> "QueueOptions":
        section: dict[str, Any] = json.loads(path.read_text()).get("extensions", {}).get("queues", {})
        defaults = cls()
        batch_size = int(section.get("batchSize", defaults.batch_size))
        return cls(
            batch_size=batch_size,
            new_batch_threshold=int(section.get("newBatchThreshold", batch_size // 2)),
            max_dequeue_count=int(section.get("maxDequeueCount", defaults.max_dequeue_count)),
            visibility_timeout=parse_timespan(section.get("visibilityTimeout", "00:00:00")),
            max_polling_interval=parse_timespan(section.get("maxPollingInterval", "00:01:00")),
        )


class MessageNotFound(LookupError):
    """No message with this id holds this pop receipt any more (deleted, or received again)."""


@dataclass(frozen=True)
class ReceivedMessage:
    """A message as Get Messages (or Update Message) returns it: the pop receipt is the holder's."""

    queue: str
    id: str
    body: bytes
    dequeue_count: int
    insertion_time: datetime
    expiration_time: datetime
    next_visible_time: datetime
    pop_receipt: str


@dataclass
class _Stored:
    id: str
    body: bytes
    insertion_time: datetime
    expiration_time: datetime
    next_visible_time: datetime
    seq: int
    dequeue_count: int = 0
    pop_receipt: str = ""
    version: int = 0  # bumped on every change of visibility, so stale heap entries are skipped

    def received(self, queue: str) -> ReceivedMessage:
        return ReceivedMessage(
            queue,
            self.id,
            self.body,
            self.dequeue_count,
            self.insertion_time,
            self.expiration_time,
            self.next_visible_time,
            self.pop_receipt,
        )


@dataclass
class _Queue:
    messages: dict[str, _Stored] = field(default_factory=dict)
    heap: list[tuple[datetime, int, int, str]] = field(default_factory=list)  # (visible at, seq, version, id)
    sent: list[str] = field(default_factory=list)  # every body ever sent, in order

    def schedule(self, message: _Stored) -> None:
        message.version += 1
        heapq.heappush(self.heap, (message.next_visible_time, message.seq, message.version, message.id))


class QueueService:
    """The queues of one storage account (the host's `AzureWebJobsStorage`), created on first use.

    Storage semantics: a message is visible from when it is sent (or after an initial visibility delay);
    receiving makes it invisible for the receiver's visibility timeout, adds one to its dequeue count and gives it
    a new pop receipt; deleting it or changing its visibility needs the latest pop receipt (a receiver whose lease
    ran out and whose message was received again has lost it). Messages expire after their time to live (7 days
    for the output binding's). Order is by when a message became visible, then by when it was sent (Storage
    promises no order; this is close to what it does).

    Every operation takes the time from an injectable clock (or an explicit `now`), so a simulator can play queues
    in simulated time; one lock makes every operation atomic, so receivers on several threads never hold one
    message at the same time."""

    def __init__(self, clock: Clock = utc_now) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._queues: dict[str, _Queue] = {}
        self._seq = itertools.count()
        self._listeners: list[Callable[[str, str], None]] = []

    def add_listener(self, listener: Callable[[str, str], None]) -> None:
        """Call `listener(queue, body)` after each message sent (the host's listeners poll at once when a
        function of the same host adds a message to their queue; the local server logs each message)."""
        self._listeners.append(listener)

    def send(
        self,
        queue: str,
        body: str | bytes,
        *,
        visibility_delay: timedelta = timedelta(0),
        time_to_live: timedelta = TIME_TO_LIVE,
        now: datetime | None = None,
    ) -> ReceivedMessage:
        """Put Message: visible after `visibility_delay`. Returns the message (its pop receipt is empty)."""
        if visibility_delay < timedelta(0) or time_to_live <= visibility_delay:
            raise ValueError("the visibility delay must be within 0 and the time to live")
        now = self.clock() if now is None else now
        data = body.encode() if isinstance(body, str) else bytes(body)
        with self._lock:
            stored = self._queues.setdefault(queue, _Queue())
            message = _Stored(
                id=str(uuid.uuid4()),
                body=data,
                insertion_time=now,
                expiration_time=now + time_to_live,
                next_visible_time=now + visibility_delay,
                seq=next(self._seq),
            )
            stored.messages[message.id] = message
            stored.schedule(message)
            text = data.decode("utf-8", "replace")
            stored.sent.append(text)
            sent = message.received(queue)
        for listener in self._listeners:
            listener(queue, text)
        return sent

    def receive(
        self,
        queue: str,
        max_messages: int = 1,
        *,
        visibility_timeout: timedelta,
        now: datetime | None = None,
    ) -> list[ReceivedMessage]:
        """Get Messages: up to `max_messages` visible ones, each now invisible for `visibility_timeout`,
        its dequeue count one more and a new pop receipt. Expired messages are dropped on the way."""
        if not 1 <= max_messages <= MAX_BATCH:
            raise ValueError(f"max_messages {max_messages} is not within 1-{MAX_BATCH}")
        if visibility_timeout <= timedelta(0):
            raise ValueError("a received message must be invisible for some time")
        now = self.clock() if now is None else now
        taken: list[ReceivedMessage] = []
        with self._lock:
            stored = self._queues.get(queue)
            while stored is not None and stored.heap and len(taken) < max_messages:
                visible_at, _, version, message_id = stored.heap[0]
                if visible_at > now:
                    break
                heapq.heappop(stored.heap)
                message = stored.messages.get(message_id)
                if message is None or message.version != version:
                    continue  # deleted, or its visibility changed since this entry
                if message.expiration_time <= now:
                    del stored.messages[message_id]
                    continue
                message.dequeue_count += 1
                message.pop_receipt = uuid.uuid4().hex
                message.next_visible_time = now + visibility_timeout
                stored.schedule(message)
                taken.append(message.received(queue))
        return taken

    def update_visibility(
        self,
        queue: str,
        message_id: str,
        pop_receipt: str,
        visibility_timeout: timedelta,
        *,
        now: datetime | None = None,
    ) -> ReceivedMessage:
        """Update Message: invisible for `visibility_timeout` from now (0: visible at once), with a new
        pop receipt. MessageNotFound if `pop_receipt` is not the message's latest."""
        if visibility_timeout < timedelta(0):
            raise ValueError("the visibility timeout is negative")
        now = self.clock() if now is None else now
        with self._lock:
            stored, message = self._held(queue, message_id, pop_receipt)
            message.pop_receipt = uuid.uuid4().hex
            message.next_visible_time = now + visibility_timeout
            stored.schedule(message)
            return message.received(queue)

    def delete(self, queue: str, message_id: str, pop_receipt: str) -> None:
        """Delete Message. MessageNotFound if `pop_receipt` is not the message's latest."""
        with self._lock:
            stored, _ = self._held(queue, message_id, pop_receipt)
            del stored.messages[message_id]

    def _held(self, queue: str, message_id: str, pop_receipt: str) -> tuple[_Queue, _Stored]:
        stored = self._queues.get(queue)
        message = stored.messages.get(message_id) if stored is not None else None
        if stored is None or message is None or message.pop_receipt != pop_receipt:
            raise MessageNotFound(f"queue {queue}: no message {message_id} with that pop receipt")
        return stored, message

    def messages(self, queue: str, *, now: datetime | None = None) -> list[ReceivedMessage]:
        """Every message in the queue, visible or not (unexpired), in the order they would be received."""
        now = self.clock() if now is None else now
        with self._lock:
            stored = self._queues.get(queue)
            found = [m for m in stored.messages.values() if m.expiration_time > now] if stored else []
            return [m.received(queue) for m in sorted(found, key=lambda m: (m.next_visible_time, m.seq))]

    def visible_count(self, queue: str, *, now: datetime | None = None) -> int:
        now = self.clock() if now is None else now
        return sum(1 for message in self.messages(queue, now=now) if message.next_visible_time <= now)

    def sent(self) -> dict[str, list[str]]:
        """A copy of every body ever sent, by queue (messages since received or deleted included)."""
        with self._lock:
            return {name: list(stored.sent) for name, stored in self._queues.items() if stored.sent}
