"""The MongoDB wire protocol as far as the proxy needs it: framing, OP_MSG (commands and their replies), and the
legacy OP_QUERY / OP_REPLY pair that pymongo still uses for its first handshake (`hello`/`isMaster`).

Every message is a 16-byte header (length, requestID, responseTo, opCode) and a body. An OP_MSG body is flag
bits, then sections: kind 0 is the command document; kind 1 is a document sequence (`documents` of an insert,
`updates` of an update, ...) that belongs to the command under its identifier. `bson` is the package pymongo
ships."""

import itertools
import socket
import struct
from dataclasses import dataclass, field
from typing import Any

import bson

OP_REPLY = 1
OP_QUERY = 2004
OP_COMPRESSED = 2012
OP_MSG = 2013

CHECKSUM_PRESENT = 1 << 0
MORE_TO_COME = 1 << 1
EXHAUST_ALLOWED = 1 << 16

_HEADER = struct.Struct("<iiii")
_MAX_MESSAGE = 64 * 1024 * 1024  # past MongoDB's own 48 MB maximum: a broken or hostile peer
_request_ids = itertools.count(1_000_000)


@dataclass
class Message:
    request_id: int
    response_to: int
    op_code: int
    body: bytes

    def encode(self) -> bytes:
        return _HEADER.pack(16 + len(self.body), self.request_id, self.response_to, self.op_code) + self.body


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_message(sock: socket.socket) -> Message | None:
    """The next whole message from `sock`; None when the peer closed the connection."""
    header = _read_exactly(sock, 16)
    if header is None:
        return None
    length, request_id, response_to, op_code = _HEADER.unpack(header)
    if not 16 <= length <= _MAX_MESSAGE:
        raise ValueError(f"a wire message of {length} bytes (opCode {op_code}) is not one the proxy accepts")
    body = _read_exactly(sock, length - 16)
    if body is None:
        return None
    return Message(request_id, response_to, op_code, body)


@dataclass
class OpMsg:
    """An OP_MSG decoded: its flags, its command document (document sequences merged in), and which fields
    came as sequences (so a re-encoded message keeps them as such)."""

    flags: int
    command: dict[str, Any]
    sequences: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return next(iter(self.command), "")

    def merged(self) -> dict[str, Any]:
        return {**self.command, **self.sequences}


def decode_op_msg(body: bytes) -> OpMsg:
    (flags,) = struct.unpack_from("<I", body, 0)
    end = len(body) - (4 if flags & CHECKSUM_PRESENT else 0)
    position, command, sequences = 4, None, {}
    while position < end:
        kind = body[position]
        position += 1
        if kind == 0:
            (size,) = struct.unpack_from("<i", body, position)
            command = bson.decode(body[position : position + size])
            position += size
        elif kind == 1:
            (size,) = struct.unpack_from("<i", body, position)
            section_end = position + size
            name_end = body.index(b"\x00", position + 4)
            identifier = body[position + 4 : name_end].decode()
            sequences[identifier] = bson.decode_all(body[name_end + 1 : section_end])
            position = section_end
        else:
            raise ValueError(f"an OP_MSG section of kind {kind}: the proxy knows kinds 0 and 1")
    if command is None:
        raise ValueError("an OP_MSG without a command document (section kind 0)")
    return OpMsg(flags, command, sequences)


def encode_op_msg(command: dict[str, Any], *, flags: int = 0, sequences: dict[str, list[Any]] | None = None) -> bytes:
    """An OP_MSG body (no checksum)."""
    parts = [struct.pack("<I", flags & ~CHECKSUM_PRESENT), b"\x00", bson.encode(command)]
    for identifier, documents in (sequences or {}).items():
        payload = identifier.encode() + b"\x00" + b"".join(bson.encode(d) for d in documents)
        parts += [b"\x01", struct.pack("<i", 4 + len(payload)), payload]
    return b"".join(parts)


def reply_to(request: Message, document: dict[str, Any]) -> Message:
    """A reply to `request` carrying `document`, in the request's own protocol (OP_MSG, or OP_REPLY to an
    OP_QUERY)."""
    if request.op_code == OP_QUERY:
        body = struct.pack("<iqii", 0, 0, 0, 1) + bson.encode(document)
        return Message(next(_request_ids), request.request_id, OP_REPLY, body)
    return Message(next(_request_ids), request.request_id, OP_MSG, encode_op_msg(document))


@dataclass
class OpQuery:
    flags: int
    collection: str  # the full name: "admin.$cmd" for a command
    query: dict[str, Any]


def decode_op_query(body: bytes) -> OpQuery:
    (flags,) = struct.unpack_from("<i", body, 0)
    name_end = body.index(b"\x00", 4)
    collection = body[4:name_end].decode()
    position = name_end + 1 + 8  # numberToSkip, numberToReturn
    (size,) = struct.unpack_from("<i", body, position)
    return OpQuery(flags, collection, bson.decode(body[position : position + size]))


def decode_op_reply(body: bytes) -> list[dict[str, Any]]:
    return bson.decode_all(body[20:])


def encode_op_reply(documents: list[dict[str, Any]], *, flags: int = 0) -> bytes:
    return struct.pack("<iqii", flags, 0, 0, len(documents)) + b"".join(bson.encode(d) for d in documents)


def error_document(code: int, message: str, code_name: str = "") -> dict[str, Any]:
    """A command's failure as a server answers it (pymongo raises OperationFailure with this code)."""
    document: dict[str, Any] = {"ok": 0.0, "errmsg": message, "code": code}
    if code_name:
        document["codeName"] = code_name
    return document
