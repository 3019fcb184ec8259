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
from dataclasses import astuple, dataclass, replace
from datetime import datetime
from typing import Any

import azure.functions as func
import pytest

from shared.notifications.queue import get_sender
from shared.settings import get_settings
from tests.api import SPEC, ago, heartbeat, iso
from tools.http_bounds import Limits
from tools.local_host import LocalHost
from tools.ncrontab import Schedule
from tools.serve import LocalServer

TIMEOUT = 1  # seconds a stalled client keeps its connection in these tests


@pytest.fixture
def server(real_db, registered_functions):
    running = LocalServer(LocalHost.load(), ("127.0.0.1", 0), timers=False)
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
    assert (status, body) == (202, {"stored": 1, "duplicates": 0, "expired": 0})

    status, bottle, _ = call(server, "GET", "/api/bottles/bottle-1")
    assert status == 200
    assert bottle["status"]["last_heartbeat"] == iso(at).replace("Z", ".000Z")


@pytest.mark.integration
def test_errors_keep_their_status_and_body_over_http(server):
    status, body, _ = call(server, "POST", "/api/bottles/bottle-1/events", heartbeat(ago(minutes=1)))
    assert (status, body["error"]) == (401, "unknown bottle or wrong device key")


@pytest.mark.integration
def test_unknown_routes_and_methods_answer_json_errors(server):
    for path in ("/api/nothing", "/not-api", "/api/bottles/bottle-1/nothing"):
        status, body, headers = call(server, "GET", path)
        assert (status, headers["Content-Type"]) == (404, "application/json"), path
        assert body == {"error": f"no function serves {path}", "details": []}
    status, body, headers = call(server, "DELETE", "/api/bottles/bottle-1")
    assert (status, headers["Allow"], headers["Content-Type"]) == (405, "GET, PUT", "application/json")
    assert body == {"error": "method DELETE is not allowed on /api/bottles/bottle-1; allowed: GET, PUT", "details": []}
    status, body, _ = call(server, "GET", "/api/bottles/a%00b")
    assert (status, body) == (400, {"error": "bad request path: the path contains a null character", "details": []})


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

    return LocalHost.for_app_object(app)


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


def test_a_chunked_body_is_read_whole_and_nothing_hidden_in_it_runs(echo_server, calls):
    head = b"POST /api/echo/first HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
    raw = head + b"\r\n" + chunk(SMUGGLED) + chunk(b'{"a":1}') + b"0\r\n\r\n"

    responses = exchange(echo_server, raw)

    assert [status for status, _ in responses] == [200]
    assert [(c.method, c.item, c.body) for c in calls] == [("POST", "first", SMUGGLED + b'{"a":1}')]


def closed_by_server(sock: socket.socket, wait: float = 1.0) -> bool:
    """Whether the server has closed the connection (end of stream or a reset within `wait` seconds)."""
    sock.settimeout(wait)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except (TimeoutError, BlockingIOError):  # BlockingIOError: nothing there, with no wait
        return False


# A Content-Length that covers only the first chunk-size line: a server that prefers it to Transfer-Encoding
# reads the chunk data as the next request (CL.TE smuggling).
SIZE_LINE = b"Content-Length: %d\r\n" % len(b"%x\r\n" % len(SMUGGLED))


@pytest.mark.parametrize(
    ("version", "framing"),
    [
        pytest.param(b"1.1", b"Transfer-Encoding: chunked\r\n" + SIZE_LINE, id="chunked-and-content-length"),
        pytest.param(b"1.1", SIZE_LINE + b"Transfer-Encoding: chunked\r\n", id="content-length-and-chunked"),
        pytest.param(b"1.1", b"Transfer-Encoding:\r\n chunked\r\n", id="folded-transfer-encoding"),
        pytest.param(b"1.1", b"X-Note: one\r\n\ttwo\r\nTransfer-Encoding: chunked\r\n", id="any-folded-line"),
        pytest.param(b"1.0", b"Transfer-Encoding: chunked\r\n", id="chunked-in-http-1.0"),
    ],
)
def test_ambiguous_framing_is_a_400_nothing_runs_and_the_connection_closes(echo_server, calls, version, framing):
    head = b"POST /api/echo/first HTTP/%s\r\nHost: 127.0.0.1\r\n%s\r\n" % (version, framing)
    with socket.create_connection(address(echo_server), timeout=3) as sock:
        sock.sendall(head + chunk(SMUGGLED) + b"0\r\n\r\n")
        responses = read_responses(sock, quiet=0)

        assert [status for status, _ in responses] == [400]
        assert json.loads(responses[0][1])["error"].startswith("Bad Request: ")
        assert closed_by_server(sock), "the connection stayed open after ambiguous framing"
    assert calls == []


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
    assert json.loads(responses[0][1]) == {"error": "Bad Request: Content-Length is invalid", "details": []}
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


