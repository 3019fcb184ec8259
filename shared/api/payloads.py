"""Request bodies: size limit, media type and strict JSON decoding, with errors a client can act on."""

import json
import re
from collections.abc import Mapping
from typing import Any

from shared.errors import BadRequest, PayloadTooLarge, UnsupportedMediaType

MAX_BODY_BYTES = 256 * 1024
# No request of the API nests deeper than 4; anything much deeper is an attack on the parser.
MAX_JSON_DEPTH = 16
# A JSON escape of a UTF-16 surrogate (\ud800-\udfff): a pair of them is one character, one alone is not text.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def check_size(body: bytes, limit: int = MAX_BODY_BYTES) -> bytes:
    if len(body) > limit:
        raise PayloadTooLarge(
            f"body is {len(body)} bytes; the limit is {limit} bytes",
            [{"field": None, "message": f"at most {limit // 1024} KiB"}],
        )
    return body


def check_media_type(content_type: str | None) -> None:
    """JSON or nothing said: a body declared as anything else (a form, text) is 415, never guessed at.

    A missing Content-Type is read as JSON, so the smallest device firmware need not send the header."""
    if content_type is None or not content_type.strip():
        return
    media_type, _, parameters = content_type.partition(";")
    media_type = media_type.strip().lower()
    charset = _parameter(parameters, "charset")
    if (media_type == "application/json" or media_type.endswith("+json")) and charset in (None, "utf-8", "utf8"):
        return
    raise UnsupportedMediaType(
        f"Content-Type {content_type.strip()!r} is not JSON; send 'application/json' (UTF-8)",
        [{"field": "Content-Type", "message": "must be application/json"}],
    )


def _parameter(parameters: str, name: str) -> str | None:
    for parameter in parameters.split(";"):
        key, _, value = parameter.partition("=")
        if key.strip().lower() == name:
            return value.strip().strip('"').lower()
    return None


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
        payload = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise _too_deep() from None
    except json.JSONDecodeError as error:
        raise BadRequest(
            "body is not valid JSON",
            [{"field": None, "message": f"{error.msg} at line {error.lineno} column {error.colno}"}],
        ) from None
    except ValueError as error:  # a constant (NaN, Infinity) or an integer of more than 4300 digits
        raise BadRequest("body is not valid JSON", [{"field": None, "message": str(error)}]) from None
    if _depth(payload) > MAX_JSON_DEPTH:
        raise _too_deep()
    if _SURROGATE_ESCAPE.search(text):  # the only way one gets in: strict UTF-8 decoding refuses the raw bytes
        check_no_lone_surrogates(payload)
    return payload


def has_lone_surrogate(text: str) -> bool:
    """True if `text` holds a UTF-16 surrogate code point (JSON's "\\ud800" escape alone): no Unicode text
    does, it cannot be encoded (UTF-8, BSON, a regex engine), and Python's JSON decoder lets it through."""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def check_no_lone_surrogates(payload: Any) -> None:
    """BadRequest naming the field (as a path from the body's root: `schedule.timezone`, `events[0].time`)
    whose name or string value holds a lone surrogate; without recursion (depth is checked before)."""
    stack: list[tuple[str, Any]] = [("", payload)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str) and has_lone_surrogate(value):
            raise _surrogate(path or None, "a string")
        if isinstance(value, list):
            stack.extend((f"{path}[{i}]", item) for i, item in enumerate(value))
        elif isinstance(value, dict):
            for name, item in value.items():
                if has_lone_surrogate(name):
                    raise _surrogate(path or None, "a member name")
                stack.append((f"{path}.{name}" if path else name, item))


def check_request_text(route_params: Mapping[str, str], params: Mapping[str, str], headers: Mapping[str, str]) -> None:
    """BadRequest naming the route parameter, query parameter or header whose value holds a lone surrogate.
    The Functions host decodes what a client sends as UTF-8, so none comes from it; a caller that builds the
    request itself (the local tools, a test) could pass one, and it must not reach a hash or a parser."""
    for kind, values in (("route parameter", route_params), ("query parameter", params), ("header", headers)):
        for name, value in values.items():
            if has_lone_surrogate(value):
                named = None if has_lone_surrogate(name) else name
                raise _surrogate(named, f"the {kind}'s value", where=f"the {kind} {named or '(unnamed)'}")


def _surrogate(field: str | None, what: str, where: str = "body") -> BadRequest:
    message = f"{what} holds a lone UTF-16 surrogate (\\ud800-\\udfff), which is not Unicode text"
    return BadRequest(f"{where} holds text that is not Unicode", [{"field": field, "message": message}])


def _depth(value: Any) -> int:
    """How deeply arrays and objects nest in `value` (a scalar is 0), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            depth += 1
            deepest = max(deepest, depth)
            if depth > MAX_JSON_DEPTH:
                break
            stack.extend((child, depth) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _too_deep() -> BadRequest:
    return BadRequest(
        "body nests too deeply", [{"field": None, "message": f"arrays and objects nest at most {MAX_JSON_DEPTH} deep"}]
    )


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")
