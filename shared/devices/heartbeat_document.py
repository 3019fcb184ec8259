"""A bottle's heartbeat document (`bottle_heartbeats`, one per bottle): its typed fields, the ring write's filter
and update, and the ring read back. Provisioning creates it, ingestion writes it (one write per request of
heartbeats), the silent check sweeps it, the report consumer counts it. It is compact and bounded because its size
is what every heartbeat write costs on Cosmos DB: the fields, the ring's bits and window, and why the clearing keeps
it clean are in docs/architecture.md ("The heartbeat document")."""

import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, TypedDict

from bson import Binary
from bson.int64 import Int64

from shared.devices.device_time import LATE_AFTER, MAX_FUTURE_SKEW

# The field names, `Final` so that mypy checks them as keys of the types below.
RING: Final = "w"
RING_TIME: Final = "r"
USER_BUCKET: Final = "ub"
LATE_AT: Final = "la"
KEY: Final = "k"
KEY_VERSION: Final = "kv"  # the bottle's `key_version` whose key `k` is (shared/bottles/provisioning.py)
LAST: Final = "last"
ALIVE_AT: Final = "alive_at"
SILENT_PENDING: Final = "silent_pending"
OWNERS: Final = "owners"

# A query operator's expression (`{"$gte": t}`): what a filter may hold in place of a field's value.
Query = Mapping[str, Any]


class Owner(TypedDict):
    """An earlier owner of the bottle, until it was reassigned."""

    user_id: str
    until: datetime


class SilentMarker(TypedDict, total=False):
    """The silent check's state on a heartbeat document: the silence going on or to come (`alive_at`, the last
    heartbeat, moved forward by ingestion with `silent_pending`), and the marker of the silence notified with the
    users it was notified to, which only the check writes, guarded by what it read
    (shared/notifications/checks/rules.py, docs/checks.md)."""

    alive_at: datetime
    silent_pending: bool  # the check has yet to look at this `alive_at`
    silent_episode: datetime
    silent_episode_users: list[str]  # the users the marked silence was notified to


class HeartbeatDocument(SilentMarker, total=False):
    """The heartbeat document's fields, as provisioning, ingestion and the silent check write and read them (each
    write sets a few, a projection reads a few). A field with nothing to hold is absent, never null. What each
    holds: docs/architecture.md, "The heartbeat document"."""

    _id: str
    bottle_id: str
    bucket: int
    ub: int
    k: Binary
    kv: int
    user_id: str
    medication: str
    owners: list[Owner]
    last: datetime
    r: datetime
    # The ring, by field name: the names are computed (`field_name`), which a TypedDict cannot list.
    w: dict[str, Int64]
    la: datetime


# The fields a guarded write of the heartbeat document matches on: a value (None matches an absent field), or a
# query operator's expression. (A TypedDict's class syntax cannot name `$or`.)
HeartbeatFilter = TypedDict(
    "HeartbeatFilter",
    {
        "_id": str,
        "bottle_id": str,
        "k": Binary,
        "kv": Query,
        "user_id": str | None,
        "owners": list[Owner] | None,
        "alive_at": datetime | Query,
        "silent_pending": bool,
        "silent_episode": datetime | Query | None,
        "silent_episode_users": list[str] | None,
        "r": datetime | Query | None,
        "w": dict[str, Int64] | None,
        "$or": list["HeartbeatFilter"],
    },
    total=False,
)


class SilentUsersAdded(TypedDict):
    """An `$addToSet` of the users the silent marker records: `{"$each": [...]}`."""

    silent_episode_users: Query


class SilentUnset(TypedDict, total=False):
    """The silent marker's fields a write unsets (each with the value "")."""

    silent_episode: str
    silent_episode_users: str


class OwnersPull(TypedDict):
    """A `$pull` of earlier owners: those matching the owner query."""

    owners: Query


# An update of the heartbeat document. `$unset` and `$bit` name ring fields by dotted path (`w.3`), and `$unset`
# fields of an earlier layout too, which a TypedDict cannot list: those stay plain dicts.
HeartbeatUpdate = TypedDict(
    "HeartbeatUpdate",
    {
        "$set": HeartbeatDocument,
        "$setOnInsert": HeartbeatDocument,
        "$max": HeartbeatDocument,
        "$unset": dict[str, str] | SilentUnset,
        "$pull": OwnersPull,
        "$bit": dict[str, dict[str, Int64]],
        "$addToSet": SilentUsersAdded,
    },
    total=False,
)


