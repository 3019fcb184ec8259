"""The provisioning body of PUT /api/bottles/{bottle_id}: what a bottle is (owner, medication, schedule)."""

from datetime import timedelta
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictInt, StrictStr, ValidationError
from pydantic_core import ErrorDetails

from shared.api.ids import ID_RULE, Identifier
from shared.doses.schedules import Schedule
from shared.errors import BadRequest, first_per_field, plain_message


def _stripped(value: Any) -> Any:
    """A string without its leading and trailing white space as str.strip sees it (pydantic's strip_whitespace
    would keep U+001C-U+001F); anything else as it is, for the model to refuse."""
    return value.strip() if isinstance(value, str) else value


class BottleSpec(BaseModel):
    """The provisioning body of PUT /api/bottles/{bottle_id}."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    user_id: Identifier
    medication: Annotated[StrictStr, Field(min_length=1, max_length=200), BeforeValidator(_stripped)]
    schedule: Schedule
    grace_minutes: Annotated[StrictInt, Field(ge=1, le=720)] = 60

    @property
    def grace(self) -> timedelta:
        return timedelta(minutes=self.grace_minutes)


def parse_bottle_spec(payload: Any) -> BottleSpec:
    try:
        return BottleSpec.model_validate(payload)
    except ValidationError as error:
        details = [{"field": _field_path(e["loc"]) or None, "message": _spec_message(e)} for e in error.errors()]
        raise BadRequest("invalid bottle: nothing was stored", first_per_field(details)) from None


def _field_path(loc: tuple[int | str, ...]) -> str:
    if loc[:1] == ("schedule",) and len(loc) > 1:
        loc = loc[:1] + loc[2:]  # drop the discriminator's tag ("times" or "every_hours")
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else part)
    return path


def _spec_message(error: ErrorDetails) -> str:
    if error["type"] == "string_pattern_mismatch" and error["loc"][0] == "user_id":
        return ID_RULE
    if error["type"] == "string_pattern_mismatch":
        return "must be a 24-hour local time HH:MM"
    return plain_message(error)
