"""Identifiers the API accepts (bottle and user ids): one rule, checked where a request names one."""

from typing import Annotated

from pydantic import Field, StrictStr, TypeAdapter, ValidationError

from shared.errors import BadRequest

ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
ID_RULE = "must be 1-64 characters of A-Z, a-z, 0-9, '_', '-'"
Identifier = Annotated[StrictStr, Field(pattern=ID_PATTERN)]
_ID = TypeAdapter(Identifier)


def check_id(value: str, field: str) -> str:
    """Ids are 1-64 characters of [A-Za-z0-9_-]; BadRequest naming the field otherwise."""
    try:
        return str(_ID.validate_python(value))
    except ValidationError:
        raise BadRequest(f"invalid {field}", [{"field": field, "message": ID_RULE}]) from None
