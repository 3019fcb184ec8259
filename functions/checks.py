"""The notification checks: three timers that dispatch their sweeps (a timer runs on one instance), one work
message per partition of the fleet through a queue output binding, and the queue-triggered worker that sweeps one
partition (so the sweeps scale out), records one notification per episode and sends each new one to the
notifications queue (with the Storage Queue SDK, inside the invocation, so a notification is marked queued only
once the queue has its message)."""

import logging
from time import sleep

import azure.functions as func

from functions.bindings import QueueMessages
from functions.invocations import Invocation, work_message
from shared.instants import utc_now
from shared.notifications.checks.partitions import CheckPartition, dispatch
from shared.notifications.checks.run import run_check
from shared.notifications.documents import Kind
from shared.notifications.queue import get_sender
from shared.settings import get_settings
from shared.store.client import get_database

bp = func.Blueprint()
log = logging.getLogger(__name__)

QUEUE = "%CHECKS_QUEUE%"
CONNECTION = "AzureWebJobsStorage"


def _dispatch(invocation: Invocation, kind: Kind, work: func.Out[QueueMessages]) -> None:
    """A past-due run (the host was down or busy) is an ordinary run: the partitions' sweeps catch up."""
    with invocation.guard(log):
        dispatched = dispatch(kind, settings=get_settings(), send=work.set)
    invocation.log(log, check=kind, dispatched=len(dispatched))


@bp.function_name("check_open_bottles")
@bp.timer_trigger(arg_name="timer", schedule="%CHECK_OPEN_BOTTLES_SCHEDULE%", run_on_startup=False, use_monitor=True)
@bp.queue_output(arg_name="work", queue_name=QUEUE, connection=CONNECTION)
def check_open_bottles(timer: func.TimerRequest, work: func.Out[QueueMessages], context: func.Context) -> None:
    _dispatch(Invocation.of_timer("check_open_bottles", timer, context), "left_open", work)


@bp.function_name("check_silent_bottles")
@bp.timer_trigger(arg_name="timer", schedule="%CHECK_SILENT_BOTTLES_SCHEDULE%", run_on_startup=False, use_monitor=True)
@bp.queue_output(arg_name="work", queue_name=QUEUE, connection=CONNECTION)
def check_silent_bottles(timer: func.TimerRequest, work: func.Out[QueueMessages], context: func.Context) -> None:
    _dispatch(Invocation.of_timer("check_silent_bottles", timer, context), "silent", work)


@bp.function_name("check_late_doses")
@bp.timer_trigger(arg_name="timer", schedule="%CHECK_LATE_DOSES_SCHEDULE%", run_on_startup=False, use_monitor=True)
@bp.queue_output(arg_name="work", queue_name=QUEUE, connection=CONNECTION)
def check_late_doses(timer: func.TimerRequest, work: func.Out[QueueMessages], context: func.Context) -> None:
    _dispatch(Invocation.of_timer("check_late_doses", timer, context), "late_dose", work)


@bp.function_name("run_check_partition")
@bp.queue_trigger(arg_name="message", queue_name=QUEUE, connection=CONNECTION)
def run_check_partition(message: func.QueueMessage, context: func.Context) -> None:
    """A malformed message raises, so the host retries it and then moves it to the poison queue."""
    invocation = Invocation.of_message("run_check_partition", message, context)
    with invocation.guard(log):
        partition = CheckPartition.from_message(work_message(message))
        settings = get_settings()
        run = run_check(
            get_database(),
            partition.kind,
            partition=partition.buckets,
            now=utc_now(),
            settings=settings,
            send=get_sender(settings),
            sleep=sleep,  # a late-dose sweep waits for its paced batches (CHECK_LATE_DOSES_SPREAD_MINUTES)
            wall=utc_now,  # each notification's created_at: when it is written, on the server clock
        )
        invocation.log(
            log,
            check=partition.kind,
            partition=partition.name,
            examined=run.examined,
            notified=run.notified,
            withheld=run.withheld,
            resolved=run.resolved,
            queued=run.queued,
            send_failed=run.send_failed,
            complete=run.complete,
            paced=run.paced,
        )
