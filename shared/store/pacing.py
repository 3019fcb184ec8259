"""Pacing a burst of pages over a spread of minutes, because autoscale bills each hour at its highest RU/s
("billed for the highest RU/s the system scaled to in the hour",
https://learn.microsoft.com/azure/cosmos-db/provision-throughput-autoscale): work that lands in a minute bills
that minute's rate for the whole hour, and spread evenly it bills its average. The heartbeat tally paces each
partition's hourly pass by it (REPORTS_TALLY_SPREAD_MINUTES), the late-dose check each partition's sweep
(CHECK_LATE_DOSES_SPREAD_MINUTES)."""

from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class Pace:
    """When the next page is due: the pages spread evenly from the last one done to `until`, counting on
    `expected_pages`. Each partition paces its own work from when it began, so the partitions' pages add up to an
    even rate over the spread; a run cut off by its budget leaves no backlog to burst through when the next one
    starts (the next page stays due where it was)."""

    until: datetime
    expected_pages: int

    @classmethod
    def over(cls, began: datetime, spread: timedelta, expected_pages: int | None) -> "Pace | None":
        """The pace of work that began at `began` and is expected to take `expected_pages` pages, or None when it
        runs unpaced: pacing is off (a spread of 0), the size is not known, it has fewer pages than the spread
        has minutes (no burst worth spreading), or it is one page.

        Why one page never is: it is the same burst whenever it is read, so pacing it would only delay it, to the
        spread's end. A spread shorter than a minute (a tally pass begun in the last minute before the next hour
        is due) has fewer minutes than any page count, so a one-page pass would otherwise wait it out."""
        minutes = spread / timedelta(minutes=1)
        if not minutes or expected_pages is None or expected_pages < max(minutes, 2):
            return None
        return cls(until=began + spread, expected_pages=expected_pages)

    def wait(self, pages: int, since: datetime, now: datetime) -> float:
        """Seconds from `now` until the next page is due (0: now), `pages` being done, the last of them at
        `since`. Past `until`, or past the pages expected (the work grew), the pages that are left are due at
        once."""
        left = self.expected_pages - pages
        if left <= 0 or now >= self.until:
            return 0.0
        due = since + (self.until - since) / left
        return max((due - now).total_seconds(), 0.0)
