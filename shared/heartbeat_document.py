"""The layout of a bottle's heartbeat document (`bottle_heartbeats`, one per bottle), which three jobs share:
provisioning creates it, ingestion writes it (one write per request of heartbeats), the silent check sweeps it,
the report consumer counts it. Its size is what every heartbeat write costs on Cosmos DB, so it is compact and
bounded: at steady state it holds the same fields whatever the bottle sent before (README: "What is stored").

    _id, bottle_id   the bottle (the shard key)
    bucket           the shard key's hash bucket (the silent check's partitions)
    ub               the hash bucket of `user_id` (the heartbeat tally's partitions: shared/reports/tally.py)
    k                the device key's SHA-256, first KEY_BYTES bytes: a heartbeat's write checks it in its filter
    user_id, medication  denormalised from the registry (the silent check and the reports read them)
    owners           [{user_id, until}]: earlier owners, each until it was reassigned, while that is within the window
    last             newest heartbeat time (the status view)
    alive_at         newest heartbeat time, or the provisioning time before any (the silent check)
    silent_pending, silent_episode  the silent check's markers
    r                server time of the last write to the ring (the ring's clock)
    w                the ring: one 64-bit field per hour of the window, named by the hour modulo RING_SLOTS
    la               server time of the newest late heartbeat written to the ring (absent until one)

The ring. A heartbeat is identified by its bottle and its UTC minute: hour h's field holds a bit per minute of
the hour in which a heartbeat was stored (bits 0-59), and LATE_FLAG once a heartbeat of that hour arrived more
than LATE_AFTER after its time. A repeated heartbeat sets a bit already set, so it is never counted twice, and
a buffered one sets the bit of its own hour. The hours kept are the window: the write's server hour and the
`hours` - 1 before it, and the next hour (a device clock may run up to MAX_FUTURE_SKEW ahead). Every write unsets
the fields of the MAX_GAP_HOURS hours before its window, so the fields present after a write are those of
its window, each holding only its own hour. That holds while ring writes are at most MAX_GAP_HOURS apart; a
write after a longer gap is refused by its filter (`r` too old) and goes the slow way (ingestion reads the
document and writes the ring whole). The field of an hour is found again from `r`: the window ends at the hour
after `r`'s, and each field name stands for the one hour of it that has that name.
"""

import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from bson import Binary
from bson.int64 import Int64

from shared.device_time import LATE_AFTER, MAX_FUTURE_SKEW

RING = "w"
RING_TIME = "r"
USER_BUCKET = "ub"
LATE_AT = "la"
KEY = "k"
LAST = "last"
ALIVE_AT = "alive_at"
SILENT_PENDING = "silent_pending"
OWNERS = "owners"

RING_SLOTS = 62  # field names: one character each (digits, then letters)
# Hours before the window a ring write clears, and so the longest gap between two ring writes that keeps the ring
# clean: a bottle silent for longer pays one read and one more write on its next heartbeat.
MAX_GAP_HOURS = 12
MAX_WINDOW_HOURS = RING_SLOTS - MAX_GAP_HOURS - 2  # with the next hour, every hour of a gap is a distinct field
_SLOT_NAMES = string.digits + string.ascii_lowercase + string.ascii_uppercase
MINUTES = (1 << 60) - 1
LATE_FLAG = 1 << 60
KEY_BYTES = 16  # 128 bits of the key's SHA-256: no key can be found to match them (keys are 256 random bits)
HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)


def hour_number(moment: datetime) -> int:
    """Hours since the epoch of the UTC hour holding `moment`."""
    return int(moment.timestamp()) // 3600


def hour_start(number: int) -> datetime:
    return datetime.fromtimestamp(number * 3600, UTC)


def slot_name(hour: int) -> str:
    return _SLOT_NAMES[hour % RING_SLOTS]


def key_digest(key_hash: str) -> Binary:
    """What the heartbeat document keeps of a device key: the first KEY_BYTES of its SHA-256 (hex `key_hash`)."""
    return Binary(bytes.fromhex(key_hash)[:KEY_BYTES])


@dataclass(frozen=True)
class Window:
    """The hours of heartbeats a bottle's ring counts: `hours` up to the write's server hour included, and the
    next one."""

    hours: int

    def __post_init__(self) -> None:
        if not 1 <= self.hours <= MAX_WINDOW_HOURS:
            raise ValueError(f"a heartbeat window holds 1 to {MAX_WINDOW_HOURS} hours")

    def live(self, server_hour: int) -> range:
        return range(server_hour - self.hours + 1, server_hour + 2)

    def start(self, server_hour: int) -> datetime:
        """The start of the oldest hour a write at `server_hour` keeps."""
        return hour_start(server_hour - self.hours + 1)

    def cleared(self, server_hour: int) -> list[str]:
        """The field names a write at `server_hour` unsets: the MAX_GAP_HOURS hours before its window."""
        return [slot_name(h) for h in range(server_hour - self.hours - MAX_GAP_HOURS + 1, server_hour - self.hours + 1)]

    def guard(self, server_hour: int) -> datetime:
        """The oldest `r` a ring write at `server_hour` may find (a longer gap goes the slow way)."""
        return hour_start(server_hour - MAX_GAP_HOURS)


