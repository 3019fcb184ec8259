"""The layout of a bottle's document (`bottles`, one per bottle) as typed shapes: its registry fields, its status
and its dose tracking (each field's meaning: docs/architecture.md, "What is stored"), and the filters and
updates of the guarded writes that provisioning, ingestion and the checks make to it. Typed so that a misspelled
field name in a guard is a mypy error; here, among the dose rules, because every job that writes it may import
them."""

from collections.abc import Mapping
from datetime import datetime
from typing import Any, TypedDict

# A query operator's expression (`{"$gte": t}`): what a filter may hold in place of a field's value.
Query = Mapping[str, Any]


class LeftOpenMarker(TypedDict, total=False):
    """The left-open check's state on a bottle: the episode going on (`open_since`, set by ingestion with
    `open_pending`), and the marker of the episode notified with the users it was notified to, which only the
    check writes, guarded by what it read (shared/notifications/checks/rules.py, docs/checks.md)."""

    open_since: datetime | None
    open_pending: bool  # the check has yet to look at the bottle's latest open/closed state
    open_episode: datetime
    open_episode_users: list[str]  # the users the marked episode was notified to


class LateMarker(TypedDict, total=False):
    """The late-dose check's marker on a bottle: the latest slot notified and not yet resolved, with the users the
    slots up to it were notified to, and whether the check has yet to look at the bottle's latest doses."""

    dose_pending: bool
    late_episode: datetime
    late_episode_users: list[str]


class BottleDocument(LeftOpenMarker, LateMarker, total=False):
    """A bottle's fields, as provisioning, ingestion and the checks write and read them (each write sets a few, a
    projection reads a few). Bottles stored before a field existed lack it."""

    _id: str
    bottle_id: str
    bucket: int
    # The registry.
    user_id: str
    medication: str
    schedule: dict[str, Any]  # a Schedule, dumped (shared/doses/schedules.py)
    grace_minutes: int
    provisioned_at: datetime
    updated_at: datetime
    key_hash: str
    key_version: int
    key_rotated_at: datetime
    # The status, as the latest action left it (ingestion); the left-open check's state is LeftOpenMarker's.
    last_action: str  # "opened" or "closed"
    last_action_time: datetime
    last_dose_time: datetime
    # The dose tracking (shared/doses/due_tracking.py).
    schedule_from: datetime
    dose_due: datetime
    dose_late_at: datetime
    doses: list[datetime]
    dose_seq: int
    dose_review_from: datetime


class BottleFilter(TypedDict, total=False):
    """The fields a guarded write of a bottle matches on: a value (None matches an absent field), or a query
    operator's expression."""

    _id: str
    bottle_id: str
    last_action: str | None
    last_action_time: datetime | Query | None
    last_dose_time: datetime | None
    schedule_from: datetime | None
    dose_due: datetime | None
    dose_late_at: datetime | None
    dose_seq: int | None
    open_since: datetime | Query | None
    open_pending: bool
    open_episode: datetime | Query | None
    open_episode_users: list[str] | None
    dose_pending: bool
    late_episode: datetime | Query
    late_episode_users: list[str] | None


class DosesPush(TypedDict):
    """A `$push` of new doses: `{"$each": [...], "$sort": 1, "$slice": -n}`."""

    doses: Query


class BottleUnset(TypedDict, total=False):
    """The fields a write of a bottle unsets (each with the value "")."""

    dose_review_from: str
    open_episode: str
    open_episode_users: str
    late_episode: str
    late_episode_users: str


class UsersAdded(TypedDict, total=False):
    """An `$addToSet` of the users a marker records: one user, or `{"$each": [...]}`."""

    open_episode_users: Query
    late_episode_users: str | Query


# An update of a bottle. (A TypedDict's class syntax cannot name `$set`.)
BottleUpdate = TypedDict(
    "BottleUpdate",
    {
        "$set": BottleDocument,
        "$inc": BottleDocument,
        "$min": BottleDocument,
        "$max": BottleDocument,
        "$push": DosesPush,
        "$unset": BottleUnset,
        "$addToSet": UsersAdded,
    },
    total=False,
)
