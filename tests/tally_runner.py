"""The heartbeat tally's one partition (all the buckets), driven straight through run_tally with its lease kept
here: passes at chosen server times, maybe cut short after some pages."""

from collections.abc import Callable
from datetime import datetime
from typing import Any

from shared.archive.heartbeats import HeartbeatArchiver
from shared.archive.storage import Archive
from shared.feeds.leases import Lease
from shared.feeds.sweeps import Pass
from shared.reports.tally import run_tally
from shared.settings import Settings
from shared.store.partitioning import BucketRange
from shared.store.retries import RetryPolicy

POLICY = RetryPolicy(max_retries=0, base_ms=1)


def out_of_time_after(pages: int | None) -> Callable[[], bool]:
    """A run's `out_of_time` that lets `pages` pages be read (None: any number)."""
    left = [pages]

    def out_of_time() -> bool:
        if left[0] is None:
            return False
        left[0] -= 1
        return left[0] < 0

    return out_of_time


class Handing:
    """A tally's hand-off to an archive that keeps no position of its own: every pass hands its bottle-hours (the
    app's own hand-off, shared/archive/catch_up.py, moves the archive's lease on; these tests have none)."""

    def __init__(self, archive: Archive) -> None:
        self.rows = HeartbeatArchiver(archive)

    def begin(self, current: Pass) -> bool:
        return True

    def failed(self, current: Pass, error: Exception) -> None:
        pass

    def ended(self, current: Pass) -> None:
        pass


class TallyPartition:
    def __init__(self, db: Any, settings: Settings, archive: Archive | None = None) -> None:
        self.db, self.settings, self.archive = db, settings, archive
        self.lease = Lease()

    def run(self, now: datetime, pages: int | None = None) -> bool:
        """A worker's run at `now`, out of time after `pages` pages (None: never); whether it caught up."""

        def save(lease: Lease) -> bool:
            self.lease = lease
            return True

        _, run = run_tally(
            self.db,
            BucketRange(0, 1),
            self.lease,
            settings=self.settings,
            policy=POLICY,
            wall_clock=lambda: now,
            out_of_time=out_of_time_after(pages),
            save=save,
            archive=None if self.archive is None else Handing(self.archive),
        )
        return run.caught_up
