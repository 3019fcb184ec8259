"""The notification checks: three timers that sweep the fleet for bottles in trouble, record one notification
per episode and send each new one to the notifications queue (with the Storage Queue SDK, inside the invocation,
so a notification is marked queued only once the queue has its message)."""

import logging
import time

import azure.functions as func

from shared.instants import utc_now
from shared.notifications.checks import run_check
from shared.notifications.documents import Kind
from shared.notifications.queue import get_sender
from shared.observability import log_invocation
from shared.settings import get_settings
from shared.store.client import get_database

bp = func.Blueprint()
log = logging.getLogger(__name__)


def _run(function: str, kind: Kind, timer: func.TimerRequest) -> None:
    """A past-due run (the host was down or busy) is an ordinary run: the sweeps catch up on everything."""
    started = time.perf_counter()
    settings = get_settings()
    run = run_check(get_database(), kind, now=utc_now(), settings=settings, send=get_sender(settings))
    log_invocation(
        log,
        function,
        examined=run.examined,
        notified=run.notified,
        withheld=run.withheld,
        resolved=run.resolved,
        queued=run.queued,
        send_failed=run.send_failed,
        complete=run.complete,
        past_due=timer.past_due,
        duration_ms=round((time.perf_counter() - started) * 1000),
    )


@bp.function_name("check_open_bottles")
@bp.timer_trigger(arg_name="timer", schedule="%CHECK_OPEN_BOTTLES_SCHEDULE%", run_on_startup=False, use_monitor=True)
def check_open_bottles(timer: func.TimerRequest) -> None:
    _run("check_open_bottles", "left_open", timer)


@bp.function_name("check_silent_bottles")
@bp.timer_trigger(arg_name="timer", schedule="%CHECK_SILENT_BOTTLES_SCHEDULE%", run_on_startup=False, use_monitor=True)
def check_silent_bottles(timer: func.TimerRequest) -> None:
    _run("check_silent_bottles", "silent", timer)


@bp.function_name("check_late_doses")
@bp.timer_trigger(arg_name="timer", schedule="%CHECK_LATE_DOSES_SCHEDULE%", run_on_startup=False, use_monitor=True)
def check_late_doses(timer: func.TimerRequest) -> None:
    _run("check_late_doses", "late_dose", timer)
