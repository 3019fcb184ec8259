"""Reports: the change-feed processor's dispatcher (a timer: Python has no change-feed trigger for the MongoDB
API, and a timer runs on one instance) and its workers (queue-triggered, so they scale out), and the read
endpoint reporting consumers use."""

import json
import logging

import azure.functions as func

from functions.bindings import QueueMessages
from functions.invocations import Invocation, work_message
from functions.responses import handles_errors, json_response
from shared.api.ids import check_id
from shared.consumers.plugged import dispatch, partition_of, process_partition
from shared.feeds.partitions import retired
from shared.instants import utc_now
from shared.reports.reading import parse_report_query, read_reports
from shared.settings import get_settings
from shared.store.client import get_database
from shared.telemetry.observability import fields

bp = func.Blueprint()
log = logging.getLogger(__name__)

QUEUE = "%REPORTS_QUEUE%"
CONNECTION = "AzureWebJobsStorage"


@bp.function_name("aggregate_reports")
@bp.timer_trigger(arg_name="timer", schedule="%REPORTS_SCHEDULE%", run_on_startup=False, use_monitor=True)
@bp.queue_output(arg_name="work", queue_name=QUEUE, connection=CONNECTION)
def aggregate_reports(timer: func.TimerRequest, work: func.Out[QueueMessages], context: func.Context) -> None:
    invocation = Invocation.of_timer("aggregate_reports", timer, context)
    with invocation.guard(log):
        run = dispatch(get_database(), now=utc_now(), settings=get_settings(), send=work.set)
    invocation.log(log, partitions=run.partitions, leases_created=run.leases_created, dispatched=len(run.sent))


@bp.function_name("aggregate_report_partition")
@bp.queue_trigger(arg_name="message", queue_name=QUEUE, connection=CONNECTION)
def aggregate_report_partition(message: func.QueueMessage, context: func.Context) -> None:
    """A malformed message raises, so the host retries it and then moves it to the poison queue."""
    invocation = Invocation.of_message("aggregate_report_partition", message, context)
    with invocation.guard(log):
        body = work_message(message)
        if retired(body):
            retired_message = json.dumps(body, default=str)[:512]  # a queue message may be 64 KB; a log line is not
            log.info(
                "aggregate_report_partition: dropped a work message of a retired feed or layout: %s",
                retired_message,
                extra=fields(function="aggregate_report_partition", retired=retired_message),
            )
            return
        partition = partition_of(body)
        run = process_partition(get_database(), partition, now=utc_now(), settings=get_settings())
        invocation.log(
            log,
            feed=partition.feed.key,
            partition=run.lease_id,
            claimed=run.claimed,
            pages=run.pages,
            changes=run.changes,
            hourly_written=run.hourly_written,
            daily_written=run.daily_written,
            caught_up=run.caught_up,
            recovered=run.recovered,
            lost_lease=run.lost_lease,
            gave_way=run.gave_way,
        )


@bp.function_name("get_user_reports")
@bp.route(route="users/{user_id}/reports", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
@handles_errors
def get_user_reports(req: func.HttpRequest) -> func.HttpResponse:
    user_id = check_id(req.route_params.get("user_id", ""), "user_id")
    query = parse_report_query(user_id, req.params)
    found = read_reports(get_database(), query, settings=get_settings())
    return json_response(200, {"user_id": user_id, "granularity": query.granularity, "reports": found})