SLOT_MINUTES = 5  # a heartbeat is its bottle and its 5-minute slot of the hour
SLOTS_PER_HOUR = 60 // SLOT_MINUTES
SLOTS = (1 << SLOTS_PER_HOUR) - 1  # an hour's slot bits
LATE_FLAG = 1 << SLOTS_PER_HOUR
HOUR_BITS = SLOTS_PER_HOUR + 1  # 13
HOUR_MASK = (1 << HOUR_BITS) - 1
HOURS_PER_FIELD = 64 // HOUR_BITS  # 4 hours in a 64-bit field
FIELD_NAMES = 62  # field names: one character each (digits, then letters)
_NAMES = string.digits + string.ascii_lowercase + string.ascii_uppercase
# The longest gap between two ring writes that keeps the ring clean (a bottle silent for longer pays one read and
# one more write on its next heartbeat), and the fields before the widest window a write clears for it.
MAX_GAP_HOURS = 12
MAX_GAP_FIELDS = MAX_GAP_HOURS // HOURS_PER_FIELD
MAX_WINDOW_HOURS = 48  # HEARTBEAT_WINDOW_HOURS' bound (shared/settings.py)
KEY_BYTES = 16  # 128 bits of the key's SHA-256: no key can be found to match them (keys are 256 random bits)
HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)
SLOT = timedelta(minutes=SLOT_MINUTES)

assert MAX_GAP_HOURS % HOURS_PER_FIELD == 0, "field(x - MAX_GAP_HOURS) must be field(x) - MAX_GAP_FIELDS"
# Every field a write clears or keeps has its own name: the clearing, the widest window and its next hour.
assert MAX_GAP_FIELDS + (MAX_WINDOW_HOURS + 1 + 2) // HOURS_PER_FIELD + 1 <= FIELD_NAMES


def hour_number(moment: datetime) -> int:
    """Hours since the epoch of the UTC hour holding `moment`."""
    return int(moment.timestamp()) // 3600


def hour_start(number: int) -> datetime:
    return datetime.fromtimestamp(number * 3600, UTC)


def field_of(hour: int) -> int:
    """The number of the ring field holding hour number `hour`."""
    return hour // HOURS_PER_FIELD


def field_name(field: int) -> str:
    return _NAMES[field % FIELD_NAMES]


def _shift(hour: int) -> int:
    """Where hour number `hour`'s 13 bits start in its field."""
    return HOUR_BITS * (hour % HOURS_PER_FIELD)


def key_digest(key_hash: str) -> Binary:
    """What the heartbeat document keeps of a device key: the first KEY_BYTES of its SHA-256 (hex `key_hash`)."""
    return Binary(bytes.fromhex(key_hash)[:KEY_BYTES])


@dataclass(frozen=True)
class Window:
    """The hours of heartbeats a bottle's ring counts: the whole fields from the one holding the oldest of
    `hours` up to the write's server hour included, to the one holding the next hour."""

    hours: int

    def __post_init__(self) -> None:
        if not 1 <= self.hours <= MAX_WINDOW_HOURS:
            raise ValueError(f"a heartbeat window holds 1 to {MAX_WINDOW_HOURS} hours")

    def first_field(self, server_hour: int) -> int:
        return field_of(server_hour - self.hours + 1)

    def live(self, server_hour: int) -> range:
        """The hours a write at `server_hour` keeps and counts (those of its fields, up to the next hour)."""
        return range(self.first_field(server_hour) * HOURS_PER_FIELD, server_hour + 2)

    def start(self, server_hour: int) -> datetime:
        """The start of the oldest hour a write at `server_hour` keeps."""
        return hour_start(self.first_field(server_hour) * HOURS_PER_FIELD)

    def cleared(self, server_hour: int) -> list[str]:
        """The field names a write at `server_hour` unsets: those before its window, from MAX_GAP_FIELDS fields
        before the widest window's first on."""
        widest = field_of(server_hour - MAX_WINDOW_HOURS + 1)
        return [field_name(f) for f in range(widest - MAX_GAP_FIELDS, self.first_field(server_hour))]

    def guard(self, server_hour: int) -> datetime:
        """The oldest `r` a ring write at `server_hour` may find (a longer gap goes the slow way)."""
        return hour_start(server_hour - MAX_GAP_HOURS)


