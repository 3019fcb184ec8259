"""The port through which an hourly pass hands what it reads to another consumer while it counts (the heartbeat
tally to the archive: shared/archive/catch_up.py `ArchiveHandOff`), so that the pass never waits on it: `HandOff`,
and where the handed rows are held and merged, `HourRows`. Defined here, below both, so neither consumer imports the
other."""

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Protocol

from shared.feeds.sweeps import Document, Pass, UserKey, pass_hours, user_key


class HourRows(Protocol):
    """Where the bottle-hours a pass counts are held and merged (for the archive, its heartbeat files:
    shared/archive/heartbeats.py `HeartbeatArchiver`), by the bucket of the document they came from."""

    def add(self, document: Mapping[str, Any], hours: Iterable[datetime], *, source_bucket: int) -> None:
        """Hold the rows of one heartbeat document for `hours` (read from bucket `source_bucket` of the pass)."""

    def flush(self, *, before: int | None = None) -> None:
        """Merge the rows held from documents of buckets before `before` (None: all); raises if it cannot."""

    def holding(self) -> bool:
        """Whether rows are held that are not merged yet."""


class HandOff(Protocol):
    """The port through which a pass hands the bottle-hours it counts to another consumer (the archive:
    shared/archive/catch_up.py `ArchiveHandOff`), so that the pass never waits on it: the pass asks once whether to
    hand them (`begin`: no while the receiver is known to be down), stops at its first failure (`failed`), and says
    when a pass handed all of them (`ended`), which moves the receiver's own position on. Whatever a pass did not
    hand, the receiver reads again from the heartbeat documents later, on its own feed (Shape.TRAILING)."""

    rows: HourRows

    def begin(self, current: Pass) -> bool:
        """Whether a new pass hands its bottle-hours."""

    def failed(self, current: Pass, error: Exception) -> None:
        """The receiver failed a merge of this pass's rows: the pass hands no more."""

    def ended(self, current: Pass) -> None:
        """The pass counted all its hours and handed every bottle-hour of them."""


def held_page(rows: HourRows, page: list[Document], current: Pass, saved_after: UserKey | None) -> UserKey | None:
    """Hold a counted page's bottle-hours in `rows` and merge those of the buckets read to the end (all but
    the page's last, whose next documents may be on the next page); the position to save: past the page, or, if
    rows of its last bucket are held, no further than that bucket's start (nor back before `saved_after`)."""
    for doc in page:
        hours = pass_hours(doc, (current.start, current.end), late_since=current.late_since)
        rows.add(doc, hours, source_bucket=user_key(doc)[0])
    last_bucket = user_key(page[-1])[0]
    rows.flush(before=last_bucket)
    if not rows.holding():
        return current.after
    bucket_start: UserKey = (last_bucket, "")
    return bucket_start if saved_after is None or saved_after < bucket_start else saved_after
