"""What the local server refuses and bounds beyond waitress' own rules: ambiguous framing is a 400 and the
connection closes, a request must arrive within deadlines however it trickles in, and one client address may
hold only so many connections. A development server on loopback, not a hardened one: these keep one slow or
confused client from taking the server from everyone else, nothing more."""

import json
import logging
import time
from dataclasses import dataclass
from socket import socket
from typing import Any

from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser, ParsingError
from waitress.server import BaseWSGIServer
from waitress.task import ErrorTask

log = logging.getLogger("serve")
REFUSAL_LOG_SECONDS = 10.0  # a refused crowd is logged once per this many seconds, not once per connection


@dataclass(frozen=True)
class Limits:
    """`header_seconds`: from a request's first byte to the end of its headers; `request_seconds`: to the end
    of its body; a connection past either is closed (sending a byte now and then does not extend them, unlike
    waitress' idle timeout). `per_address`: connections one client address may hold at once (more are closed
    as they are accepted)."""

    header_seconds: float = 10.0
    request_seconds: float = 60.0
    per_address: int = 200


class StrictParser(HTTPRequestParser):
    """Waitress' parser, refusing what it lets through: a folded header line (RFC 9112 5.2 allows a server
    to refuse obs-fold, and a proxy in front may unfold it otherwise), `Transfer-Encoding` beside
    `Content-Length` (RFC 9112 6.1: the sender's framing is ambiguous, and the connection must not be reused),
    and `Transfer-Encoding` in an HTTP/1.0 request (6.1: faulty framing). A ParsingError is waitress' 400,
    after which it closes the connection."""

    def parse_header(self, header_plus: bytes) -> None:
        lines = header_plus.split(b"\r\n")[1:]
        if any(line.startswith((b" ", b"\t")) for line in lines):
            raise ParsingError("a folded header line (obs-fold) is not accepted")
        names = {line.partition(b":")[0].strip().lower() for line in lines}
        if b"transfer-encoding" in names and b"content-length" in names:
            raise ParsingError("Content-Length and Transfer-Encoding together are not accepted")
        super().parse_header(header_plus)
        if self.version == "1.0" and "TRANSFER_ENCODING" in self.headers:
            raise ParsingError("Transfer-Encoding in an HTTP/1.0 request is not accepted")


class JsonErrorTask(ErrorTask):
    """Waitress' own answers to a request it cannot take (framing, sizes), in the app's error shape
    (functions/responses.py) instead of plain text; the connection closes after it, as waitress does."""

    def execute(self) -> None:
        parser: Any = self.request  # the stubs call it an Error; it is the parser that holds one
        error = parser.error
        body = json.dumps({"error": f"{error.reason}: {error.body}", "details": []}, separators=(",", ":")).encode()
        self.status = f"{error.code} {error.reason}"
        headers: Any = self.response_headers
        headers.append(("Content-Type", "application/json"))
        self.set_close_on_finish()
        self.content_length = len(body)
        self.write(body)


def bounded_channel(limits: Limits) -> type[HTTPChannel]:
    """Waitress' connection class, with the strict parser, JSON error answers, the request deadlines and the
    per-address cap."""
    last_logged = [float("-inf")]

    def refuse(sock: socket, addr: Any) -> None:
        sock.close()  # never registered with the event loop: waitress drops the object
        now = time.monotonic()
        if now - last_logged[0] >= REFUSAL_LOG_SECONDS:
            last_logged[0] = now
            log.warning(
                "refusing connections from %s: it holds %d already (the cap per address)", addr, limits.per_address
            )

    class BoundedChannel(HTTPChannel):
        parser_class = StrictParser
        error_task_class = JsonErrorTask
        request_started: float | None = None  # when the request being read sent its first byte

        def __init__(self, server: BaseWSGIServer, sock: socket, addr: Any, adj: Adjustments, map: Any = None) -> None:
            if _connections_from(server, addr) >= limits.per_address:
                refuse(sock, addr[0] if isinstance(addr, tuple) else addr)
                return
            super().__init__(server, sock, addr, adj, map)

        def received(self, data: bytes) -> bool:
            before = self.request
            if before is None:
                self.request_started = time.monotonic()
            handled = super().received(data)
            if self.request is None:
                self.request_started = None
            elif self.request is not before and before is not None:  # one request ended, the next began
                self.request_started = time.monotonic()
            return handled

        def readable(self) -> bool:
            """Asked on each turn of the event loop (at least once a second): the place to end a request
            that is taking too long to arrive."""
            if self._overdue():
                self.will_close = True  # writable() now, and handle_write() closes the connection
                return False
            return super().readable()

        def _overdue(self) -> bool:
            request, started = self.request, self.request_started
            if request is None or started is None or self.requests:
                return False
            limit = limits.request_seconds if request.headers_finished else limits.header_seconds
            return time.monotonic() - started > limit

    return BoundedChannel


def _connections_from(server: BaseWSGIServer, addr: Any) -> int:
    channels: dict[int, HTTPChannel] = server.active_channels  # type: ignore[assignment]  # the stubs' type is wrong
    host = addr[0] if isinstance(addr, tuple) else addr
    return sum(1 for channel in channels.values() if isinstance(channel.addr, tuple) and channel.addr[0] == host)
