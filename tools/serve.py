"""The app on http://127.0.0.1:7071/api/... with its timers running, on the default store (SecantusDB
in-process) or any MongoDB: the same routes as under `func start`, without Core Tools.

    ./dev serve [--port 7071] [--mongodb-uri URI] [--data-dir DIR] [--no-timers] [--queue-workers 2]
                [--archive-dir DIR]

Function keys are not enforced, as under `func start`. Queue messages the timers send are logged, and
delivered to the queue-triggered functions (host.json's extensions.queues rules) by --queue-workers threads.
The archive (docs/archive.md) is a local folder: ARCHIVE_DIR, else DIR/archive with --data-dir, else
.local/archive (read it back with ./dev archive).
"""

import argparse
import errno
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from http import HTTPStatus
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit
from wsgiref.util import is_hop_by_hop

from waitress import wasyncore
from waitress.server import BaseWSGIServer, create_server

from shared.store.command_line import CommandFailed, run_command
from tools.archive_history import DEFAULT_DIR as DEFAULT_ARCHIVE_DIR
from tools.archive_history import archive_setting
from tools.arguments import int_between
from tools.http_bounds import Limits, bounded_channel

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

    from tools.local_delivery import Delivery
    from tools.local_host import LocalHost

# The app and its host (the runtime, the store, pydantic: seconds of imports) are imported where they are used,
# once `./dev serve`'s arguments are parsed: `--help` and a usage error come at once.

log = logging.getLogger("serve")

# --- the Functions host's view of a request ----------------------------------------------------

_ESCAPE = re.compile(rb"%([0-9A-Fa-f]{2})")
_UNDECODED = re.compile("[\udc80-\udcff]")  # bytes that were not UTF-8, kept by surrogateescape


def _unescape(raw: str, *, path: bool) -> str:
    """Percent-decoding as ASP.NET Core does it (Kestrel's UrlDecoder for the path, Uri.UnescapeDataString
    for the query): escapes are decoded as UTF-8, and escapes whose bytes are not UTF-8 stay as they were
    (re-spelt in upper case). In a path, `%2F` stays encoded (so a route value can hold an encoded slash
    and never spans two segments) and `%00` is refused."""

    def byte(match: re.Match[bytes]) -> bytes:
        value = int(match.group(1), 16)
        if path and value == 0x2F:
            return match.group(0)
        if path and value == 0:
            raise ValueError("the path contains a null character")
        return bytes([value])

    decoded = _ESCAPE.sub(byte, raw.encode("latin-1")).decode("utf-8", "surrogateescape")
    return _UNDECODED.sub(lambda m: f"%{ord(m.group(0)) - 0xDC00:02X}", decoded)


def decode_path(raw: str) -> str:
    """The request path as the host routes on it (HttpRequest.Path): route parameters come out of it
    percent-decoded, e.g. `/api/bottles/bottle%2D1` gives `bottle_id` `bottle-1`."""
    return _unescape(raw, path=True)


def parse_query(raw: str) -> dict[str, str]:
    """The query parameters as the host hands them to a Python function (`req.params`).

    The host parses the query with ASP.NET Core (QueryHelpers): pairs split on `&`, name and value split
    on the first `=`, then in each a `+` is a space and percent-escapes are decoded: `a+b` and `a%20b`
    are both "a b", and a literal plus must be sent as `%2B` (`since=...T00:00:00%2B01:00` is "+01:00",
    `since=...T00:00:00+01:00` is " 01:00"). Names match case-insensitively (the first spelling is kept)
    and the values of a repeated name are joined with "," (StringValues.ToString(), which skips empty
    values); a parameter whose value is then empty is not passed to the worker at all."""
    values: dict[str, list[str]] = {}
    names: dict[str, str] = {}
    for pair in raw.split("&"):
        if not pair:
            continue
        name, _, value = pair.partition("=")
        name = _unescape(name.replace("+", " "), path=False)
        value = _unescape(value.replace("+", " "), path=False)
        key = names.setdefault(name.upper(), name)
        values.setdefault(key, []).extend([value] if value else [])
    return {name: ",".join(found) for name, found in values.items() if found}