def ring_hours(document: Mapping[str, Any]) -> dict[int, int]:
    """The ring as hour number -> field value (minute bits and LATE_FLAG), for the hours it holds.

    Each field stands for the one hour of the widest window ending at the hour after `r`'s that has its name,
    whatever the window setting was when it was written (fields outside it were cleared then)."""
    ring = document.get(RING) or {}
    written = document.get(RING_TIME)
    if not ring or written is None:
        return {}
    last = hour_number(written) + 1
    hours = {}
    for hour in range(last - RING_SLOTS + 1, last + 1):
        value = ring.get(slot_name(hour))
        if value:
            hours[hour] = int(value)
    return hours


def minutes_of(value: int) -> list[int]:
    """The minutes of the hour (0-59) a ring field has a heartbeat in."""
    bits = value & MINUTES
    return [m for m in range(60) if bits >> m & 1]


def heartbeat_minutes(document: Mapping[str, Any]) -> list[datetime]:
    """Every heartbeat the ring counts, as the start of its minute, oldest first."""
    return [
        hour_start(hour) + m * MINUTE for hour, value in sorted(ring_hours(document).items()) for m in minutes_of(value)
    ]


@dataclass(frozen=True)
class Placement:
    """Where a heartbeat goes in the ring: its hour and minute, or nowhere (older than the window)."""

    hour: int
    minute: int
    late: bool


def place(moment: datetime, now: datetime, window: Window) -> Placement | None:
    """Where a heartbeat of `moment`, received at `now`, is counted; None if its hour has left the window."""
    hour = hour_number(moment)
    if hour not in window.live(hour_number(now)):
        return None
    return Placement(hour, moment.minute, now - moment > LATE_AFTER)


def ring_bits(placements: Iterable[Placement]) -> dict[str, int]:
    """The bits a set of placed heartbeats adds to each ring field."""
    bits: dict[str, int] = {}
    for p in placements:
        name = slot_name(p.hour)
        bits[name] = bits.get(name, 0) | 1 << p.minute | (LATE_FLAG if p.late else 0)
    return bits


def ring_write(
    bottle_id: str, key: Binary, times: list[datetime], placements: list[Placement], *, now: datetime, window: Window
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(filter, update) of the one write that stores a request's heartbeats: the key check and the ring's
    clock in the filter; `alive_at` moved forward, the ring's bits set and its other hours cleared."""
    server_hour = hour_number(now)
    update: dict[str, Any] = {
        "$max": newest(times, placements, now),
        # silent_pending: the silent check has yet to look at this bottle's (possibly new) `alive_at`.
        "$set": {SILENT_PENDING: True},
        "$unset": {f"{RING}.{name}": "" for name in window.cleared(server_hour)},
        # Earlier owners whose heartbeats have all left the window (a no-op without `owners`).
        "$pull": {OWNERS: {"until": {"$lte": window.start(server_hour) - MAX_FUTURE_SKEW}}},
    }
    bits = ring_bits(placements)
    if bits:
        update["$bit"] = {f"{RING}.{name}": {"or": Int64(value)} for name, value in bits.items()}
    guard = {"_id": bottle_id, "bottle_id": bottle_id, KEY: key, RING_TIME: {"$gte": window.guard(server_hour)}}
    return guard, update


def newest(times: list[datetime], placements: list[Placement], now: datetime) -> dict[str, datetime]:
    """The `$max` of a ring write: the newest heartbeat (`last`, `alive_at`), the write (`r`), a late one."""
    latest = {LAST: max(times), ALIVE_AT: max(times), RING_TIME: now}
    if any(p.late for p in placements):
        latest[LATE_AT] = now
    return latest


def rewritten_ring(
    document: Mapping[str, Any], placements: list[Placement], now: datetime, window: Window
) -> dict[str, Int64]:
    """The whole ring after these heartbeats, from a document read: for a write after a long gap."""
    live = window.live(hour_number(now))
    kept = {slot_name(h): v for h, v in ring_hours(document).items() if h in live}
    for name, value in ring_bits(placements).items():
        kept[name] = kept.get(name, 0) | value
    return {name: Int64(value) for name, value in sorted(kept.items())}


def already_counted(document: Mapping[str, Any] | None, placement: Placement) -> bool:
    """Whether the ring of `document` (as it was before a write) has this heartbeat's minute already."""
    value = ring_hours(document or {}).get(placement.hour, 0)
    return bool(value >> placement.minute & 1)
