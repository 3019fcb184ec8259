"""What the proxy remembers of each open cursor: a query's cursor, the partitions its first batch reached (a
getMore is charged to them and throttled by them); a change stream's cursor, the feed range it reads and the
token it last handed out. A cursor is forgotten when it is exhausted or killed; abandoned query cursors are
forgotten oldest first past 10,000."""

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tools.cosmos_store.partitions import Collection, Partition

Document = dict[str, Any]
_MOST_REMEMBERED = 10_000
_FORGOTTEN_AT_ONCE = 5_000


@dataclass
class StreamCursor:
    """A change stream cursor the proxy reshapes: its collection, the feed range it reads, and its last token."""

    collection: Collection
    low: int
    high: int
    partition_id: int | None  # None: the whole collection
    token: Document  # the batch token last handed out
    rid: str


class Cursors:
    """Open cursors by id, safe to use from every connection's thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reached: dict[int, list[Partition]] = {}
        self._streams: dict[int, StreamCursor] = {}

    def reached(self, cursor_id: int) -> list[Partition] | None:
        """The partitions a query cursor's first batch reached (None: not a cursor the proxy knows)."""
        with self._lock:
            return self._reached.get(cursor_id)

    def remember_reached(self, reply: Document, reached: list[Partition]) -> None:
        """Note the partitions the cursor of `reply` (if it has one still open) reached."""
        cursor = reply.get("cursor")
        if not isinstance(cursor, Mapping):
            return
        cursor_id = int(cursor.get("id", 0))
        with self._lock:
            if cursor_id:
                self._reached[cursor_id] = reached
            if len(self._reached) > _MOST_REMEMBERED:  # cursors abandoned without killCursors: forget the oldest
                for stale in list(self._reached)[:_FORGOTTEN_AT_ONCE]:
                    del self._reached[stale]

    def is_stream(self, cursor_id: int) -> bool:
        with self._lock:
            return cursor_id in self._streams

    def stream(self, cursor_id: int) -> StreamCursor:
        with self._lock:
            return self._streams[cursor_id]

    def remember_stream(self, cursor_id: int, state: StreamCursor) -> None:
        with self._lock:
            self._streams[cursor_id] = state

    def forget_stream(self, cursor_id: int) -> None:
        with self._lock:
            self._streams.pop(cursor_id, None)

    def forget(self, cursor_ids: Any) -> None:
        """Forget the cursors `cursor_ids` names (a killCursors' list; anything else names none)."""
        with self._lock:
            for cursor_id in cursor_ids if isinstance(cursor_ids, list) else []:
                self._reached.pop(int(cursor_id), None)
                self._streams.pop(int(cursor_id), None)
