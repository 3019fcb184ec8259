"""Registry entries: what other jobs need to know about a bottle (owner, medication, key hash), read from
`bottles` by the request that needs them, never cached: a worker that kept a copy would accept a rotated-out key
(and file events under a former owner) until its copy expired. The same point read returns the bottle's status
(what ingestion computes its one status write from)."""

from dataclasses import dataclass
from typing import Any

from pymongo.collection import Collection
from pymongo.database import Database

from shared.doses.bottle_document import BottleDocument, BottleFilter
from shared.store import schema
from shared.store.retries import RetryPolicy, with_retries


@dataclass(frozen=True)
class RegistryEntry:
    """What ingestion needs to know about a bottle."""

    bottle_id: str
    user_id: str
    medication: str
    key_hash: str


# One point read of a bottle: its registry entry, and the status fields ingestion's status write is computed
# from (shared/ingestion/storing.py), the dose plan's fields among them.
BOTTLE_FIELDS = dict.fromkeys(
    (
        "user_id",
        "medication",
        "key_hash",
        "schedule",
        "grace_minutes",
        "provisioned_at",
        "schedule_from",
        "last_action",
        "last_action_time",
        "last_dose_time",
        "doses",
        "dose_due",
        "dose_late_at",
        "dose_seq",
    ),
    1,
)


def bottle_documents(db: Database[Any]) -> Collection[BottleDocument]:
    """The `bottles` collection, its documents typed."""
    return db[schema.BOTTLES]


def read_bottle(db: Database[Any], bottle_id: str, policy: RetryPolicy) -> BottleDocument | None:
    """The bottle's registry and status fields (BOTTLE_FIELDS), one point read; None if it is unknown."""
    key: BottleFilter = {"_id": bottle_id, "bottle_id": bottle_id}
    return with_retries(lambda: bottle_documents(db).find_one(key, BOTTLE_FIELDS), policy)


def entry_of(found: BottleDocument) -> RegistryEntry:
    """The registry entry of a bottle as read (`read_bottle`)."""
    return RegistryEntry(found["_id"], found["user_id"], found["medication"], found["key_hash"])