def ring_hours(document: Mapping[str, Any]) -> dict[int, int]:
    """The ring as hour number -> that hour's 13 bits (slot bits and LATE_FLAG), for the hours it has a heartbeat
    in.

    Each field stands for the one field of the FIELD_NAMES up to the one of the hour after `r`'s that has its
    name, whatever the window setting was when it was written (fields outside it were cleared then)."""
    ring = document.get(RING) or {}
    written = document.get(RING_TIME)
    if not ring or written is None:
        return {}
    last = field_of(hour_number(written) + 1)
    hours = {}
    for field in range(last - FIELD_NAMES + 1, last + 1):
        value = int(ring.get(field_name(field)) or 0)
        for hour in range(field * HOURS_PER_FIELD, (field + 1) * HOURS_PER_FIELD):
            bits = value >> _shift(hour) & HOUR_MASK
            if bits:
                hours[hour] = bits
    return hours


def late_flags(document: Mapping[str, Any]) -> dict[str, Int64]:
    """The bits that set LATE_FLAG on every hour the ring holds, by field name (`$bit` `or` operands): for a
    document whose hours must all be counted again by the heartbeat tally's next pass, as a late heartbeat's hour
    is (with `la` moved on), e.g. one the tally could not see before (shared/store/setup.py: backfill_buckets)."""
    bits: dict[int, int] = {}
    for hour in ring_hours(document):
        bits[field_of(hour)] = bits.get(field_of(hour), 0) | LATE_FLAG << _shift(hour)
    return {field_name(field): Int64(value) for field, value in sorted(bits.items())}


def slots_of(value: int) -> list[int]:
    """The slots of the hour (0-11: minutes 0-4, 5-9, ...) an hour's bits have a heartbeat in."""
    return [s for s in range(SLOTS_PER_HOUR) if value >> s & 1]


def minutes_of(value: int) -> list[int]:
    """A minute of the hour (0-59) for each heartbeat an hour's bits hold: the last minute of its slot (4, 9, ...
    59), the latest its heartbeat may have been sent in. So a mark's minute ends when its slot does (an hour
    changed since a time if a mark ends after it), and a slot that a reassignment falls in counts for the new
    owner (owners are known to the minute: shared/reports/documents.py)."""
    return [s * SLOT_MINUTES + SLOT_MINUTES - 1 for s in slots_of(value)]


def heartbeat_slots(document: Mapping[str, Any]) -> list[datetime]:
    """Every heartbeat the ring counts, as the start of its slot, oldest first."""
    return [
        hour_start(hour) + s * SLOT for hour, value in sorted(ring_hours(document).items()) for s in slots_of(value)
    ]


def slot_start(moment: datetime) -> datetime:
    """The start of `moment`'s 5-minute slot: a heartbeat's identity (with its bottle)."""
    return moment.replace(minute=moment.minute - moment.minute % SLOT_MINUTES, second=0, microsecond=0)


@dataclass(frozen=True)
class Placement:
    """Where a heartbeat goes in the ring: its hour and slot, or nowhere (older than the window)."""

    hour: int
    slot: int
    late: bool


