"""The host's side of each binding: trigger data into protocol messages, and what the runtime hands back out.

Shapes follow what the Functions host sends a worker: an HTTP request as `RpcHttp` (the body as raw bytes, the
worker having declared `RawHttpBodyBytes`), a timer's firing as the JSON of its `TimerInfo`, a queue message as its
body with the message's fields in the trigger metadata; a queue output binding comes back as a string, bytes or the
JSON of a list of messages, and an HTTP response as `RpcHttp` with a numeric status code as a string.
"""

from __future__ import annotations

import json
from datetime import datetime

import azure.functions as func

from tools.host.protocol import ParameterBinding, RpcHttp, TypedData


def http_request(
    name: str,
    *,
    method: str,
    url: str,
    headers: dict[str, str],
    query: dict[str, str],
    route_params: dict[str, str],
    body: bytes,
) -> ParameterBinding:
    """An HTTP trigger's input, as the host sends it."""
    http = RpcHttp(
        method=method,
        url=url,
        headers=dict(headers),
        query=dict(query),
        params=dict(route_params),
        body=TypedData(bytes=body),
    )
    return ParameterBinding(name=name, data=TypedData(http=http))


def http_response(value: TypedData | None, function: str) -> func.HttpResponse:
    """The function's `$return` HTTP response; a function that returned none (or not an HTTP response) is the
    host's empty 500, as in Azure."""
    if value is None or value.http is None:
        kind = "nothing" if value is None else value.WhichOneof("data")
        raise TypeError(f"HTTP function {function} returned {kind}, not an HTTP response")
    http = value.http
    body = b""
    if http.body is not None:
        kind = http.body.WhichOneof("data")
        raw = getattr(http.body, kind) if kind else b""
        body = raw.encode() if isinstance(raw, str) else bytes(raw or b"")
    headers = dict(http.headers)
    mimetype = next((v for k, v in headers.items() if k.lower() == "content-type"), None)
    return func.HttpResponse(body=body, status_code=int(http.status_code or 200), headers=headers, mimetype=mimetype)


def timer_info(name: str, *, past_due: bool, last: datetime | None, next_firing: datetime | None) -> ParameterBinding:
    """A timer trigger's input: the JSON of the host's TimerInfo (schedule status with the last and next firing)."""
    status = {
        "Last": last.isoformat() if last else None,
        "Next": next_firing.isoformat() if next_firing else None,
        "LastUpdated": last.isoformat() if last else None,
    }
    info = {"Schedule": {"AdjustForDST": True}, "ScheduleStatus": status, "IsPastDue": past_due}
    return ParameterBinding(name=name, data=TypedData(json=json.dumps(info)))


def queue_message(
    name: str,
    *,
    id: str,
    body: str | bytes,
    dequeue_count: int,
    insertion_time: datetime,
    expiration_time: datetime,
    next_visible_time: datetime,
    pop_receipt: str,
) -> tuple[ParameterBinding, dict[str, TypedData]]:
    """A queue trigger's input and trigger metadata, as the host sends them (strings as strings, numbers and
    times as JSON)."""
    metadata = {
        "Id": TypedData(string=id),
        "PopReceipt": TypedData(string=pop_receipt),
        "DequeueCount": TypedData(json=json.dumps(dequeue_count)),
        "InsertionTime": TypedData(json=json.dumps(insertion_time.isoformat())),
        "ExpirationTime": TypedData(json=json.dumps(expiration_time.isoformat())),
        "NextVisibleTime": TypedData(json=json.dumps(next_visible_time.isoformat())),
    }
    data = TypedData(string=body) if isinstance(body, str) else TypedData(bytes=body)
    return ParameterBinding(name=name, data=data), metadata


def queue_messages(value: TypedData | None) -> list[str]:
    """The messages a queue output binding was set to: one string or bytes, or the JSON list the runtime sends
    for a list (a QueueMessage in it as {"id", "body"})."""
    if value is None:
        return []
    kind = value.WhichOneof("data")
    if kind == "string":
        return [str(value.string)]
    if kind == "bytes":
        return [bytes(value.bytes or b"").decode()]
    if kind == "json":
        decoded = json.loads(str(value.json))
        items = decoded if isinstance(decoded, list) else [decoded]
        return [item["body"] if isinstance(item, dict) else str(item) for item in items]
    raise TypeError(f"a queue output binding came back as {kind}")
