"""Device event validation: a request body in, validated events (or every problem with it) out.

The body is parsed by one pydantic model (`_BODY`): one event, or {"events": [...]}; each event by the model of its
type (`_Heartbeat`, `_Opened`, `_Closed`), which names the fields the type requires and refuses every other, or by
`_Untyped` when its type is missing or unknown, so that its other fields are checked all the same. What the models
refuse is said in the API's words by `_refusal`."""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PlainValidator,
    StrictFloat,
    StrictInt,
    StrictStr,
    Tag,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
)
from pydantic_core import ErrorDetails, PydanticKnownError

from shared.devices.device_time import MAX_FUTURE_SKEW
from shared.errors import BadRequest, Detail, DomainError, PayloadTooLarge, first_per_field, plain_message
from shared.instants import format_instant, parse_instant

MAX_EVENTS_PER_REQUEST = 500

EventType = Literal["heartbeat", "opened", "closed"]
# Bounds a real bottle never reaches, so every stored number fits BSON (a 64-bit integer, a finite double).
MAX_PILLS = 10_000
MAX_GRAMS = 100_000
PillCount = Annotated[StrictInt, Field(ge=0, le=MAX_PILLS)]
Grams = Annotated[StrictFloat | StrictInt, Field(ge=0, le=MAX_GRAMS, allow_inf_nan=False)]


@dataclass(frozen=True)
class DeviceEvent:
    """One valid event. `time` is UTC at millisecond precision; `event_id` is always set."""

    type: EventType
    time: datetime
    event_id: str
    mass_of_contents: float | None = None
    number_of_pills: int | None = None
    pills_taken: int | None = None

    @property
    def is_dose(self) -> bool:
        return self.type == "closed" and (self.pills_taken or 0) > 0


def derived_event_id(event_type: str, time: datetime) -> str:
    """The id of an event sent without one: the same type at the same instant is the same event
    (the bottle is implied: stored ids are scoped to their bottle)."""
    return f"{event_type}@{format_instant(time)}"


def parse_events(payload: Any, now: datetime, max_age: timedelta) -> list[DeviceEvent]:
    """Validate a request body: one event object or {"events": [...]}. Raises BadRequest listing every
    problem, or PayloadTooLarge for more than MAX_EVENTS_PER_REQUEST events."""
    try:
        body = _BODY.validate_python(payload, context=_Received(now, max_age))
    except ValidationError as error:
        raise _refusal(payload, error.errors()) from None
    events = [event.event() for event in (body.events if isinstance(body, _Batch) else [body])]
    problems = _reused_ids(events)
    if problems:
        raise BadRequest(f"invalid {'event' if len(events) == 1 else 'events'}: nothing was stored", problems)
    return events


def _reused_ids(events: list[DeviceEvent]) -> list[Detail]:
    """An event_id names one event: sent twice in a request it must be the same event (a repeat is kept once)."""
    first: dict[str, int] = {}
    problems: list[Detail] = []
    for index, event in enumerate(events):
        seen = first.setdefault(event.event_id, index)
        if events[seen] != event:
            message = f"event {seen} has this event_id with different content; an event_id names one event"
            problems.append({"index": index, "field": "event_id", "message": message})
    return problems


# --- the models -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Received:
    """The validation context of a request's events: the server clock, and how old an event may be."""

    now: datetime
    max_age: timedelta


def _received_time(value: Any, info: ValidationInfo) -> datetime:
    """An event's `time`: a string in the contract's format (shared.instants.parse_instant), within what the server
    accepts at the request's `now` (the validation context, `_Received`)."""
    if not isinstance(value, str):
        raise PydanticKnownError("string_type")
    received = cast(_Received, info.context)
    time = parse_instant(value)
    if time > received.now + MAX_FUTURE_SKEW:
        raise ValueError(f"{value} is more than 5 minutes ahead of the server clock ({format_instant(received.now)})")
    if time < received.now - received.max_age:
        raise ValueError(f"{value} is older than the {received.max_age.days} days accepted (MAX_EVENT_AGE_DAYS)")
    return time


