"""One app connection's traffic through the proxy: each client connection has its own connection to the backend,
and a request either goes on as it is (its replies relayed back, rewritten if asked), or is answered by the
proxy after it ran a command of its own on the backend. `hello` is rewritten so that the app keeps talking to
the proxy. Wire framing is wire.py's; what to do with a command is router.py's."""

import contextlib
import itertools
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tools.cosmos_store import wire
from tools.cosmos_store.metering import RequestStatistics

Document = dict[str, Any]
_request_ids = itertools.count(1)


@dataclass(eq=False)
class Connection:
    """A client's socket, its own socket to the backend, and its last request's statistics."""

    client: socket.socket
    backend: socket.socket
    last: RequestStatistics | None = None


def exchange(connection: Connection, raw: bytes, expect_reply: bool = True) -> wire.Message | None:
    """Send `raw` to the backend; its reply (None when none is expected)."""
    connection.backend.sendall(raw)
    if not expect_reply:
        return None
    reply = wire.read_message(connection.backend)
    if reply is None:
        raise OSError("the backend closed the connection")
    return reply


def forward(
    connection: Connection, request: wire.Message, rewrite: Callable[[Document], Document] | None = None
) -> None:
    """Send the request on as it is, and its reply (every reply, for an exhaust cursor) back, rewritten."""
    more_to_come = request.op_code == wire.OP_MSG and (request.body[0] & wire.MORE_TO_COME)
    reply = exchange(connection, request.encode(), expect_reply=not more_to_come)
    while reply is not None:
        flags = 0
        if rewrite is not None:
            reply = rewritten(reply, rewrite)
        if reply.op_code == wire.OP_MSG:
            flags = int.from_bytes(reply.body[:4], "little")
        connection.client.sendall(reply.encode())
        if not flags & wire.MORE_TO_COME:
            return
        reply = wire.read_message(connection.backend)


def run_on_backend(connection: Connection, command: Document) -> Document:
    """Run a (rewritten) command on the backend over this connection; its reply document."""
    raw = wire.Message(next(_request_ids), 0, wire.OP_MSG, wire.encode_op_msg(command)).encode()
    reply = exchange(connection, raw)
    assert reply is not None
    return wire.decode_op_msg(reply.body).command


def backend_reply(connection: Connection, request: wire.Message) -> Document:
    """Send the request on as it is; the backend's reply document, for the proxy to answer from."""
    reply = exchange(connection, request.encode())
    assert reply is not None
    return wire.decode_op_msg(reply.body).command


def answer(connection: Connection, request: wire.Message, document: Document) -> None:
    """Reply to the client's `request` with `document`."""
    connection.client.sendall(wire.reply_to(request, document).encode())


def rewritten(reply: wire.Message, rewrite: Callable[[Document], Document]) -> wire.Message:
    """The reply with its document(s) rewritten, in its own protocol (OP_REPLY or OP_MSG; others as they are)."""
    if reply.op_code == wire.OP_REPLY:
        documents = [rewrite(d) for d in wire.decode_op_reply(reply.body)]
        return wire.Message(reply.request_id, reply.response_to, reply.op_code, wire.encode_op_reply(documents))
    if reply.op_code == wire.OP_MSG:
        message = wire.decode_op_msg(reply.body)
        body = wire.encode_op_msg(rewrite(message.command), flags=message.flags)
        return wire.Message(reply.request_id, reply.response_to, reply.op_code, body)
    return reply


def proxied_hello(reply: Document, address: tuple[str, int], max_wire_version: int | None) -> Document:
    """The backend's hello, with the proxy's address where the backend names its own (else pymongo
    would find the backend and connect to it directly), and no compression."""
    named = f"{address[0]}:{address[1]}"
    for name in ("me", "primary"):
        if name in reply:
            reply[name] = named
    if "hosts" in reply:
        reply["hosts"] = [named]
    reply.pop("compression", None)
    if max_wire_version is not None and "maxWireVersion" in reply:
        reply["maxWireVersion"] = max_wire_version
        reply["minWireVersion"] = min(int(reply.get("minWireVersion", 0)), max_wire_version)
    return reply


def close(sock: socket.socket) -> None:
    """Shut `sock` down and close it, whatever state it is in."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
