"""Bottle registry endpoints for operations: provision/update a bottle, read its status."""

import logging

import azure.functions as func

from functions.responses import bool_param, handles_errors, json_response
from shared.api.ids import check_id
from shared.api.payloads import check_media_type, check_size, decode_json
from shared.bottles.provisioning import provision
from shared.bottles.spec import parse_bottle_spec
from shared.bottles.status import bottle_status
from shared.instants import utc_now
from shared.settings import get_settings
from shared.store.client import get_database
from shared.telemetry.observability import log_invocation

bp = func.Blueprint()
log = logging.getLogger(__name__)


@bp.function_name("provision_bottle")
@bp.route(route="bottles/{bottle_id}", methods=["PUT"], auth_level=func.AuthLevel.FUNCTION)
@handles_errors
def provision_bottle(req: func.HttpRequest) -> func.HttpResponse:
    bottle_id = check_id(req.route_params.get("bottle_id", ""), "bottle_id")
    rotate_key = bool_param(req, "rotate_key")
    check_media_type(req.headers.get("Content-Type"))
    spec = parse_bottle_spec(decode_json(check_size(req.get_body())))
    result = provision(get_database(), bottle_id, spec, rotate_key=rotate_key, now=utc_now(), settings=get_settings())
    log_invocation(
        log, "provision_bottle", bottle_id=bottle_id, created=result.created, key_issued=result.device_key is not None
    )
    body = result.bottle if result.device_key is None else {**result.bottle, "device_key": result.device_key}
    return json_response(201 if result.created else 200, body)


@bp.function_name("get_bottle")
@bp.route(route="bottles/{bottle_id}", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
@handles_errors
def get_bottle(req: func.HttpRequest) -> func.HttpResponse:
    bottle_id = check_id(req.route_params.get("bottle_id", ""), "bottle_id")
    view = bottle_status(get_database(), bottle_id, settings=get_settings())
    return json_response(200, view)
