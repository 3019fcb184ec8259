"""Calling the HTTP functions directly, as the Functions host would, and reading their responses."""

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from functions import bottles, device_events
from shared.instants import utc_now
from tests import invoke

_provision = bottles.provision_bottle
_get_bottle = bottles.get_bottle
_post_events = device_events.post_events

SPEC: dict[str, Any] = {
    "user_id": "willcross1024",
    "medication": "Cordrazine",
    "schedule": {"times": ["08:00", "20:00"], "timezone": "Europe/Rome"},
    "grace_minutes": 60,
}


@dataclass
class Response:
    status: int
    body: Any
    headers: dict[str, str]


def call_http(
    handler: Any,
    method: str,
    url: str,
    route: dict[str, str],
    body: bytes = b"",
    *,
    headers: dict[str, str] | None = None,
    params: dict[str, str] | None = None,
) -> Response:
    """The HTTP function `handler` answering one request, invoked through the Functions runtime (tests/invoke.py)."""
    response = invoke.http(
        handler, method=method, url=url, headers=headers, params=params, route_params=route, body=body
    )
    raw = response.get_body()
    return Response(response.status_code, json.loads(raw) if raw else None, dict(response.headers))


def put_bottle(
    bottle_id: str,
    spec: Any = None,
    *,
    rotate_key: bool = False,
    raw: bytes | None = None,
    content_type: str | None = "application/json",
) -> Response:
    body = raw if raw is not None else json.dumps(SPEC if spec is None else spec).encode()
    params = {"rotate_key": "true"} if rotate_key else {}
    headers = {"Content-Type": content_type} if content_type is not None else {}
    return call_http(
        _provision, "PUT", f"/api/bottles/{bottle_id}", {"bottle_id": bottle_id}, body, params=params, headers=headers
    )


def get_bottle(bottle_id: str) -> Response:
    return call_http(_get_bottle, "GET", f"/api/bottles/{bottle_id}", {"bottle_id": bottle_id})


def post_events(
    bottle_id: str, key: str | None, payload: Any = None, *, raw: bytes | None = None, content_type: str | None = None
) -> Response:
    body = raw if raw is not None else json.dumps(payload).encode()
    headers = {"X-Device-Key": key} if key is not None else {}
    if content_type is not None:
        headers["Content-Type"] = content_type
    return call_http(
        _post_events, "POST", f"/api/bottles/{bottle_id}/events", {"bottle_id": bottle_id}, body, headers=headers
    )


def provisioned(bottle_id: str = "bottle-1", spec: Any = None) -> str:
    """Provision a bottle and return its device key."""
    response = put_bottle(bottle_id, spec)
    assert response.status == 201, response.body
    return str(response.body["device_key"])


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def ago(**delta: float) -> datetime:
    """A recent instant by the server clock, whole seconds, UTC."""
    return (utc_now() - timedelta(**delta)).replace(microsecond=0)


def heartbeat(at: datetime, **extra: Any) -> dict[str, Any]:
    return {"type": "heartbeat", "time": iso(at), **extra}


def opened(at: datetime, pills: int = 30, mass: float = 15.0, **extra: Any) -> dict[str, Any]:
    return {"type": "opened", "time": iso(at), "number_of_pills": pills, "mass_of_contents": mass, **extra}


def closed(at: datetime, taken: int = 1, pills: int = 29, mass: float = 14.5, **extra: Any) -> dict[str, Any]:
    return {
        "type": "closed",
        "time": iso(at),
        "number_of_pills": pills,
        "mass_of_contents": mass,
        "pills_taken": taken,
        **extra,
    }
