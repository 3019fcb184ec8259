"""Domain errors; the HTTP layer maps each to its status code. Every message says what was wrong and where."""

from typing import Any

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