def _headers(environ: "WSGIEnvironment") -> dict[str, str]:
    """Request headers by lower-case name, as the host passes them (waitress joins repeats with ", ")."""
    headers = {key[5:].replace("_", "-").lower(): value for key, value in environ.items() if key.startswith("HTTP_")}
    for key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(key):
            headers[key.replace("_", "-").lower()] = environ[key]
    return headers


def _status_line(code: int) -> str:
    try:
        return f"{code} {HTTPStatus(code).phrase}"
    except ValueError:
        return f"{code} Unknown"


def wsgi_app(host: "LocalHost") -> "WSGIApplication":
    """The HTTP functions as a WSGI application: one request in, one azure.functions.HttpRequest to the
    function of its route, its HttpResponse back out. Framing (Content-Length, chunked bodies,
    keep-alive) is the server's job: by here the body is whole and exactly the one request's."""
    from functions.responses import json_response
    from tools.local_host import no_route

    def app(environ: "WSGIEnvironment", start_response: "StartResponse") -> Iterable[bytes]:
        target = environ["REQUEST_URI"]  # waitress': the request target as sent, not yet decoded
        if not target.startswith("/"):  # absolute-form (http://host/path?query), as a proxy sends it
            parts = urlsplit(target)
            target = parts.path + (f"?{parts.query}" if parts.query else "")
        raw_path, _, raw_query = target.partition("?")
        length = int(environ.get("CONTENT_LENGTH") or 0)  # validated (digits only) by waitress
        body = environ["wsgi.input"].read(length) if length else b""
        try:
            path = decode_path(raw_path)
        except ValueError as error:
            response = json_response(400, {"error": f"bad request path: {error}", "details": []})
        else:
            if path.startswith("/api/"):
                request_host = environ.get("HTTP_HOST") or f"{environ['SERVER_NAME']}:{environ['SERVER_PORT']}"
                query = f"?{raw_query}" if raw_query else ""
                response = host.handle(
                    environ["REQUEST_METHOD"],
                    path,
                    headers=_headers(environ),
                    params=parse_query(raw_query),
                    body=body,
                    url=f"{environ['wsgi.url_scheme']}://{request_host}{path}{query}",
                )
            else:
                response = no_route(path)
        payload = response.get_body()
        headers = [
            (name, value)
            for name, value in response.headers.items()
            if name.lower() != "content-length" and not is_hop_by_hop(name)
        ]
        if response.mimetype and not any(name.lower() == "content-type" for name, _ in headers):
            headers.append(("Content-Type", response.mimetype))
        headers.append(("Content-Length", str(len(payload))))
        start_response(_status_line(response.status_code), headers)
        return [payload]

    return app


# --- the server --------------------------------------------------------------------------------