@pytest.fixture
def deadline_server(calls: list[Call]) -> Iterator[LocalServer]:
    """Short deadlines, and an idle timeout longer than them: only the deadlines can close a trickling client."""
    limits = Limits(header_seconds=1, request_seconds=2)
    running = LocalServer(recording_host(calls), ("127.0.0.1", 0), timers=False, timeout=30, limits=limits)
    running.start()
    yield running
    running.stop()


def trickle(sock: socket.socket, data: bytes, *, every: float, for_at_most: float) -> float | None:
    """Send `data` a byte every `every` seconds; the seconds until the server closed the connection, or None if
    it was still open after `for_at_most` seconds."""
    started = time.monotonic()
    for byte in data:
        if time.monotonic() - started > for_at_most:
            return None
        try:
            sock.sendall(bytes([byte]))
        except (BrokenPipeError, ConnectionResetError):
            return time.monotonic() - started
        if closed_by_server(sock, wait=every):
            return time.monotonic() - started
    return None


@pytest.mark.parametrize(
    ("at_once", "trickled", "deadline"),
    [
        pytest.param(b"GET /api/echo/slow HTTP/1.1\r\n", b"Host: 127.0.0.1\r\n" + b"X: y\r\n" * 20, 1, id="headers"),
        pytest.param(b"PUT /api/echo/slow HTTP/1.1\r\nContent-Length: 100\r\n\r\n", b"x" * 100, 2, id="body"),
    ],
)
def test_a_request_trickling_in_is_cut_off_at_its_deadline(deadline_server, calls, at_once, trickled, deadline):
    with socket.create_connection(address(deadline_server), timeout=3) as sock:
        sock.sendall(at_once)
        closed_after = trickle(sock, trickled, every=0.25, for_at_most=deadline + 5)

    assert closed_after is not None, "a client sending a byte every 0.25 s kept its connection"
    assert deadline <= closed_after < deadline + 4  # the server looks at least once a second
    assert calls == []


def test_a_slow_client_keeps_its_connection_within_the_deadlines(deadline_server, calls):
    with socket.create_connection(address(deadline_server), timeout=3) as sock:
        raw = b"GET /api/echo/patient HTTP/1.1\r\nHost: x\r\n\r\n"
        sock.sendall(raw[:10])
        time.sleep(0.6)
        sock.sendall(raw[10:])
        assert [status for status, _ in read_responses(sock)] == [200]
        time.sleep(1.5)  # idle between requests: the deadlines start with a request's first byte
        sock.sendall(raw)
        assert [status for status, _ in read_responses(sock)] == [200]
    assert [c.item for c in calls] == ["patient", "patient"]


def test_one_address_holding_1050_connections_locks_nobody_else_out(calls, caplog):
    """1,050 connections from 127.0.0.2 (more than the server's 1,000) sending a byte each: the address keeps
    its Limits.per_address and a client on 127.0.0.1 is answered at once."""
    limits = Limits(header_seconds=60)  # only the cap may close the crowd's connections, however slow the machine
    running = LocalServer(recording_host(calls), ("127.0.0.1", 0), timers=False, timeout=60, limits=limits)
    running.start()
    crowd: list[socket.socket] = []
    caplog.set_level(logging.WARNING, logger="serve")
    try:
        for _ in range(1050):
            sock = socket.create_connection(address(running), timeout=3, source_address=("127.0.0.2", 0))
            crowd.append(sock)
            sock.sendall(b"G")
        started = time.monotonic()
        with socket.create_connection(address(running), timeout=3) as other:
            other.sendall(b"GET /api/echo/other HTTP/1.1\r\nHost: x\r\n\r\n")
            assert [status for status, _ in read_responses(other, quiet=0)] == [200]
        assert time.monotonic() - started < 2
        held = len(crowd) - sum(closed_by_server(sock, wait=0) for sock in crowd)
        assert held == limits.per_address
    finally:
        for sock in crowd:
            sock.close()
        running.stop()
    assert [c.item for c in calls] == ["other"]
    refusals = [m for m in caplog.messages if m.startswith("refusing")]
    assert refusals == ["refusing connections from 127.0.0.2: it holds 200 already (the cap per address)"]


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


