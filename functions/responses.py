"""Shaping HTTP responses for every blueprint: JSON bodies, and domain errors mapped to status codes."""

import functools
import inspect
import json
import logging
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import azure.functions as func
from pymongo.errors import PyMongoError

from shared.api.payloads import check_request_text
from shared.errors import BadRequest, DomainError
from shared.store.client import StoreNotConfigured
from shared.store.retries import StoreUnavailable
from shared.telemetry import metrics
from shared.telemetry.observability import fields, host_trace, trace_parent_of

log = logging.getLogger(__name__)

Handler = Callable[[func.HttpRequest], func.HttpResponse]


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> func.HttpResponse:
    return func.HttpResponse(
        json.dumps(body, separators=(",", ":")), status_code=status, mimetype="application/json", headers=headers
    )


def handles_errors(handler: Handler) -> Handler:
    """Turn domain errors into their 4xx, an unavailable store (throttled, unreachable, failing over, timed out)
    into 503 + Retry-After, and anything else (a bug, a database error that is not transient) into a JSON 500
    with an `error_id` that is also logged: the one catch-all of the HTTP layer."""

    @functools.wraps(handler)
    def wrapper(req: func.HttpRequest, context: func.Context | None = None) -> func.HttpResponse:
        with host_trace(trace_parent_of(context)):
            response = _answer(handler, req)
            metrics.http_request(handler.__name__, response.status_code)
        return response

    # The runtime passes the invocation's `context` (its trace context: shared.telemetry.observability.host_trace) to a
    # function whose signature names it; a direct call (the benchmarks') passes none.
    signature = inspect.signature(handler)
    with_context = inspect.Parameter("context", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)
    wrapper.__signature__ = signature.replace(parameters=[*signature.parameters.values(), with_context])  # type: ignore[attr-defined]
    return wrapper


def _answer(handler: Handler, req: func.HttpRequest) -> func.HttpResponse:
    """The handler's response, or the one its error maps to (handles_errors)."""
    function = handler.__name__
    try:
        check_request_text(req.route_params, req.params, req.headers)
        return handler(req)
    except DomainError as error:
        log.info(
            "%s rejected status=%d error=%r",
            function,
            error.status,
            error.message,
            extra=fields(function=function, status=error.status, error=error.message, **_bottle(req)),
        )
        return json_response(error.status, {"error": error.message, "details": error.details})
    except StoreUnavailable as error:
        log.warning(
            "%s store unavailable: %s",
            function,
            error,
            extra=fields(function=function, status=503, reason="store_unavailable", **_bottle(req)),
        )
        metrics.unavailable_response(function, "store_unavailable")
        return json_response(
            503,
            {"error": "the database is busy or unavailable; retry later", "details": []},
            {"Retry-After": str(error.retry_after_s)},
        )
    except StoreNotConfigured as error:
        log.error(
            "%s misconfigured: %s",
            function,
            error,
            extra=fields(function=function, status=503, reason="not_configured"),
        )
        metrics.unavailable_response(function, "not_configured")
        return json_response(503, {"error": "the service is not configured", "details": []}, {"Retry-After": "60"})
    except Exception as error:
        return unexpected_error(function, error, **_bottle(req))


def _bottle(req: func.HttpRequest) -> dict[str, str]:
    """The request's bottle_id or user_id route value, as a log field: never a key, a body or a query value."""
    return {name: str(value)[:128] for name, value in req.route_params.items() if name in ("bottle_id", "user_id")}


def unexpected_error(function: str, error: Exception, **ids: str) -> func.HttpResponse:
    """A 500 for an error the code did not foresee, a database error that is not transient among them (a bad
    query is a fault, not an outage: no Retry-After). The log line (which the host tags with the invocation id)
    names the exception's type, a database error's code, and where it was raised, never its message: that could
    echo a body or a key. `ids`: the request's bottle_id or user_id, as fields of the log line."""
    error_id = uuid.uuid4().hex
    code = getattr(error, "code", None) if isinstance(error, PyMongoError) else None
    named = type(error).__name__ + ("" if code is None else f" code={code}")
    kind = type(error).__name__ + ("" if code is None else f":{code}")
    log.error(
        "%s failed error_id=%s %s at %s",
        function,
        error_id,
        named,
        _raised_at(error),
        extra=fields(function=function, status=500, error_id=error_id, error=kind, **ids),
    )
    metrics.internal_error(function, kind)
    return json_response(500, {"error": "internal error; it has been logged", "error_id": error_id, "details": []})


def _raised_at(error: BaseException) -> str:
    """The innermost frames of the traceback as file:line (function), innermost last."""
    frames = traceback.extract_tb(error.__traceback__)[-4:]
    return " < ".join(f"{Path(f.filename).name}:{f.lineno} ({f.name})" for f in reversed(frames))


def bool_param(req: func.HttpRequest, name: str) -> bool:
    raw = req.params.get(name)
    if raw is None or raw.lower() in ("false", "0", ""):
        return False
    if raw.lower() in ("true", "1"):
        return True
    raise BadRequest(f"invalid query parameter {name}", [{"field": name, "message": "must be true or false"}])