class LocalServer:
    """The HTTP server (waitress) and the timer loop; start() returns at once, stop() ends both.

    Waitress parses and frames every request (chunked bodies, a Content-Length that is not one plain
    number is a 400), reads requests on one event loop and hands only whole ones to its worker threads
    (so a slow or stalled client holds no thread), and closes a connection that has sent nothing for
    `timeout` seconds while no request of it is running. `limits` (tools/http_bounds.py) adds what it
    lets through: ambiguous framing refused, deadlines per request, a cap of connections per client address."""

    def __init__(
        self,
        host: "LocalHost",
        address: tuple[str, int],
        *,
        timers: bool = True,
        timeout: int = 10,  # whole seconds (waitress' channel_timeout)
        threads: int = 8,
        connections: int = 1000,
        queue_workers: int = 2,  # threads delivering queue messages (0: none)
        limits: Limits | None = None,  # default: Limits()
        sock: socket.socket | None = None,  # already listening on `address` (listen())
    ) -> None:
        self.host = host
        self._map: dict[int, Any] = {}  # waitress' sockets (its dispatchers) by file descriptor
        where: dict[str, Any] = {"sockets": [sock]} if sock else {"host": address[0], "port": address[1]}
        server = create_server(
            wsgi_app(host),
            map=self._map,
            **where,
            threads=threads,
            channel_timeout=timeout,
            cleanup_interval=1,  # how often idle connections are looked for
            connection_limit=connections,
            backlog=1024,
            max_request_body_size=100 * 1024 * 1024,  # the Functions host's limit
        )
        assert isinstance(server, BaseWSGIServer)  # one address: one listening socket
        server.channel_class = bounded_channel(limits or Limits())
        self.http = server
        self._stop = threading.Event()
        self._stopped = False  # stop() ran
        self.failure: str | None = None  # why the server stopped by itself (a timer that cannot run)
        self._closing = threading.Lock()  # the event loop closing its sockets, and stop() waking it, one at a time
        self._closed = False
        self._threads = [threading.Thread(target=self._serve, name="serve-http", daemon=True)]
        if timers and host.timers:
            self._threads.append(threading.Thread(target=self._run_timers, name="serve-timers", daemon=True))
        self.queue_workers = queue_workers
        self._queue_activity = threading.Event()  # a message was sent: poll at once
        host.service.add_listener(self._sent)
        if queue_workers > 0 and host.triggers:
            self._threads.append(threading.Thread(target=self._deliver_queues, name="serve-queues", daemon=True))

    @property
    def base_url(self) -> str:
        address, port = self.http.getsockname()
        return f"http://{address}:{port}"

    def start(self) -> "LocalServer":
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._halt()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout=10)
        if not self._threads[0].is_alive():
            wasyncore.close_all(self._map)  # if it never ran (closed sockets are off the map: no-op)
        self.http.task_dispatcher.shutdown(timeout=5)

    def _halt(self) -> None:
        """Tell every loop to end, at once: the HTTP loop closes its sockets, so nothing is served any more."""
        with self._closing:  # never signal a loop that already closed its sockets (its trigger among them)
            if self._stop.is_set():
                return
            self._stop.set()
            if not self._closed:
                self.http.pull_trigger()  # wakes the event loop, which closes every socket and returns
        self._queue_activity.set()

    def _serve(self) -> None:
        """Waitress' event loop, one wait at a time until stop(); the sockets are closed on this thread."""
        try:
            while not self._stop.is_set():
                # poll(), not select(), which fails past file descriptor 1023
                wasyncore.loop(timeout=1, use_poll=True, map=self._map, count=1)
        finally:
            with self._closing:
                self._closed = True
                wasyncore.close_all(self._map)

    def _run_timers(self) -> None:
        """Each timer at its due times. A timer that fails is logged and the run goes on, as the host does; a
        timer that cannot be scheduled any more stops the whole server, logged and in `failure`: the host would
        not run it either, and a server answering requests while its checks and reports have stopped hides it."""
        last = datetime.now(UTC)
        while not self._stop.is_set():
            try:
                firings = self.host.due_timers(last, datetime.now(UTC))
            except Exception as error:
                unschedulable = ", ".join(name for name in self.host.timers if not self._schedulable(name, last))
                self.failure = f"timer {unschedulable or '(unknown)'} cannot be scheduled: {error}"
                log.exception("%s; stopping the server, as the Functions host would not run it either", self.failure)
                self._halt()
                return
            for _, name in firings:
                try:
                    sent = self.host.run_timer(name)
                except Exception:
                    log.exception("timer %s failed", name)
                    continue
                log.info("timer %s ran, %d queue messages sent", name, len(sent))
            if firings:
                last = firings[-1][0]
            self._stop.wait(0.5)

    def _schedulable(self, name: str, since: datetime) -> bool:
        try:
            self.host.timers[name].schedule.next_after(since)
        except Exception:
            return False
        return True

    def _sent(self, queue: str, body: str) -> None:
        """Every message any function sends (an output binding's, a notification the checks send), as sent."""
        log.info("queue message to %s: %s", queue, body)
        self._queue_activity.set()

    def _deliver_queues(self) -> None:
        """The queue listeners: deliver what is visible, then poll again at once after a send, else after
        a wait that doubles while the queues stay empty, up to host.json's maxPollingInterval."""
        longest = self.host.options.max_polling_interval
        shortest = min(timedelta(milliseconds=100), longest)
        wait = shortest
        queues = ", ".join(sorted({f"{t.queue} -> {t.name}" for t in self.host.triggers.values()}))
        log.info("delivering queue messages (%s) with %d workers", queues, self.queue_workers)
        while not self._stop.is_set():
            self._queue_activity.clear()
            try:
                report = self.host.deliver(workers=self.queue_workers, on_delivery=_log_delivery)
            except Exception:
                log.exception("queue delivery failed")
                report = None
            wait = shortest if report and report.deliveries else min(wait * 2, longest)
            self._queue_activity.wait(wait.total_seconds())


