"""The simulation over real HTTP, in real time: a fleet's device traffic sent as it happens to a local server,
`func start` or a deployed app (a smoke and load test for operations)."""

import http.client
import json
import random
import time
import urllib.error
import urllib.request
from datetime import timedelta
from typing import Any

from shared.instants import utc_now
from shared.store.command_line import CommandFailed
from tools.fleet import make_fleet, plan_fleet
from tools.progress import Progress
from tools.simulate.devices import Send, post, provision
from tools.simulate.result import Tally


def http_sender(base_url: str) -> Send:
    """Requests to `base_url`; a server that cannot be reached, or that drops a request, ends the run with a
    CommandFailed saying which request (a load test against a server that is not there measures nothing)."""

    def send(method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        request = urllib.request.Request(
            base_url.rstrip("/") + path,
            data=body or None,
            method=method,
            headers={"Content-Type": "application/json", **headers},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw = response.read()
                return response.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as error:
            raw = error.read()
            try:
                return error.code, json.loads(raw) if raw else None
            except ValueError:
                return error.code, raw.decode(errors="replace")
        except urllib.error.URLError as error:
            raise CommandFailed(f"--http {base_url}: {method} {path}: {_why(error.reason)}") from None
        except (OSError, http.client.HTTPException) as error:  # a timeout, a reset, a malformed answer
            raise CommandFailed(f"--http {base_url}: {method} {path}: {_why(error)}") from None

    return send


def _why(reason: object) -> str:
    """A failed request's reason in a few words: "no answer in time", the OS's message, or the error's text."""
    if isinstance(reason, TimeoutError):
        return "no answer in time"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror
    return str(reason) or type(reason).__name__


def run_over_http(
    base_url: str,
    *,
    bottles: int,
    users: int,
    minutes: float,
    heartbeat_seconds: float,
    seed: int,
    function_key: str | None = None,
    progress: bool = True,
) -> Tally:
    """Send a fleet's device traffic to `base_url` as it happens (event times are the app's clock,
    `utc_now`: the real one unless set or placed)."""
    rng = random.Random(seed)
    fleet = make_fleet(rng, bottles, users)
    send = http_sender(base_url)
    keys = provision(fleet, send, function_key)
    start = utc_now()
    plan = plan_fleet(rng, fleet, start, minutes / 1440, heartbeat=timedelta(seconds=heartbeat_seconds))
    tally = Tally()
    bar = Progress(len(plan.requests), "sending", what="requests") if progress else None
    for done, request in enumerate(plan.requests, 1):
        delay = (request.at - utc_now()).total_seconds()
        if delay > 0:
            time.sleep(delay)
        post(request, keys, send, tally)
        if bar is not None and done % 50 == 0:
            bar.update(done, f"{done:,} requests sent")
    if bar is not None:
        bar.finish(f"{len(plan.requests):,} requests sent")
    return tally
