"""The archive's sweep of bottle_actions run by hand (Sweeper) and the opened/closed events it archives; the
archive's actions and reading tests share them."""

from datetime import datetime
from typing import Any

from shared.archive.actions import SweepRun, run_actions_sweep
from shared.archive.storage import Archive
from shared.feeds.leases import Lease
from shared.settings import Settings
from tests.tally_runner import POLICY, out_of_time_after


class Sweeper:
    """The archive's one partition, driven straight through run_actions_sweep with its lease kept here."""

    def __init__(self, db: Any, settings: Settings, archive: Archive) -> None:
        self.db, self.settings, self.archive = db, settings, archive
        self.lease = Lease()

    def run(self, now: datetime, pages: int | None = None, *, keep: bool = True, **hooks: Any) -> SweepRun:
        """A run at `now`, out of time after `pages` pages (None: never); `keep=False`: its saves are lost (a
        worker killed before its position reached the lease)."""

        def save(lease: Lease) -> bool:
            if keep:
                self.lease = lease
            return True

        _, run = run_actions_sweep(
            self.db,
            self.lease,
            settings=self.settings,
            archive=self.archive,
            policy=POLICY,
            wall_clock=lambda: now,
            out_of_time=hooks.get("out_of_time") or out_of_time_after(pages),
            save=save,
        )
        return run


def closed(at: datetime, taken: int = 1) -> dict[str, Any]:
    readings = {"number_of_pills": 29, "mass_of_contents": 14.5, "pills_taken": taken}
    return {"type": "closed", "time": at.isoformat(), **readings}


def opened(at: datetime) -> dict[str, Any]:
    return {"type": "opened", "time": at.isoformat(), "number_of_pills": 30, "mass_of_contents": 15.0}
