"""The reports' consumers of their feeds (shared/feeds/consumers.py): the actions, read as changes and aggregated
into the hourly reports as they come (`ActionsAggregation`), and the heartbeat documents, counted once an hour by
the tally (`HeartbeatTally`), which hands the bottle-hours it counts on through a port when one is plugged in."""

from collections.abc import Callable

from shared.feeds.changes import ChangesConsumer
from shared.feeds.consumers import Consumer, Work, budget_of
from shared.feeds.hand_off import HandOff
from shared.feeds.leases import Lease
from shared.feeds.sources import Change, Watch
from shared.instants import to_stored
from shared.reports.aggregation import Stamper, refresh_hourly
from shared.reports.feeds import ACTIONS_FEED, HEARTBEAT_TALLY
from shared.reports.tally import rolled_up_before, run_tally


class ActionsAggregation(ChangesConsumer):
    """Each page of the actions' changes recomputes the user-hours it touches (shared/reports/aggregation.py), and
    the days of those that ended before the roll-ups (`rolled_up_before`). One object serves one run: its stamps
    (Stamper) grow within the run."""

    feed = ACTIONS_FEED

    def __init__(self, watch: Watch | None = None) -> None:
        super().__init__(watch)
        self._stamper: Stamper | None = None

    def run(self, work: Work, held: Lease) -> Lease:
        self._stamper = Stamper(work.now)
        return super().run(work, held)

    def apply(self, work: Work, changes: list[Change]) -> None:
        assert self._stamper is not None, "apply is called within run"
        written = work.wall_clock()
        result = refresh_hourly(
            work.db,
            changes,
            stamp=self._stamper.next(to_stored(written)),
            policy=work.policy,
            rolled_up_before=rolled_up_before(written),
        )
        work.run.hourly_written += result.written


class HeartbeatTally(Consumer):
    """The heartbeat tally's due hours (shared/reports/tally.py), until done or out of budget. `hand_off` gives the
    port a run hands the bottle-hours it counts to (the archive's, never waited on), or None."""

    feed = HEARTBEAT_TALLY

    def __init__(self, hand_off: Callable[[Work], HandOff | None] = lambda work: None) -> None:
        self._hand_off = hand_off

    def run(self, work: Work, held: Lease) -> Lease:
        assert work.partition.buckets is not None, "the tally's partitions are bucket ranges"
        budget = budget_of(work, "tally")
        held, tallied = run_tally(work.db, work.partition.buckets, held, archive=self._hand_off(work), **budget)
        work.run.pages += tallied.pages
        work.run.changes += tallied.documents
        work.run.hourly_written += tallied.hourly_written
        work.run.daily_written += tallied.daily_written
        work.run.caught_up = tallied.caught_up
        return held
