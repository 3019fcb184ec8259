"""The local server: the registered HTTP functions on real HTTP, same routes as under `func start`."""

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.api import SPEC, ago, heartbeat, iso
from tools.local_host import LocalHost
from tools.serve import LocalServer

pytestmark = pytest.mark.integration


@pytest.fixture
def server(real_db, registered_functions):
    running = LocalServer(LocalHost.from_functions(registered_functions.values()), ("127.0.0.1", 0), timers=False)
    running.start()
    yield running
    running.stop()


def call(server: LocalServer, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None):
    data = json.dumps(body).encode() if body is not None else None
    json_type = {"Content-Type": "application/json"} if data is not None else {}
    request = urllib.request.Request(
        server.base_url + path, data=data, method=method, headers=json_type | (headers or {})
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None, dict(response.headers)
    except urllib.error.HTTPError as error:
        raw = error.read()
        return error.code, json.loads(raw) if raw else None, dict(error.headers)


def test_provision_post_and_read_over_http(server):
    status, created, headers = call(server, "PUT", "/api/bottles/bottle-1", SPEC)
    assert status == 201
    assert headers["Content-Type"] == "application/json"

    at = ago(minutes=1)
    status, body, _ = call(
        server, "POST", "/api/bottles/bottle-1/events", heartbeat(at), {"X-Device-Key": created["device_key"]}
    )
    assert (status, body) == (202, {"stored": 1, "duplicates": 0})

    status, bottle, _ = call(server, "GET", "/api/bottles/bottle-1")
    assert status == 200
    assert bottle["status"]["last_heartbeat"] == iso(at).replace("Z", ".000Z")


def test_errors_keep_their_status_and_body_over_http(server):
    status, body, _ = call(server, "POST", "/api/bottles/bottle-1/events", heartbeat(ago(minutes=1)))
    assert (status, body["error"]) == (401, "unknown bottle or wrong device key")


def test_unknown_routes_and_methods(server):
    assert call(server, "GET", "/api/nothing")[0] == 404
    assert call(server, "GET", "/not-api")[0] == 404
    status, _, headers = call(server, "DELETE", "/api/bottles/bottle-1")
    assert status == 405
    assert headers["Allow"] == "GET, PUT"
