"""The host's side of each binding: trigger data into protocol messages, and what the runtime hands back out.

Shapes follow what the Functions host sends a worker: an HTTP request as `RpcHttp` built by the capabilities the
worker declared (`http_request`), a timer's firing as the JSON of its `TimerInfo`, a queue message as its body with
the message's fields in the trigger metadata; a queue output binding comes back as a string, bytes or the JSON of a
list of messages, and an HTTP response as `RpcHttp` with a numeric status code as a string.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Mapping
from datetime import datetime

import azure.functions as func

from tools.host.protocol import ParameterBinding, RpcHttp, TypedData

RAW_HTTP_BODY_BYTES = "RawHttpBodyBytes"
RPC_HTTP_BODY_ONLY = "RpcHttpBodyOnly"


class NotSendable(ValueError):
    """A request the Functions host cannot send the worker: the protocol's strings are UTF-8, and one of this
    request's is not Unicode (it holds a lone surrogate). No HTTP request produces one: the host decodes what it
    receives, and an escape that is not UTF-8 stays escaped (tools/serve.py does the same)."""


def http_request(
    name: str,
    *,
    method: str,
    url: str,
    headers: dict[str, str],
    query: dict[str, str],
    route_params: dict[str, str],
    body: bytes,
    capabilities: Mapping[str, str] | None = None,
) -> ParameterBinding:
    """An HTTP trigger's input, as the host builds it for a worker with `capabilities` (what its WorkerInitResponse
    declared; none: a worker that declared nothing) in azure-functions-host's `ToRpcHttp`
    (src/WebJobs.Script.Grpc/MessageExtensions/GrpcMessageConversionExtensions.cs, commit 09adf43, read 2026-11-28):
    header names in lower case (values of names that differ only in case joined with ","), query parameters with
    an empty value left out, the route parameters, and a body only when there is one: for a worker that declared
    `RpcHttpBodyOnly` the body alone, for any other the body and `rawBody`; bytes where the worker declared
    `RawHttpBodyBytes` (or the body is `application/octet-stream` or multipart), else the text."""
    lowered: dict[str, str] = {}
    for header, value in headers.items():
        key = header.lower()
        lowered[key] = f"{lowered[key]},{value}" if key in lowered else value
    binding = ParameterBinding(name=name)
    http = binding.data.http  # built in place: each nested message a constructor copies would be copied again
    try:
        http.method = method
        http.url = url
        http.headers.update(lowered)
        http.query.update({key: value for key, value in query.items() if value})
        http.params.update(route_params)
    except UnicodeEncodeError:
        parts = {"method": {"": method}, "URL": {"": url}, "header": headers, "query parameter": query}
        raise NotSendable(_not_unicode({**parts, "route parameter": route_params})) from None
    if body:
        _set_body(http, body, lowered.get("content-type", ""), capabilities or {})
    return binding


def _set_body(http: RpcHttp, body: bytes, content_type: str, declared: Mapping[str, str]) -> None:
    """The body (and, for a worker without `RpcHttpBodyOnly`, `rawBody`) the host sends with a request."""
    raw_bytes = bool(declared.get(RAW_HTTP_BODY_BYTES))
    if declared.get(RPC_HTTP_BODY_ONLY):
        if raw_bytes or _octet_or_multipart(content_type):
            http.body.bytes = body
        else:
            http.body.string = _text(body, content_type)
        return
    http.body.CopyFrom(_body_beside_raw(body, content_type))
    if raw_bytes:
        http.rawBody.bytes = body
    else:
        http.rawBody.string = _text(body, content_type)


def _not_unicode(parts: dict[str, dict[str, str]]) -> str:
    """Which name or value of a request is not Unicode, in a sentence."""
    for kind, items in parts.items():
        for key, value in items.items():
            for text in (key, value):
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    where = f"{kind} {key!r}" if key else kind
                    return f"the Functions host cannot send the {where}: {text!r} holds a lone surrogate, not Unicode"
    return "the Functions host cannot send a string of this request: it is not Unicode"


def _media_type(content_type: str) -> str:
    return content_type.split(";", maxsplit=1)[0].strip().lower()


def _octet_or_multipart(content_type: str) -> bool:
    media = _media_type(content_type)
    return media == "application/octet-stream" or "multipart/" in media


def _text(body: bytes, content_type: str) -> str:
    """The body read as text, as ASP.NET Core reads it: by the Content-Type's charset (UTF-8 when it names none,
    or one Python does not know), invalid bytes replaced."""
    charset = next(
        (
            p.split("=", 1)[1].strip().strip('"')
            for p in content_type.split(";")[1:]
            if p.strip().lower().startswith("charset=")
        ),
        "utf-8",
    )
    try:
        codecs.lookup(charset)
    except LookupError:
        charset = "utf-8"
    return body.decode(charset, errors="replace")


def _body_beside_raw(body: bytes, content_type: str) -> TypedData:
    """The `body` the host sends beside `rawBody` (a worker without `RpcHttpBodyOnly`): JSON as JSON when it parses
    (compact, as the host re-serializes it; a JSON string as a string), bytes for octet-stream and multipart,
    else the text."""
    if _media_type(content_type) == "application/json":
        text = _text(body, content_type)
        try:
            parsed = json.loads(text)
        except ValueError:
            return TypedData(string=text)
        if isinstance(parsed, str):
            return TypedData(string=parsed)
        return TypedData(json=json.dumps(parsed, separators=(",", ":"), ensure_ascii=False))
    if _octet_or_multipart(content_type):
        return TypedData(bytes=body)
    return TypedData(string=_text(body, content_type))


def http_response(value: TypedData | None, function: str) -> func.HttpResponse:
    """The function's `$return` HTTP response; a function that returned none (or not an HTTP response) is the
    host's empty 500, as in Azure."""
    kind = None if value is None else value.WhichOneof("data")
    if value is None or kind != "http":
        raise TypeError(f"HTTP function {function} returned {kind or 'nothing'}, not an HTTP response")
    http = value.http
    body = b""
    if http.HasField("body"):
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
    kind = None if value is None else value.WhichOneof("data")
    if value is None or kind is None:
        return []
    if kind == "string":
        return [str(value.string)]
    if kind == "bytes":
        return [bytes(value.bytes or b"").decode()]
    if kind == "json":
        decoded = json.loads(str(value.json))
        items = decoded if isinstance(decoded, list) else [decoded]
        return [item["body"] if isinstance(item, dict) else str(item) for item in items]
    raise TypeError(f"a queue output binding came back as {kind}")