def place(moment: datetime, now: datetime, window: Window) -> Placement | None:
    """Where a heartbeat of `moment`, received at `now`, is counted; None if its hour has left the window."""
    hour = hour_number(moment)
    if hour not in window.live(hour_number(now)):
        return None
    return Placement(hour, moment.minute // SLOT_MINUTES, now - moment > LATE_AFTER)


def ring_bits(placements: Iterable[Placement]) -> dict[int, int]:
    """The bits a set of placed heartbeats adds to each ring field, by field number."""
    bits: dict[int, int] = {}
    for p in placements:
        field = field_of(p.hour)
        bits[field] = bits.get(field, 0) | (1 << p.slot | (LATE_FLAG if p.late else 0)) << _shift(p.hour)
    return bits


def ring_write(
    bottle_id: str, key: Binary, times: list[datetime], placements: list[Placement], *, now: datetime, window: Window
) -> tuple[HeartbeatFilter, HeartbeatUpdate]:
    """(filter, update) of the one write that stores a request's heartbeats: the key check and the ring's
    clock in the filter; `alive_at` moved forward, the ring's bits set and the fields before its window cleared."""
    server_hour = hour_number(now)
    update: HeartbeatUpdate = {
        "$max": newest(times, placements, now),
        # silent_pending: the silent check has yet to look at this bottle's (possibly new) `alive_at`.
        "$set": {SILENT_PENDING: True},
        "$unset": {f"{RING}.{name}": "" for name in window.cleared(server_hour)},
        # Earlier owners whose heartbeats have all left the window (a no-op without `owners`).
        "$pull": {OWNERS: {"until": {"$lte": window.start(server_hour) - MAX_FUTURE_SKEW}}},
    }
    bits = ring_bits(placements)
    if bits:
        update["$bit"] = {f"{RING}.{field_name(field)}": {"or": Int64(value)} for field, value in bits.items()}
    guard: HeartbeatFilter = {
        "_id": bottle_id,
        "bottle_id": bottle_id,
        KEY: key,
        RING_TIME: {"$gte": window.guard(server_hour)},
    }
    return guard, update


def newest(times: list[datetime], placements: list[Placement], now: datetime) -> HeartbeatDocument:
    """The `$max` of a ring write: the newest heartbeat (`last`, `alive_at`), the write (`r`), a late one."""
    latest: HeartbeatDocument = {LAST: max(times), ALIVE_AT: max(times), RING_TIME: now}
    if any(p.late for p in placements):
        latest[LATE_AT] = now
    return latest


def rewritten_ring(
    document: HeartbeatDocument, placements: list[Placement], now: datetime, window: Window
) -> dict[str, Int64]:
    """The whole ring after these heartbeats, from a document read: for a write after a long gap."""
    live = window.live(hour_number(now))
    kept: dict[int, int] = {}
    for hour, value in ring_hours(document).items():
        if hour in live:
            kept[field_of(hour)] = kept.get(field_of(hour), 0) | value << _shift(hour)
    for field, value in ring_bits(placements).items():
        kept[field] = kept.get(field, 0) | value
    return {field_name(field): Int64(value) for field, value in sorted(kept.items())}


def already_counted(document: HeartbeatDocument | None, placement: Placement) -> bool:
    """Whether the ring of `document` (as it was before a write) has this heartbeat's slot already: its one bit,
    read from the one field that holds its hour (as `ring_hours` maps fields back from `r`, without decoding
    the others: a heartbeat request tests each of its heartbeats)."""
    ring = (document or {}).get(RING) or {}
    written = (document or {}).get(RING_TIME)
    if not ring or written is None:
        return False
    field, last = field_of(placement.hour), field_of(hour_number(written) + 1)
    if not last - FIELD_NAMES < field <= last:
        return False
    value = int(ring.get(field_name(field)) or 0)
    return bool(value >> (_shift(placement.hour) + placement.slot) & 1)


# --- who owned the bottle when -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ownership:
    user_id: str
    since: datetime | None  # None: from the start
    until: datetime | None  # None: still the owner

    def overlaps(self, start: datetime, end: datetime) -> bool:
        return (self.since is None or self.since < end) and (self.until is None or start < self.until)


def ownerships(heartbeat_doc: Mapping[str, Any]) -> list[Ownership]:
    """Who owned the bottle when: the heartbeat document's earlier owners (`owners`, [{user_id, until}], oldest
    first, one appended at each reassignment and dropped once the window is past it), then its `user_id` from
    the last `until` on. The first owns everything before its `until`."""
    spans = []
    since = None
    for owner in heartbeat_doc.get(OWNERS) or []:
        spans.append(Ownership(owner["user_id"], since, owner["until"]))
        since = owner["until"]
    spans.append(Ownership(heartbeat_doc["user_id"], since, None))
    return spans


def owner_of_minute(spans: list[Ownership], minute: datetime) -> str | None:
    """Who a heartbeat of this minute counts for: a heartbeat's minute is the last of its 5-minute slot
    (minutes_of), so a reassignment counts from the start of its slot (a heartbeat in that slot counts for the
    new owner)."""
    for span in spans:
        since = None if span.since is None else span.since.replace(second=0, microsecond=0)
        until = None if span.until is None else span.until.replace(second=0, microsecond=0)
        if (since is None or since <= minute) and (until is None or minute < until):
            return span.user_id
    return None