ONE_SECOND = Schedule.parse("* * * * * *")


def ticking_host() -> LocalHost:
    app = func.FunctionApp()

    @app.function_name("tick")
    @app.timer_trigger(schedule="* * * * * *", arg_name="timer")
    @app.queue_output(arg_name="outbox", queue_name="outbox", connection="AzureWebJobsStorage")
    def tick(timer: func.TimerRequest, outbox: func.Out[str]) -> None:
        outbox.set('{"tick":1}')

    return LocalHost.for_app_object(app)


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
    assert 'queue message to outbox: {"tick":1}' in caplog.messages
    assert "timer tick ran, 1 queue messages sent" in caplog.messages


class StoppedFiring(Schedule):
    """A schedule whose next firing cannot be found any more: how `./dev serve`'s timers died on a schedule that
    never fires ("ValueError: schedule never fires") while it went on answering requests."""

    def next_after(self, moment: datetime) -> datetime:
        raise ValueError("schedule never fires")


def test_a_timer_that_cannot_be_scheduled_is_logged_and_stops_the_server(caplog):
    host = ticking_host()
    host.timers["tick"] = replace(host.timers["tick"], schedule=StoppedFiring(*astuple(ONE_SECOND)))
    running = LocalServer(host, ("127.0.0.1", 0))
    where = running.http.getsockname()
    with caplog.at_level(logging.INFO, logger="serve"):
        running.start()
        try:
            deadline = time.monotonic() + 5
            while running.failure is None and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)  # the HTTP loop closes its sockets
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(where, timeout=2).close()
        finally:
            running.stop()
    assert running.failure == "timer tick cannot be scheduled: schedule never fires"
    assert (
        "timer tick cannot be scheduled: schedule never fires; stopping the server, as the Functions host would not "
        "run it either"
    ) in caplog.messages


def test_every_message_a_function_sends_is_logged_as_sent(caplog):
    """Not only the timers' output bindings: a queue-triggered function's, and what a function sends itself
    (the checks send their notifications with the queue SDK)."""
    app = func.FunctionApp()

    @app.function_name("relay")
    @app.queue_trigger(arg_name="message", queue_name="inbox", connection="AzureWebJobsStorage")
    @app.queue_output(arg_name="outbox", queue_name="outbox", connection="AzureWebJobsStorage")
    def relay(message: func.QueueMessage, outbox: func.Out[str]) -> None:
        get_sender(get_settings())(json.dumps({"notified": message.get_body().decode()}))
        outbox.set('{"relayed":1}')

    host = LocalHost.for_app_object(app)
    running = LocalServer(host, ("127.0.0.1", 0), timers=False, queue_workers=1)
    with caplog.at_level(logging.INFO, logger="serve"):
        running.start()
        try:
            host.service.send("inbox", "bottle-1")
            deadline = time.monotonic() + 4
            while not host.queues.get("outbox") and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            running.stop()
    notifications = get_settings().notifications_queue
    assert f'queue message to {notifications}: {{"notified": "bottle-1"}}' in caplog.messages
    assert 'queue message to outbox: {"relayed":1}' in caplog.messages


def test_the_server_stops_promptly_with_a_client_connected(echo_server):
    with socket.create_connection(address(echo_server), timeout=3):
        stopper = threading.Thread(target=echo_server.stop)
        started = time.monotonic()
        stopper.start()
        stopper.join(5)
        assert not stopper.is_alive()
        assert time.monotonic() - started < 3
