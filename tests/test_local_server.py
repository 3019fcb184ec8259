"""The local server: the registered HTTP functions on real HTTP, same routes as under `func start`; the
framing of requests (chunked bodies, Content-Length), slow clients, many connections at once, and the
percent-decoding of paths and query strings as the Functions host does them."""

import json
import logging
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import azure.functions as func
import pytest

from tests.api import SPEC, ago, heartbeat, iso
from tools.local_host import LocalHost
from tools.serve import LocalServer

TIMEOUT = 1  # seconds a stalled client keeps its connection in these tests


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


@pytest.mark.integration
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


@pytest.mark.integration
def test_errors_keep_their_status_and_body_over_http(server):
    status, body, _ = call(server, "POST", "/api/bottles/bottle-1/events", heartbeat(ago(minutes=1)))
    assert (status, body["error"]) == (401, "unknown bottle or wrong device key")


@pytest.mark.integration
def test_unknown_routes_and_methods(server):
    assert call(server, "GET", "/api/nothing")[0] == 404
    assert call(server, "GET", "/not-api")[0] == 404
    status, _, headers = call(server, "DELETE", "/api/bottles/bottle-1")
    assert status == 405
    assert headers["Allow"] == "GET, PUT"


@pytest.mark.integration
def test_percent_encoded_paths_reach_the_real_functions_decoded(server):
    status, created, _ = call(server, "PUT", "/api/bottles/bottle%2D1", SPEC)
    assert (status, created["bottle_id"]) == (201, "bottle-1")
    since = "2026-01-01T00%3A00%3A00%2B01%3A00"
    status, body, _ = call(server, "GET", f"/api/users/{SPEC['user_id']}/notifications?since={since}&kind=silent")
    assert (status, body["notifications"]) == (200, [])


# --- the HTTP layer, on a recording function ----------------------------------------------------


@dataclass
class Call:
    method: str
    item: str
    params: dict[str, str]
    body: bytes
    headers: dict[str, str]
    url: str


def recording_host(calls: list[Call]) -> LocalHost:
    """One anonymous route, `echo/{item}`, whose function records what it received."""
    app = func.FunctionApp()

    @app.function_name("echo")
    @app.route(route="echo/{item}", methods=["GET", "POST", "PUT"], auth_level=func.AuthLevel.ANONYMOUS)
    def echo(req: func.HttpRequest) -> func.HttpResponse:
        calls.append(
            Call(req.method, req.route_params["item"], dict(req.params), req.get_body(), dict(req.headers), req.url)
        )
        return func.HttpResponse('{"ok":true}', mimetype="application/json")

    return LocalHost.from_app(app)


@pytest.fixture
def calls() -> list[Call]:
    return []


@pytest.fixture
def echo_server(calls: list[Call]) -> Iterator[LocalServer]:
    running = LocalServer(recording_host(calls), ("127.0.0.1", 0), timers=False, timeout=TIMEOUT)
    running.start()
    yield running
    running.stop()


