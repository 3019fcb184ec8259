"""The collections, their shard keys and their indexes (`collection_specs`): the one source the setup command and
the IaC follow. The rules they keep (equality fields first, every sort an index's keys exactly, TTL on `_ts` on
Cosmos DB): docs/cosmos-db.md; what each collection holds and how long: docs/architecture.md, "What is stored" and
"Retention".
"""

from dataclasses import dataclass, field

from shared.devices.heartbeat_document import OWNERS, USER_BUCKET
from shared.settings import Settings

BOTTLES = "bottles"
BOTTLE_ACTIONS = "bottle_actions"
BOTTLE_HEARTBEATS = "bottle_heartbeats"
NOTIFICATIONS = "notifications"
USER_HOURLY_REPORTS = "user_hourly_reports"
USER_DAILY_REPORTS = "user_daily_reports"
LEASES = "leases"

Key = tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class IndexSpec:
    name: str
    keys: Key
    unique: bool = False
    expire_after_seconds: int | None = None
    cosmos_keys: Key | None = None  # a different key on Cosmos DB (its TTL index is on `_ts`: `retention`)
    retention_setting: str | None = None  # the setting (days) a TTL index's expireAfterSeconds comes from

    def keys_for(self, cosmos: bool) -> Key:
        return self.cosmos_keys if cosmos and self.cosmos_keys is not None else self.keys


@dataclass(frozen=True)
class CollectionSpec:
    name: str
    shard_key: str | None
    indexes: tuple[IndexSpec, ...] = field(default_factory=tuple)


DAY_SECONDS = 86_400


def retention(field: str, settings: Settings, setting: str) -> IndexSpec:
    """The TTL index that expires a document the setting's days after its last write (Cosmos DB: `_ts`, which every
    write moves), or after its `field` (elsewhere: MongoDB's TTL indexes need a date field of the document)."""
    seconds = int(getattr(settings, setting)) * DAY_SECONDS
    return IndexSpec(
        "retention", ((field, 1),), expire_after_seconds=seconds, cosmos_keys=(("_ts", 1),), retention_setting=setting
    )


def collection_specs(settings: Settings) -> tuple[CollectionSpec, ...]:
    """Every collection the app uses, in creation order."""
    return (
        CollectionSpec(
            BOTTLES,
            "bottle_id",
            (
                # The checks' sweeps, one bucket range (partition) at a time (deliberate cross-partition queries):
                # each returns only the partition's bottles in trouble, or whose trouble just ended. Two ranges per
                # query, the partition's buckets and the status field's, with `bucket` first: MongoDB bounds every
                # field (its index scan seeks from bucket to bucket), Cosmos DB filters with each path's index
                # whatever the order, and SecantusDB, which bounds one range only, narrows by the leading one
                # (docs/checks.md: the choice against one query per bucket, measured in docs/benchmarks.md).
                IndexSpec("open_check", (("bucket", 1), ("open_pending", 1), ("open_since", 1))),
                IndexSpec("open_resolve", (("bucket", 1), ("open_pending", 1), ("open_episode", 1))),
                IndexSpec("dose_late_at", (("bucket", 1), ("dose_late_at", 1))),
                IndexSpec("late_resolve", (("bucket", 1), ("dose_pending", 1), ("late_episode", 1))),
            ),
        ),
        CollectionSpec(
            BOTTLE_ACTIONS,
            "bottle_id",
            (
                # One bottle's actions in a time range: report recomputes, the status view.
                IndexSpec("bottle_time", (("bottle_id", 1), ("time", 1))),
                # The reports' polling change source and recovery read by server receive time.
                IndexSpec("received_at", (("received_at", 1),)),
                # Rebuilding one user's reports over a time range.
                IndexSpec("user_time", (("user_id", 1), ("time", 1))),
                retention("time", settings, "actions_retention_days"),
            ),
        ),
        # One document per bottle, written by `_id`: ingestion needs no secondary index. Of the indexed fields, a
        # heartbeat's write changes only `alive_at` (the silent check's sweep); `r`, the ring's time, is not indexed.
        CollectionSpec(
            BOTTLE_HEARTBEATS,
            "bottle_id",
            (
                # The heartbeat tally sweeps one user-bucket range at a time, user by user (and rebuilding one
                # user's reports finds the bottles the user owns by it); neither field changes with a heartbeat.
                IndexSpec("tally", ((USER_BUCKET, 1), ("user_id", 1))),
                # Rebuilding one user's reports: the bottles the user owned within the window (multikey over the
                # ownership list, which exists only then).
                IndexSpec("owners_user", ((f"{OWNERS}.user_id", 1),)),
                # The silent check's sweeps, per bucket range (cross-partition, like the bottles' ones above).
                IndexSpec("silent_check", (("bucket", 1), ("silent_pending", 1), ("alive_at", 1))),
                IndexSpec("silent_resolve", (("bucket", 1), ("silent_pending", 1), ("silent_episode", 1))),
            ),
        ),
        CollectionSpec(
            NOTIFICATIONS,
            "user_id",
            (
                # GET /users/{user_id}/notifications: one partition, newest first (feed_key = created_at|_id).
                IndexSpec("user_feed", (("user_id", 1), ("feed_key", 1))),
                # Resolving a bottle's late-dose notifications up to a dose (one partition).
                IndexSpec("bottle_episodes", (("user_id", 1), ("bottle_id", 1), ("kind", 1), ("episode_start", 1))),
                # Each check partition's queue sweep: its notifications not yet handed to the queue, oldest first
                # (`bucket` last: the sort is the index's keys, so oldest first across the partition's buckets).
                IndexSpec("delivery_pending", (("delivery", 1), ("kind", 1), ("created_at", 1), ("bucket", 1))),
                retention("created_at", settings, "notifications_retention_days"),
            ),
        ),
        CollectionSpec(
            USER_HOURLY_REPORTS,
            "user_id",
            (
                # GET /users/{user_id}/reports?granularity=hour and the daily roll-up: one partition, by time.
                IndexSpec("user_hour", (("user_id", 1), ("hour", 1))),
                retention("hour", settings, "hourly_reports_retention_days"),
            ),
        ),
        CollectionSpec(
            USER_DAILY_REPORTS,
            "user_id",
            (
                IndexSpec("user_day", (("user_id", 1), ("day", 1))),
                retention("day", settings, "daily_reports_retention_days"),
            ),
        ),
        CollectionSpec(LEASES, None),
    )
