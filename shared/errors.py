"""Domain errors; the HTTP layer maps each to its status code. Every message says what was wrong and where."""

from typing import Any

from pydantic_core import ErrorDetails

Detail = dict[str, Any]


class DomainError(Exception):
    status = 400

    def __init__(self, message: str, details: list[Detail] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or []


class BadRequest(DomainError):
    status = 400


class Unauthorized(DomainError):
    status = 401


class NotFound(DomainError):
    status = 404


class PayloadTooLarge(DomainError):
    status = 413


class UnsupportedMediaType(DomainError):
    status = 415


_PLAIN_MESSAGES = {"extra_forbidden": "unknown field", "missing": "required"}


def plain_message(error: ErrorDetails) -> str:
    """A pydantic error as a client should read it."""
    return _PLAIN_MESSAGES.get(error["type"], error["msg"].removeprefix("Value error, "))


def first_per_field(problems: list[Detail]) -> list[Detail]:
    """One problem per field (a union type reports each alternative; the first says enough)."""
    seen: set[tuple[Any, Any]] = set()
    kept = []
    for problem in problems:
        key = (problem.get("index"), problem["field"])
        if key not in seen:
            seen.add(key)
            kept.append(problem)
    return kept