def address(server: LocalServer) -> tuple[str, int]:
    host, port = server.base_url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def read_responses(sock: socket.socket, *, quiet: float = 0.3, limit: float = 3.0) -> list[tuple[int, bytes]]:
    """Every (status, body) the server sends until it closes the connection or stays quiet for `quiet`
    seconds after a whole response (at most `limit` seconds in all)."""
    data, responses = b"", []
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        while True:  # take every whole response off the front of what has arrived
            end = data.find(b"\r\n\r\n")
            if end < 0:
                break
            head = data[:end].decode("latin-1").split("\r\n")
            fields = dict(line.split(":", 1) for line in head[1:])
            length = int({k.lower(): v for k, v in fields.items()}.get("content-length", "0"))
            if len(data) < end + 4 + length:
                break
            responses.append((int(head[0].split()[1]), data[end + 4 : end + 4 + length]))
            data = data[end + 4 + length :]
        if responses and not data and quiet <= 0:
            break
        sock.settimeout(quiet if responses and not data else max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            if responses and not data:
                break
            continue
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return responses


def exchange(server: LocalServer, raw: bytes) -> list[tuple[int, bytes]]:
    with socket.create_connection(address(server), timeout=3) as sock:
        sock.sendall(raw)
        return read_responses(sock)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


SMUGGLED = b"GET /api/echo/smuggled HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n"


@pytest.mark.parametrize(
    "extra_header",
    [
        pytest.param(b"", id="chunked"),
        # A Content-Length that covers only the first chunk-size line: a server that prefers it to
        # Transfer-Encoding reads the chunk data as the next request (CL.TE smuggling).
        pytest.param(b"Content-Length: %d\r\n" % len(b"%x\r\n" % len(SMUGGLED)), id="chunked-and-content-length"),
    ],
)
def test_a_chunked_body_is_read_whole_and_nothing_hidden_in_it_runs(echo_server, calls, extra_header):
    head = b"POST /api/echo/first HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n" + extra_header
    raw = head + b"\r\n" + chunk(SMUGGLED) + chunk(b'{"a":1}') + b"0\r\n\r\n"

    responses = exchange(echo_server, raw)

    assert [status for status, _ in responses] == [200]
    assert [(c.method, c.item, c.body) for c in calls] == [("POST", "first", SMUGGLED + b'{"a":1}')]


@pytest.mark.parametrize(
    "lengths",
    [
        pytest.param([b"abc"], id="non-numeric"),
        pytest.param([b"-5"], id="negative"),
        pytest.param([b"7", b"70"], id="two-conflicting"),
        pytest.param([b"7, 70"], id="conflicting-list"),
        pytest.param([b"+7"], id="signed"),
    ],
)
def test_a_bad_content_length_is_a_400(echo_server, calls, lengths):
    headers = b"".join(b"Content-Length: %s\r\n" % value for value in lengths)
    raw = b"POST /api/echo/x HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers + b"\r\n" + b'{"a":1}' + SMUGGLED

    responses = exchange(echo_server, raw)

    assert [status for status, _ in responses] == [400]
    assert calls == []


def test_a_stalled_client_is_disconnected_and_others_are_served_meanwhile(echo_server, calls):
    with socket.create_connection(address(echo_server), timeout=TIMEOUT + 3) as stalled:
        stalled.sendall(b"GET /api/echo/slow HTTP/1.1\r\nHost: 127.")  # and nothing more
        started = time.monotonic()

        assert [s for s, _ in exchange(echo_server, b"GET /api/echo/other HTTP/1.1\r\nHost: x\r\n\r\n")] == [200]

        try:
            closed = stalled.recv(1024) == b""
        except ConnectionResetError:
            closed = True
        except TimeoutError:
            closed = False
        assert closed, "the stalled connection was still open"
        assert time.monotonic() - started < TIMEOUT + 2.5
    assert [c.item for c in calls] == ["other"]


def test_128_connections_at_once_are_each_answered(echo_server, calls):
    sockets = []
    try:
        for _ in range(128):
            # Under the 1 s a client waits before it sends its SYN again: a listen backlog too short for
            # the burst (http.server's is 5) drops connections, which then arrive late or not at all.
            sockets.append(socket.create_connection(address(echo_server), timeout=0.9))
        started = time.monotonic()
        for n, sock in enumerate(sockets):
            sock.sendall(b"GET /api/echo/c%d HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % n)
        answered = [read_responses(sock, quiet=0, limit=max(0.1, started + 4 - time.monotonic())) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()

    assert [[status for status, _ in responses] for responses in answered] == [[200]] * 128
    assert sorted(c.item for c in calls) == sorted(f"c{n}" for n in range(128))


def test_paths_and_query_strings_are_decoded_as_the_functions_host_does(echo_server, calls):
    query = (
        "since=2026-01-01T00%3A00%3A00%2B01%3A00"  # %2B is a plus
        "&q=a+b%20c"  # a bare plus is a space, as in a form
        "&kind=left_open&Kind=silent"  # names match case-insensitively; repeated values are joined with ","
        "&empty=&flag"  # parameters without a value are left out
    )
    responses = exchange(echo_server, f"GET /api/echo/bottle%2D1?{query} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    responses += exchange(echo_server, b"GET /api/echo/a%2Fb%20c HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    responses += exchange(echo_server, b"GET /api/echo/%E2%9C%93%FF HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    responses += exchange(echo_server, b"GET //host/api/echo/x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")  # a path

    assert [status for status, _ in responses] == [200, 200, 200, 404]
    first, slash, utf8 = calls
    assert first.item == "bottle-1"
    assert first.params == {"since": "2026-01-01T00:00:00+01:00", "q": "a b c", "kind": "left_open,silent"}
    assert first.url == f"http://127.0.0.1/api/echo/bottle-1?{query}"  # the Host header, as the host builds it
    assert slash.item == "a%2Fb c"  # as ASP.NET Core does, an encoded slash stays encoded
    assert utf8.item == "✓%FF"  # UTF-8 is decoded; bytes that are not UTF-8 stay percent-encoded


def test_request_headers_reach_the_function(echo_server, calls):
    raw = (
        b"PUT /api/echo/h HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Device-Key: k1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 2\r\n\r\n{}"
    )
    assert [status for status, _ in exchange(echo_server, raw)] == [200]
    (received,) = calls
    assert received.body == b"{}"
    assert (received.headers["x-device-key"], received.headers["content-type"]) == ("k1", "application/json")


# --- timers ---------------------------------------------------------------------------------------


def ticking_host() -> LocalHost:
    app = func.FunctionApp()

    @app.function_name("tick")
    @app.timer_trigger(schedule="* * * * * *", arg_name="timer")
    @app.queue_output(arg_name="outbox", queue_name="outbox", connection="AzureWebJobsStorage")
    def tick(timer: func.TimerRequest, outbox: func.Out[str]) -> None:
        outbox.set('{"tick":1}')

    return LocalHost.from_app(app)


def test_timers_run_on_their_schedules_and_their_queue_messages_are_logged(caplog):
    host = ticking_host()
    running = LocalServer(host, ("127.0.0.1", 0))
    with caplog.at_level(logging.INFO, logger="serve"):
        running.start()
        try:
            deadline = time.monotonic() + 4
            while not host.queues.get("outbox") and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            running.stop()
    assert host.queues["outbox"][0] == '{"tick":1}'
    assert 'queue message from tick: {"tick":1}' in caplog.messages


def test_the_server_stops_promptly_with_a_client_connected(echo_server):
    with socket.create_connection(address(echo_server), timeout=3):
        stopper = threading.Thread(target=echo_server.stop)
        started = time.monotonic()
        stopper.start()
        stopper.join(5)
        assert not stopper.is_alive()
        assert time.monotonic() - started < 3
