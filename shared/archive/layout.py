"""The archive's two datasets: their columns, and the name of every file (pure: no pyarrow, no storage). A name says
what a file holds, whoever writes it and when, which keeps every event and bottle-hour in the archive once. The
layout and why: docs/archive.md, "Layout" and "Exactly once"."""

import re
from datetime import UTC, datetime

from shared.instants import day_of, hour_of

ACTIONS = "actions"
HEARTBEATS = "heartbeats"
# Every opened/closed event once: the columns of `actions`, in their order.
ACTION_COLUMNS = (
    "bottle_id",
    "user_id",
    "medication",
    "time",  # the device's time of the event (UTC)
    "action",  # opened | closed
    "mass_of_contents",
    "number_of_pills",
    "pills_taken",  # null for `opened`
    "received_at",  # the server's receive time (UTC)
)
# Every bottle-hour's heartbeats: the columns of `heartbeats`, in their order.
HEARTBEAT_COLUMNS = (
    "bottle_id",
    "user_id",  # who owned the bottle in those slots (a reassigned bottle's hour may have two rows)
    "hour",  # the start of the UTC hour
    "slots",  # the 5-minute slots heard from, as the minute each starts at (0, 5, ..., 55), ascending
)

_ACTION_FILE = re.compile(
    r"actions/date=(\d{4}-\d{2}-\d{2})/received-(\d{4}-\d{2}-\d{2}T\d{2})-(\d{4})\.parquet", re.ASCII
)
_HEARTBEAT_FILE = re.compile(r"heartbeats/date=(\d{4}-\d{2}-\d{2})/hour-(\d{2})-users-(\d{4})\.parquet", re.ASCII)


def date_folder(dataset: str, day: datetime) -> str:
    """The folder of one UTC date of a dataset (a prefix to list)."""
    return f"{dataset}/date={day_of(day):%Y-%m-%d}/"


def action_file(event_day: datetime, received_hour: datetime, chunk: int) -> str:
    """The file of the events of `event_day` (UTC date of their `time`) in chunk `chunk` of those received in
    `received_hour` (shared/archive/actions.py): each event in exactly one file, named by what it holds, so a write
    repeated for any reason writes the same file again."""
    return f"{date_folder(ACTIONS, event_day)}received-{hour_of(received_hour):%Y-%m-%dT%H}-{chunk:04d}.parquet"


def heartbeat_file(hour: datetime, user_bucket: int) -> str:
    """The file of the bottle-hours of `hour` whose user is in bucket `user_bucket` (`bucket_of(user_id)`, 0-1023):
    one row per (bottle, user, hour), merged into the file by that key (shared/archive/heartbeats.py)."""
    return f"{date_folder(HEARTBEATS, hour)}hour-{hour_of(hour):%H}-users-{user_bucket:04d}.parquet"


def parse_action_file(name: str) -> tuple[datetime, datetime, int] | None:
    """(event day, received hour, chunk) of an action file's name; None for any other name."""
    found = _ACTION_FILE.fullmatch(name)
    if found is None:
        return None
    day, received, chunk = found.groups()
    return _utc(day, "%Y-%m-%d"), _utc(received, "%Y-%m-%dT%H"), int(chunk)


def parse_heartbeat_file(name: str) -> tuple[datetime, int] | None:
    """(hour, user bucket) of a heartbeat file's name; None for any other name."""
    found = _HEARTBEAT_FILE.fullmatch(name)
    if found is None:
        return None
    day, hour, bucket = found.groups()
    return _utc(f"{day}T{hour}", "%Y-%m-%dT%H"), int(bucket)


def _utc(text: str, form: str) -> datetime:
    return datetime.strptime(text, form).replace(tzinfo=UTC)
