"""What the simulated fleet's devices send, through any `Send` (the local host's routes or real HTTP): each bottle
provisioned, and each planned request posted and tallied."""

import json
import time
from collections.abc import Callable
from typing import Any

from shared.store.command_line import CommandFailed
from tools.fleet import Bottle, Request
from tools.simulate.result import Tally

# A request (method, path with its query, headers, body) and its answer: the status and the parsed JSON body.
Send = Callable[[str, str, dict[str, str], bytes], tuple[int, Any]]


def host_sender(host: Any) -> Send:
    """Requests to a LocalHost's routes, as the Functions host would route them (`path` may carry a query)."""

    def send(method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        route, _, query = path.partition("?")
        params = dict(p.split("=", 1) for p in query.split("&") if p)
        response = host.handle(method, route, headers=headers, params=params, body=body)
        raw = response.get_body()
        return response.status_code, json.loads(raw) if raw else None

    return send


def provision(fleet: list[Bottle], send: Send, function_key: str | None = None) -> dict[str, str]:
    """Each bottle's device key, once provisioned (an existing bottle's key rotated); CommandFailed on a refusal."""
    headers = {"x-functions-key": function_key} if function_key else {}
    keys = {}
    for bottle in fleet:
        status, body = send("PUT", f"/api/bottles/{bottle.bottle_id}", headers, json.dumps(bottle.spec()).encode())
        if status == 200:  # the bottle exists from an earlier run: a new key makes it ours again
            status, body = send(
                "PUT", f"/api/bottles/{bottle.bottle_id}?rotate_key=true", headers, json.dumps(bottle.spec()).encode()
            )
        if status not in (200, 201):
            raise CommandFailed(f"provisioning {bottle.bottle_id} failed: {status} {body}")
        keys[bottle.bottle_id] = body["device_key"]
    return keys


def post(request: Request, keys: dict[str, str], send: Send, tally: Tally) -> None:
    """Post one planned request with its bottle's key; its answer and latency go to `tally`."""
    started = time.perf_counter()
    status, body = send(
        "POST",
        f"/api/bottles/{request.bottle_id}/events",
        {"X-Device-Key": keys[request.bottle_id]},
        json.dumps(request.payload).encode(),
    )
    tally.record(request, status, body, time.perf_counter() - started)
