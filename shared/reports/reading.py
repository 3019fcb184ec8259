"""Reading a user's reports (GET /api/users/{user_id}/reports): hourly or daily, over a bounded range."""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from pymongo.collection import Collection
from pymongo.database import Database

from shared.errors import BadRequest
from shared.instants import HOUR, day_of, format_instant, hour_of, parse_instant
from shared.reports.documents import (
    COUNTERS,
    DAY,
    Document,
    ReportDocument,
    daily_reports,
    full_entry,
    hourly_reports,
)
from shared.settings import Settings
from shared.store.retries import RetryPolicy, with_retries

Granularity = Literal["hour", "day"]
# The longest range one read may ask for: a month of hours, a year of days.
MAX_PERIODS: dict[Granularity, int] = {"hour": 31 * 24, "day": 366}
PERIOD: dict[Granularity, timedelta] = {"hour": HOUR, "day": DAY}


@dataclass(frozen=True)
class ReportQuery:
    user_id: str
    granularity: Granularity
    start: datetime  # the first period overlapping [from, to)
    end: datetime


def parse_report_query(user_id: str, params: Mapping[str, str]) -> ReportQuery:
    """`granularity` (hour|day, default hour), `from` and `to` (ISO-8601 with offset; `to` exclusive).

    BadRequest listing every problem: a missing or unparsable bound, an empty or reversed range, or more
    periods than MAX_PERIODS. Read by hand, not by a pydantic model: no model states these rules (a bound is read
    by shared.instants, an empty one is a missing one, the range joins the two), so a model would only wrap them."""
    problems: list[dict[str, Any]] = []
    granularity = params.get("granularity", "hour")
    if granularity not in PERIOD:
        problems.append({"field": "granularity", "message": "must be 'hour' or 'day'"})
    bounds: dict[str, datetime] = {}
    for name in ("from", "to"):
        raw = params.get(name)
        if not raw:
            problems.append({"field": name, "message": "required: an ISO-8601 date-time with a UTC offset"})
            continue
        try:
            bounds[name] = parse_instant(raw)
        except ValueError as error:
            problems.append({"field": name, "message": str(error)})
    if problems:
        raise BadRequest("invalid report query", problems)
    size: Granularity = "day" if granularity == "day" else "hour"
    start = day_of(bounds["from"]) if size == "day" else hour_of(bounds["from"])
    end = bounds["to"]
    if end <= bounds["from"]:
        raise BadRequest("invalid report query", [{"field": "to", "message": "must be later than 'from'"}])
    periods = -((start - end) // PERIOD[size])  # ceiling: a partial last period counts
    if periods > MAX_PERIODS[size]:
        message = f"the range covers {periods} {size}s; at most {MAX_PERIODS[size]} per request"
        raise BadRequest("invalid report query", [{"field": "to", "message": message}])
    return ReportQuery(user_id, size, start, end)


def read_reports(db: Database[Any], query: ReportQuery, *, settings: Settings) -> list[Document]:
    """The user's reports of the range, oldest first: one partition, one indexed range."""
    policy = RetryPolicy.for_request(settings)
    if query.granularity == "hour":
        return [report_view(report) for report in _read(hourly_reports(db), "hour", query, policy)]
    return [report_view(report) for report in _read(daily_reports(db), "day", query, policy)]


def _read[R: ReportDocument](
    collection: Collection[R], field: Granularity, query: ReportQuery, policy: RetryPolicy
) -> list[R]:
    return with_retries(
        lambda: list(
            collection.find({"user_id": query.user_id, field: {"$gte": query.start, "$lt": query.end}}, {"_id": 0})
            .sort([("user_id", 1), (field, 1)])
            .limit(MAX_PERIODS[query.granularity])
        ),
        policy,
    )


def report_view(report: ReportDocument) -> Document:
    """A stored report as the API shows it: instants as ISO-8601 strings, every field in its documented order (a
    counter the stored report leaves out is 0, a reading null: shared/reports/documents.py stores them sparse)."""
    view: Document = {"user_id": report["user_id"]}
    if "hour" in report:
        view["hour"] = format_instant(report["hour"])
    else:
        view["day"] = format_instant(report["day"])
    view |= {c: report.get(c, 0) for c in COUNTERS}
    view["bottles"] = [full_entry(e) for e in report["bottles"]]
    view["updated_at"] = format_instant(report["updated_at"])
    return view
