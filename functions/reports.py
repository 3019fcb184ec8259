"""Reports: the change-feed consumer (a timer; Python has no change-feed trigger for the MongoDB API) and the
read endpoint reporting consumers use."""

import logging
import time

import azure.functions as func

from functions.responses import handles_errors, json_response
from shared.ids import check_id
from shared.instants import utc_now
from shared.observability import log_invocation
from shared.reports.change_feed import FeedsFailed, run_consumer
from shared.reports.reading import parse_report_query, read_reports
from shared.settings import get_settings
from shared.store.client import get_database

bp = func.Blueprint()
log = logging.getLogger(__name__)


@bp.function_name("aggregate_reports")
@bp.timer_trigger(arg_name="timer", schedule="%REPORTS_SCHEDULE%", run_on_startup=False, use_monitor=True)
def aggregate_reports(timer: func.TimerRequest) -> None:
    """A feed that failed fails the invocation (after the others' progress is saved), so the host counts it."""
    started = time.perf_counter()
    summary = run_consumer(get_database(), get_settings(), now=utc_now())
    log_invocation(
        log,
        "aggregate_reports",
        pages=summary.pages,
        changes=summary.changes,
        hourly_written=summary.hourly_written,
        daily_written=summary.daily_written,
        caught_up=summary.caught_up,
        recovered=summary.recovered,
        failed=summary.failed,
        past_due=timer.past_due,
        duration_ms=round((time.perf_counter() - started) * 1000),
    )
    if summary.failed:
        raise FeedsFailed(summary.failed)


@bp.function_name("get_user_reports")
@bp.route(route="users/{user_id}/reports", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
@handles_errors
def get_user_reports(req: func.HttpRequest) -> func.HttpResponse:
    user_id = check_id(req.route_params.get("user_id", ""), "user_id")
    query = parse_report_query(user_id, req.params)
    found = read_reports(get_database(), query, settings=get_settings())
    return json_response(200, {"user_id": user_id, "granularity": query.granularity, "reports": found})
