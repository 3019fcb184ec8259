"""Device event validation: a request body in, validated events (or every problem with it) out."""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr, ValidationError
from pydantic_core import ErrorDetails

from shared.devices.device_time import MAX_FUTURE_SKEW
from shared.errors import BadRequest, Detail, PayloadTooLarge, first_per_field, plain_message
from shared.instants import format_instant, parse_instant

MAX_EVENTS_PER_REQUEST = 500

EventType = Literal["heartbeat", "opened", "closed"]
# Bounds a real bottle never reaches, so every stored number fits BSON (a 64-bit integer, a finite double).
MAX_PILLS = 10_000
MAX_GRAMS = 100_000
PillCount = Annotated[StrictInt, Field(ge=0, le=MAX_PILLS)]
Grams = Annotated[StrictFloat | StrictInt, Field(ge=0, le=MAX_GRAMS, allow_inf_nan=False)]

# Which optional fields each event type requires; any other optional field is not allowed on it.
REQUIRED_BY_TYPE: dict[str, frozenset[str]] = {
    "heartbeat": frozenset(),
    "opened": frozenset({"mass_of_contents", "number_of_pills"}),
    "closed": frozenset({"mass_of_contents", "number_of_pills", "pills_taken"}),
}
TYPE_DEPENDENT_FIELDS = ("mass_of_contents", "number_of_pills", "pills_taken")


class _EventBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    type: EventType
    time: StrictStr
    event_id: Annotated[StrictStr, Field(min_length=1, max_length=64)] | None = None
    mass_of_contents: Grams | None = None
    number_of_pills: PillCount | None = None
    pills_taken: PillCount | None = None


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
    raw_events = _raw_events(payload)
    events: list[DeviceEvent] = []
    problems: list[Detail] = []
    for index, raw in enumerate(raw_events):
        event, event_problems = _parse_event(index, raw, now, max_age)
        problems.extend(event_problems)
        if event is not None:
            events.append(event)
    if not problems:
        problems = _reused_ids(events)
    if problems:
        noun = "event" if len(raw_events) == 1 else "events"
        raise BadRequest(f"invalid {noun}: nothing was stored", problems)
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


def _raw_events(payload: Any) -> list[Any]:
    if not isinstance(payload, dict):
        raise BadRequest(
            'body must be a JSON object: one event, or {"events": [...]}',
            [{"index": None, "field": None, "message": f"got a JSON {_json_type(payload)}"}],
        )
    if "events" not in payload:
        return [payload]
    extra = sorted(set(payload) - {"events"})
    problems: list[Detail] = [
        {"index": None, "field": name, "message": "unknown field beside 'events'"} for name in extra
    ]
    batch: Any = payload["events"]
    if not isinstance(batch, list):
        problems.append({"index": None, "field": "events", "message": f"must be an array, got {_json_type(batch)}"})
    elif not batch:
        problems.append({"index": None, "field": "events", "message": "must hold at least one event"})
    elif len(batch) > MAX_EVENTS_PER_REQUEST:
        raise PayloadTooLarge(
            f"too many events: {len(batch)} in one request, at most {MAX_EVENTS_PER_REQUEST}",
            [{"index": None, "field": "events", "message": f"at most {MAX_EVENTS_PER_REQUEST} events"}],
        )
    if problems:
        raise BadRequest("invalid request body: nothing was stored", problems)
    return list(batch)


def _parse_event(index: int, raw: Any, now: datetime, max_age: timedelta) -> tuple[DeviceEvent | None, list[Detail]]:
    if not isinstance(raw, dict):
        return None, [{"index": index, "field": None, "message": f"must be a JSON object, got {_json_type(raw)}"}]
    try:
        body = _EventBody.model_validate(raw)
    except ValidationError as error:
        problems = first_per_field([_detail(index, e) for e in error.errors()])
        return None, problems + _type_rules(index, raw, raw.get("type")) + _time_rules(index, raw, now, max_age)[1]
    problems = _type_rules(index, raw, body.type)
    time, time_problems = _time_rules(index, raw, now, max_age)
    problems += time_problems
    if problems or time is None:
        return None, problems
    return (
        DeviceEvent(
            type=body.type,
            time=time,
            event_id=body.event_id or derived_event_id(body.type, time),
            mass_of_contents=float(body.mass_of_contents) if body.mass_of_contents is not None else None,
            number_of_pills=body.number_of_pills,
            pills_taken=body.pills_taken,
        ),
        [],
    )


def _type_rules(index: int, raw: dict[str, Any], event_type: Any) -> list[Detail]:
    """Fields required or forbidden by the event's type (only when the type itself is valid)."""
    required = REQUIRED_BY_TYPE.get(event_type) if isinstance(event_type, str) else None
    if required is None:
        return []
    problems = []
    for name in TYPE_DEPENDENT_FIELDS:
        if name in required and raw.get(name) is None:
            problems.append({"index": index, "field": name, "message": f"required for {event_type} events"})
        elif name not in required and name in raw:
            problems.append({"index": index, "field": name, "message": f"not allowed on {event_type} events"})
    return problems


def _time_rules(
    index: int, raw: dict[str, Any], now: datetime, max_age: timedelta
) -> tuple[datetime | None, list[Detail]]:
    text = raw.get("time")
    if not isinstance(text, str):
        return None, []  # missing or wrong type: reported by the model
    try:
        time = parse_instant(text)
    except ValueError as error:
        return None, [{"index": index, "field": "time", "message": str(error)}]
    if time > now + MAX_FUTURE_SKEW:
        message = f"{text} is more than 5 minutes ahead of the server clock ({format_instant(now)})"
        return None, [{"index": index, "field": "time", "message": message}]
    if time < now - max_age:
        message = f"{text} is older than the {max_age.days} days accepted (MAX_EVENT_AGE_DAYS)"
        return None, [{"index": index, "field": "time", "message": message}]
    return time, []


def _detail(index: int | None, error: ErrorDetails) -> Detail:
    field = ".".join(str(part) for part in error["loc"] if not str(part).startswith(("int", "float")))
    return {"index": index, "field": field or None, "message": plain_message(error)}


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