class _Event(BaseModel):
    """What every event holds; a type's model adds what the type requires, and refuses every other field."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    type: EventType
    time: Annotated[datetime, PlainValidator(_received_time)]
    event_id: Annotated[StrictStr, Field(min_length=1, max_length=64)] | None = None

    def event(self) -> DeviceEvent:
        return DeviceEvent(self.type, self.time, self.event_id or derived_event_id(self.type, self.time))


class _Heartbeat(_Event):
    type: Literal["heartbeat"]


class _WithContents(_Event):
    """An opened or closed event: what the bottle holds."""

    mass_of_contents: Grams
    number_of_pills: PillCount

    def event(self) -> DeviceEvent:
        event_id = self.event_id or derived_event_id(self.type, self.time)
        return DeviceEvent(self.type, self.time, event_id, float(self.mass_of_contents), self.number_of_pills)


class _Opened(_WithContents):
    type: Literal["opened"]


class _Closed(_WithContents):
    type: Literal["closed"]
    pills_taken: PillCount

    def event(self) -> DeviceEvent:
        event_id = self.event_id or derived_event_id(self.type, self.time)
        mass, pills = float(self.mass_of_contents), self.number_of_pills
        return DeviceEvent(self.type, self.time, event_id, mass, pills, self.pills_taken)


class _Untyped(_Event):
    """An event whose type is missing or unknown: never valid (its `type` says why); its other fields are checked
    as any type would take them, so that every problem is listed at once."""

    mass_of_contents: Grams | None = None
    number_of_pills: PillCount | None = None
    pills_taken: PillCount | None = None


_TYPED: dict[str, type[_Event]] = {"heartbeat": _Heartbeat, "opened": _Opened, "closed": _Closed}
# The fields some types require and the others refuse.
_TYPE_DEPENDENT = frozenset(_Untyped.model_fields) - frozenset(_Event.model_fields)


def _event_tag(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else None
    return kind if isinstance(kind, str) and kind in _TYPED else "untyped"


AnyEvent = Annotated[
    Annotated[_Heartbeat, Tag("heartbeat")]
    | Annotated[_Opened, Tag("opened")]
    | Annotated[_Closed, Tag("closed")]
    | Annotated[_Untyped, Tag("untyped")],
    Discriminator(_event_tag),
]


class _Batch(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    events: Annotated[list[AnyEvent], Field(min_length=1, max_length=MAX_EVENTS_PER_REQUEST)]


def _body_tag(value: Any) -> str | None:
    """A batch is an object with `events`; any other object is one event; anything else is no body (None)."""
    if not isinstance(value, dict):
        return None
    return "batch" if "events" in value else "event"


_BODY: TypeAdapter[_Batch | _Heartbeat | _Opened | _Closed | _Untyped] = TypeAdapter(
    Annotated[Annotated[_Batch, Tag("batch")] | Annotated[AnyEvent, Tag("event")], Discriminator(_body_tag)]
)


# --- what the models refused, in the API's words ------------------------------------------------------------------


def _refusal(payload: Any, errors: list[ErrorDetails]) -> DomainError:
    """The error of a body the models refused. A body that is not an object, or whose `events` is not 1 to
    MAX_EVENTS_PER_REQUEST events (more is PayloadTooLarge), or has a field beside it, is refused for that alone;
    otherwise every problem of every event is listed, one per field."""
    if any(not error["loc"] for error in errors):
        return BadRequest(
            'body must be a JSON object: one event, or {"events": [...]}',
            [{"index": None, "field": None, "message": f"got a JSON {_json_type(payload)}"}],
        )
    envelope = [error for error in errors if error["loc"][0] == "batch" and len(error["loc"]) == 2]
    if envelope:
        return _envelope_refusal(payload, envelope)
    problems = []
    for error in errors:
        loc = error["loc"]
        index, (tag, *path) = (loc[2], loc[3:]) if loc[0] == "batch" else (0, loc[1:])
        problems.append(_event_problem(index, str(tag), str(path[0]) if path else None, error))
    count = len(payload["events"]) if "events" in payload else 1
    return BadRequest(f"invalid {'event' if count == 1 else 'events'}: nothing was stored", first_per_field(problems))


def _envelope_refusal(payload: dict[str, Any], errors: list[ErrorDetails]) -> DomainError:
    """The error of a batch whose `events` is not 1 to MAX_EVENTS_PER_REQUEST events (more: PayloadTooLarge), or
    that has a field beside it; its events' own problems are listed only once the envelope is right."""
    problems: list[Detail] = []
    for error in errors:
        field = str(error["loc"][1])
        if error["type"] == "too_long":
            return PayloadTooLarge(
                f"too many events: {len(payload['events'])} in one request, at most {MAX_EVENTS_PER_REQUEST}",
                [{"index": None, "field": "events", "message": f"at most {MAX_EVENTS_PER_REQUEST} events"}],
            )
        if field != "events":
            message = "unknown field beside 'events'"
        elif error["type"] == "too_short":
            message = "must hold at least one event"
        else:
            message = f"must be an array, got {_json_type(error['input'])}"
        problems.append({"index": None, "field": field, "message": message})
    problems.sort(key=lambda problem: (problem["field"] == "events", problem["field"]))
    return BadRequest("invalid request body: nothing was stored", problems)


def _event_problem(index: Any, tag: str, field: str | None, error: ErrorDetails) -> Detail:
    """A problem of the event at `index`, which the model of its type (`tag`) refused at `field`."""
    if field is None:
        return {"index": index, "field": None, "message": f"must be a JSON object, got {_json_type(error['input'])}"}
    if field in _TYPE_DEPENDENT and tag in _TYPED:
        if error["type"] == "extra_forbidden":
            return {"index": index, "field": field, "message": f"not allowed on {tag} events"}
        if error["type"] == "missing" or error["input"] is None:
            return {"index": index, "field": field, "message": f"required for {tag} events"}
    return {"index": index, "field": field, "message": plain_message(error)}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"
