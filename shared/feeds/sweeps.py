"""An hourly pass over a partition of the heartbeat documents, user by user: the hours it does and how far it got
(`Pass`, saved in its lease's token), its pages of whole users (`UserPages`), its pace (`pace_of`), and which hours
of a document's ring it takes (`pass_hours`). The heartbeat tally (shared/reports/tally.py) and the archive's
catch-up of the heartbeats (shared/archive/catch_up.py) each run such passes over the same bucket ranges.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, TypedDict, cast

from pymongo.collection import Collection

from shared.devices.heartbeat_document import (
    LATE_AT,
    LATE_FLAG,
    OWNERS,
    RING,
    RING_TIME,
    USER_BUCKET,
    hour_start,
    ring_hours,
)
from shared.feeds.leases import ROLLUPS_FROM
from shared.feeds.settling import SETTLE, hours_due
from shared.instants import HOUR
from shared.store.pacing import Pace
from shared.store.partitioning import BucketRange
from shared.store.retries import RetryPolicy, with_retries

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FIELDS = dict.fromkeys(("bottle_id", "user_id", USER_BUCKET, "medication", OWNERS, RING, RING_TIME, LATE_AT), 1)
_ORDER = [(USER_BUCKET, 1), ("user_id", 1)]
LAST_BEGAN: Final = "last_began"  # in a lease's token between passes: when the last pass began
LAST_PAGES: Final = "last_pages"  # beside it: how many pages the last pass read (the next one is paced by it)
# ROLLUPS_FROM, beside it: where the work a pass left to the next ones starts (a new layout's leases take it over)
HANDING: Final = "handing"  # in a pass's token: Pass.handing

Document = dict[str, Any]
UserKey = tuple[int, str]  # (user bucket, user_id): the sweep's order


class PassToken(TypedDict, total=False):
    """An hourly pass's lease token, as it is stored: a pass under way (`Pass.token`, `end` set), or between passes
    what the last one left (`last_began`, `last_pages`, and the tally's `rollups_from`)."""

    start: datetime
    end: datetime
    began: datetime
    late_since: datetime | None
    after: list[Any] | None  # UserKey, as BSON stores a tuple
    rollups_from: datetime | None  # ROLLUPS_FROM
    pages: int
    paged_at: datetime | None
    last_pages: int | None  # LAST_PAGES
    handing: bool  # HANDING
    last_began: datetime  # LAST_BEGAN


def pass_token(token: Mapping[str, Any] | None) -> PassToken:
    """A lease's token read as an hourly pass's: the one place where the token a lease stores untyped (its shape is
    its consumer's) meets its type, so the reads below are checked against the writes (`Pass.token`)."""
    return cast(PassToken, token or {})


@dataclass(frozen=True)
class Pass:
    """A pass under way: the hours it counts, when it began, where late heartbeats are looked for from, the last
    user done (None: none yet), and where the roll-ups it is behind start (None: none)."""

    start: datetime
    end: datetime
    began: datetime
    late_since: datetime | None
    after: UserKey | None = None
    rollups_from: datetime | None = None
    pages: int = 0  # pages read so far
    paged_at: datetime | None = None  # when the last of them was done
    last_pages: int | None = None  # the last pass's pages (None: not known, the pass is not paced)
    handing: bool = False  # every bottle-hour counted so far reached the archive (HandOff), and the next go there

    def token(self) -> PassToken:
        after = None if self.after is None else list(self.after)
        return {
            "start": self.start,
            "end": self.end,
            "began": self.began,
            "late_since": self.late_since,
            "after": after,
            ROLLUPS_FROM: self.rollups_from,
            "pages": self.pages,
            "paged_at": self.paged_at,
            LAST_PAGES: self.last_pages,
            HANDING: self.handing,
        }

    @classmethod
    def resumed(cls, token: Mapping[str, Any] | None) -> "Pass | None":
        """The pass a lease's token holds, if one is under way."""
        token = pass_token(token)
        if token.get("end") is None:
            return None
        after = token.get("after")
        return cls(
            start=token["start"],
            end=token["end"],
            began=token["began"],
            late_since=token.get("late_since"),
            after=None if after is None else (int(after[0]), str(after[1])),
            rollups_from=token.get(ROLLUPS_FROM),
            pages=int(token.get("pages") or 0),
            paged_at=token.get("paged_at"),
            last_pages=token.get(LAST_PAGES),
            handing=bool(token.get(HANDING)),
        )


def pace_of(current: Pass, *, now: datetime, spread: timedelta) -> Pace | None:
    """The pace of `current` (shared/store/pacing.py: its pages spread evenly to its start plus
    REPORTS_TALLY_SPREAD_MINUTES, counting on as many as the last pass read, and ending by the time the next hour
    is due), or None when it runs unpaced: as Pace.over has it (off, a first pass or a new partition layout, a
    small pass), or a later hour is already due (the pass is behind: it catches up at once).

    Why the next hour's due time bounds it: a pass begins a little after its hours are due (the next dispatch, the
    next run), so a pass spread over the whole hour from its start would end a little after the next is due, and
    each pass would begin later than the last until one counted two hours at once, twice a pass's writes."""
    if hours_due(now) > current.end:
        return None
    next_due = current.end + HOUR + SETTLE
    return Pace.over(current.began, min(spread, next_due - current.began), current.last_pages)


class UserPages:
    """A partition's heartbeat documents in (user bucket, user_id) order, a page of whole users at a time."""

    def __init__(
        self,
        collection: Collection[Any],
        buckets: BucketRange,
        *,
        after: UserKey | None,
        size: int,
        policy: RetryPolicy,
    ) -> None:
        self._collection, self._buckets, self._after = collection, buckets, after
        self._size, self._policy = size, policy

    def next_page(self) -> list[Document] | None:
        docs: list[Document] = []
        for query in self._queries():
            docs = self._find(query, limit=self._size)
            if docs:
                break
        if not docs:
            return None
        if len(docs) == self._size:
            last = user_key(docs[-1])
            whole = [d for d in docs if user_key(d) != last]
            # A user whose documents fill the page alone is read whole; if none is found now (the user's bottles
            # were all reassigned since, and their `ub` moved them), the page as read stands: its hours closed
            # before the reassignment, and the new owner's pass counts the bottles again whole (pass_hours).
            docs = whole or self._find({USER_BUCKET: last[0], "user_id": last[1]}, limit=0) or docs
        self._after = user_key(docs[-1])
        return docs

    @property
    def after(self) -> UserKey | None:
        return self._after

    def _queries(self) -> list[dict[str, Any]]:
        if self._after is None:
            return [self._buckets.selector(USER_BUCKET)]
        bucket, user_id = self._after
        return [
            {USER_BUCKET: bucket, "user_id": {"$gt": user_id}},
            {USER_BUCKET: {"$gt": bucket, "$lt": self._buckets.high}},
        ]

    def _find(self, query: dict[str, Any], *, limit: int) -> list[Document]:
        return with_retries(lambda: list(self._collection.find(query, _FIELDS).sort(_ORDER).limit(limit)), self._policy)


def user_key(doc: Mapping[str, Any]) -> UserKey:
    """Where a heartbeat document falls in a pass's order: its owner's bucket, then its owner."""
    return int(doc[USER_BUCKET]), str(doc["user_id"])


def pass_hours(
    heartbeat_doc: Mapping[str, Any], closed: tuple[datetime, datetime], *, late_since: datetime | None
) -> set[datetime]:
    """The hours of a bottle's ring that a tally pass counts (shared/reports/tally.py): those of `closed` (the
    hours that closed since the last pass), and the earlier ones that a heartbeat reached late since
    `late_since` (LATE_FLAG set, `la` no earlier than it; None: none), or all of them if the bottle was
    reassigned since. Hours the ring no longer holds are not
    counted again: their counts stay as the reports have them."""
    late_at = heartbeat_doc.get(LATE_AT)
    late = late_since is not None and late_at is not None and late_at >= late_since
    # A bottle reassigned since: the last pass may have missed it (its owner's bucket moved it past the pass's
    # cursor), and an earlier owner's hours may have moved to the new one: every hour is counted again.
    owners = heartbeat_doc.get(OWNERS) or []
    moved = late_since is not None and bool(owners) and owners[-1]["until"] >= late_since
    hours = set()
    for number, value in ring_hours(heartbeat_doc).items():
        start = hour_start(number)
        earlier = start < closed[0] and (moved or (late and value & LATE_FLAG))
        if closed[0] <= start < closed[1] or earlier:
            hours.add(start)
    return hours
