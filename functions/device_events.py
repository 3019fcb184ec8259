"""Device ingestion: bottles post heartbeats and opened/closed events, authenticated by their device key."""

import logging

import azure.functions as func

from functions.responses import handles_errors, json_response
from shared.api.ids import check_id
from shared.ingestion.receive import receive
from shared.instants import utc_now
from shared.settings import get_settings
from shared.store.client import get_database
from shared.telemetry import metrics
from shared.telemetry.observability import log_invocation

bp = func.Blueprint()
log = logging.getLogger(__name__)


# Anonymous at the Functions layer: each device authenticates with its own key (X-Device-Key), so no
# fleet-wide function key has to be burned into 30 M devices.
@bp.function_name("post_events")
@bp.route(route="bottles/{bottle_id}/events", methods=["POST"], auth_level=func.AuthLevel.ANONYMOUS)
@handles_errors
def post_events(req: func.HttpRequest) -> func.HttpResponse:
    bottle_id = check_id(req.route_params.get("bottle_id", ""), "bottle_id")
    result = receive(
        get_database(),
        bottle_id,
        req.headers.get("X-Device-Key"),
        req.get_body(),
        content_type=req.headers.get("Content-Type"),
        now=utc_now(),
        settings=get_settings(),
    )
    counts = {"stored": result.stored, "duplicates": result.duplicates, "expired": result.expired}
    metrics.events_received(stored=result.stored, duplicate=result.duplicates, expired=result.expired)
    log_invocation(log, "post_events", bottle_id=bottle_id, **counts)
    return json_response(202, counts)
