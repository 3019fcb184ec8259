"""Request bodies: size limit and strict JSON decoding, with errors a client can act on."""

import json
from typing import Any

from shared.errors import BadRequest, PayloadTooLarge

MAX_BODY_BYTES = 256 * 1024


def check_size(body: bytes, limit: int = MAX_BODY_BYTES) -> bytes:
    if len(body) > limit:
        raise PayloadTooLarge(
            f"body is {len(body)} bytes; the limit is {limit} bytes",
            [{"field": None, "message": f"at most {limit // 1024} KiB"}],
        )
    return body


def decode_json(body: bytes) -> Any:
    """Decode a UTF-8 JSON body; BadRequest (never a crash) for anything else, saying where it broke."""
    if not body.strip():
        raise BadRequest("body is empty; send a JSON object", [{"field": None, "message": "empty body"}])
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BadRequest(
            "body is not UTF-8 JSON", [{"field": None, "message": f"invalid UTF-8 at byte {error.start}"}]
        ) from None
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as error:
        raise BadRequest(
            "body is not valid JSON",
            [{"field": None, "message": f"{error.msg} at line {error.lineno} column {error.colno}"}],
        ) from None
    except ValueError as error:
        raise BadRequest("body is not valid JSON", [{"field": None, "message": str(error)}]) from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")
