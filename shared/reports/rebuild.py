"""Recompute reports from the source collections over a time range: one user's, or everyone's.

    python -m shared.reports.rebuild --user willcross1024 --from 2026-11-01T00:00:00Z --to 2026-11-22T00:00:00Z
    python -m shared.reports.rebuild --all --from 2026-11-21T00:00:00Z --to 2026-11-22T00:00:00Z

For a lost consumer position or a changed report shape. It feeds every source document of the range through
the consumer's own recompute, so it is replay-safe, safe beside a running consumer (writes are guarded) and
writes only documents whose content differs. Hours whose start lies in [from, to) are rebuilt (`from` is
taken back to its hour), then the days holding them. Heartbeat counts of hours older than a bottle's
heartbeat window cannot be recomputed and are kept as the reports have them.
"""

import argparse
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from shared.devices.device_time import MAX_FUTURE_SKEW
from shared.instants import day_of, hour_of, parse_instant, utc_now
from shared.store.command_line import add_store_arguments, command_line_database, run_command
from shared.store.partitioning import bucket_of

if TYPE_CHECKING:
    from pymongo.database import Database

    from shared.reports.aggregation import UserDay
    from shared.settings import Settings
    from shared.store.retries import RetryPolicy

# The store's side (pymongo, the settings' pydantic: a second of imports) is imported by the functions that use
# it, so that `python -m shared.reports.rebuild --help` and its usage errors come at once.

Document = dict[str, Any]


@dataclass
class RebuildSummary:
    source_documents: int = 0
    hourly_written: int = 0
    daily_written: int = 0


def rebuild(
    db: "Database[Any]",
    *,
    start: datetime,
    end: datetime,
    user_id: str | None,
    now: datetime,
    settings: "Settings",
) -> RebuildSummary:
    """Recompute the hourly reports of [hour of `start`, `end`) for `user_id` (None: every user) from source,
    then their days, a page of REPORTS_PAGE_SIZE source documents at a time."""
    from shared.feeds.sources import Change  # noqa: PLC0415 - see the imports
    from shared.reports.aggregation import Stamper, refresh_daily, refresh_hourly  # noqa: PLC0415
    from shared.store.retries import RetryPolicy  # noqa: PLC0415

    policy = RetryPolicy.from_settings(settings)
    page_size = settings.reports_page_size
    first = hour_of(start)
    stamper = Stamper(now)
    summary = RebuildSummary()
    user_days: set[UserDay] = set()
    for collection, query in _source_queries(first, end, user_id):
        for page in _pages(db, collection, query, policy, page_size):
            changes = [Change(collection, doc["_id"], doc) for doc in page]
            result = refresh_hourly(
                db, changes, stamp=stamper.next(), policy=policy, within=(first, end), only_user=user_id
            )
            summary.source_documents += len(page)
            summary.hourly_written += result.written
            user_days |= {(user, day_of(hour)) for user, hour in result.user_hours}
    ordered = sorted(user_days)
    for i in range(0, len(ordered), page_size):
        summary.daily_written += refresh_daily(db, set(ordered[i : i + page_size]), policy)
    return summary


def _source_queries(first: datetime, end: datetime, user_id: str | None) -> list[tuple[str, dict[str, Any]]]:
    """What to read: one user's actions by (user_id, time) and the heartbeat documents of bottles the user
    owns or owned within their window; or everyone's: actions by receive time (a device time is never more than
    MAX_FUTURE_SKEW ahead of its receipt, so nothing of the range was received before `first` minus that), and
    every heartbeat document."""
    from shared.devices.heartbeat_document import OWNERS, USER_BUCKET  # noqa: PLC0415 - see the imports
    from shared.store import schema  # noqa: PLC0415

    in_range = {"$gte": first, "$lt": end}
    if user_id is not None:
        return [
            (schema.BOTTLE_ACTIONS, {"user_id": user_id, "time": in_range}),
            (schema.BOTTLE_HEARTBEATS, {USER_BUCKET: bucket_of(user_id), "user_id": user_id}),
            (schema.BOTTLE_HEARTBEATS, {f"{OWNERS}.user_id": user_id}),
        ]
    received = {"$gte": first - MAX_FUTURE_SKEW}
    # Every heartbeat document: which rings hold an hour of the range is in the rings, not in any index.
    return [
        (schema.BOTTLE_ACTIONS, {"received_at": received, "time": in_range}),
        (schema.BOTTLE_HEARTBEATS, {}),
    ]


def _pages(
    db: "Database[Any]", collection: str, query: dict[str, Any], policy: "RetryPolicy", size: int
) -> Iterator[list[Document]]:
    """The matching documents in `_id` order, a page per query, so a throttled read is retried alone."""
    after: Any = None
    while True:
        page_query = query if after is None else {**query, "_id": {"$gt": after}}
        page = _read_page(db, collection, page_query, policy, size)
        if not page:
            return
        yield page
        after = page[-1]["_id"]


def _read_page(
    db: "Database[Any]", collection: str, query: dict[str, Any], policy: "RetryPolicy", size: int
) -> list[Document]:
    from shared.store.retries import with_retries  # noqa: PLC0415 - see the imports

    return with_retries(lambda: list(db[collection].find(query).sort("_id", 1).limit(size)), policy)


PROG = "python -m shared.reports.rebuild"


def main(argv: list[str] | None = None) -> None:
    run_command(PROG, lambda: _rebuild(argv))


def _rebuild(argv: list[str] | None) -> None:
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    who = parser.add_mutually_exclusive_group(required=True)
    who.add_argument("--user", help="rebuild this user's reports")
    who.add_argument("--all", action="store_true", help="rebuild every user's reports")
    parser.add_argument("--from", dest="start", required=True, help="ISO-8601 with offset, e.g. 2026-11-01T00:00Z")
    parser.add_argument("--to", dest="end", required=True, help="ISO-8601 with offset (exclusive)")
    add_store_arguments(parser)
    args = parser.parse_args(argv)
    start, end = _instant(parser, "--from", args.start), _instant(parser, "--to", args.end)
    if end <= start:
        parser.error("--to must be later than --from")
    from shared.settings import get_settings  # noqa: PLC0415 - see the imports

    with command_line_database(parser, args) as (db, _uri):
        summary = rebuild(db, start=start, end=end, user_id=args.user, now=utc_now(), settings=get_settings())
    print(
        f"read {summary.source_documents} source documents; {summary.hourly_written} hourly and "
        f"{summary.daily_written} daily report writes"
    )


def _instant(parser: argparse.ArgumentParser, option: str, text: str) -> datetime:
    """`text` as an instant, or a usage error that names the option it came from."""
    try:
        return parse_instant(text)
    except ValueError as error:
        parser.error(f"{option}: {error}")


if __name__ == "__main__":
    main()