def _log_delivery(delivery: "Delivery") -> None:
    head = f"queue {delivery.queue}: message {delivery.message_id} to {delivery.function}"
    head += f" (dequeue count {delivery.dequeue_count})"
    if delivery.outcome == "delivered":
        log.info("%s delivered", head)
    elif delivery.outcome == "retry":
        log.warning("%s failed (%s), visible again at %s", head, delivery.error, delivery.next_visible_time)
    else:
        log.error("%s moved to %s after %s", head, delivery.poison_queue, delivery.error or "too many dequeues")


def main(argv: list[str] | None = None) -> None:
    run_command("./dev serve", lambda: _serve_until_interrupted(argv))


def _serve_until_interrupted(argv: list[str] | None) -> None:
    parser = argparse.ArgumentParser(
        prog="./dev serve", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s)")
    parser.add_argument(
        "--port", type=int_between(0, 65535), default=7071, help="port to listen on, 0 for any free one (default 7071)"
    )
    parser.add_argument("--mongodb-uri", help="any MongoDB (default: SecantusDB in-process)")
    parser.add_argument("--data-dir", help="persist the in-process store here (default: in memory)")
    parser.add_argument("--no-timers", action="store_true", help="do not run the timer functions")
    parser.add_argument(
        "--queue-workers", type=int_between(0, 64), default=2, help="threads delivering queue messages (0: none)"
    )
    parser.add_argument(
        "--archive-dir",
        help=f"the archive's folder (default: ARCHIVE_DIR, else DATA_DIR/archive, else {DEFAULT_ARCHIVE_DIR})",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Listen first: a port in use is known before the store starts, and the socket is ours meanwhile.
    listening = listen(args.host, args.port)

    from tools.local_host import LocalHost
    from tools.local_store import local_store

    with (
        listening,
        archive_setting(args.archive_dir, args.data_dir),
        local_store(args.mongodb_uri, data_dir=args.data_dir),  # closed if the store does not start
    ):
        server = LocalServer(
            LocalHost.load(),
            (args.host, args.port),
            timers=not args.no_timers,
            queue_workers=args.queue_workers,
            sock=listening,
        )
        server.start()
        timers = "off" if args.no_timers else ", ".join(server.host.timers) or "none"
        log.info("serving %s/api/ (timers: %s); Ctrl-C stops", server.base_url, timers)
        log.info("archive: folder %s (./dev archive BOTTLE_ID FROM [TO] reads it)", os.environ["ARCHIVE_DIR"])
        try:
            while server.failure is None:
                # Ctrl-C is often delivered to another thread, which cannot interrupt an endless wait of this
                # one: waking each second lets Python raise KeyboardInterrupt here.
                time.sleep(1)
        finally:
            server.stop()
        raise CommandFailed(server.failure)


def listen(host: str, port: int) -> socket.socket:
    """The listening socket (as waitress makes it: SO_REUSEADDR, so a port in TIME_WAIT is free), or a
    CommandFailed naming the address and why it cannot be had."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.create_server((host, port), family=family)
    except socket.gaierror as error:
        raise CommandFailed(f"--host {host}: {error.strerror}") from None
    except OSError as error:
        hint = f" (--port {port}: pick another, or 0 for any free one)" if error.errno == errno.EADDRINUSE else ""
        why = os.strerror(error.errno) if error.errno else str(error)
        raise CommandFailed(f"cannot listen on {host}:{port}: {why}{hint}") from None
    return sock


if __name__ == "__main__":
    main()
