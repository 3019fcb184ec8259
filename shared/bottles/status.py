"""How the API shows a bottle: its registry fields and its live status (GET /api/bottles/{bottle_id})."""

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import TypeAdapter
from pymongo.database import Database

from shared.devices.heartbeat_document import LAST
from shared.doses.due_tracking import plan_of
from shared.doses.schedules import Schedule
from shared.errors import NotFound
from shared.instants import format_instant
from shared.settings import Settings
from shared.store import schema
from shared.store.retries import RetryPolicy, with_retries


def bottle_status(db: Database[Any], bottle_id: str, *, settings: Settings) -> dict[str, Any]:
    """Registry fields and live status of a bottle (never its key); NotFound if unknown."""
    policy = RetryPolicy.for_request(settings)
    bottle = with_retries(
        lambda: db[schema.BOTTLES].find_one({"_id": bottle_id, "bottle_id": bottle_id}, {"key_hash": 0}), policy
    )
    if bottle is None:
        raise NotFound(f"no bottle '{bottle_id}'")
    heartbeats = with_retries(
        lambda: db[schema.BOTTLE_HEARTBEATS].find_one({"_id": bottle_id, "bottle_id": bottle_id}, {LAST: 1}),
        policy,
    )
    view = registry_view(bottle)
    view["status"] = status_view(bottle, last_heartbeat=(heartbeats or {}).get(LAST))
    return view


_SCHEDULE = TypeAdapter(Schedule)


def registry_view(bottle: Mapping[str, Any]) -> dict[str, Any]:
    """The registry fields of a bottle as the API shows them (never the key or its hash)."""
    return {
        "bottle_id": bottle["_id"],
        "user_id": bottle["user_id"],
        "medication": bottle["medication"],
        "schedule": _SCHEDULE.validate_python(bottle["schedule"]).model_dump(),
        "grace_minutes": bottle["grace_minutes"],
        "provisioned_at": format_instant(bottle["provisioned_at"]),
        "updated_at": format_instant(bottle["updated_at"]),
    }


def status_view(bottle: dict[str, Any], last_heartbeat: datetime | None) -> dict[str, Any]:
    """The live status of a bottle as the API shows it. `next_dose_due` is the earliest slot neither
    satisfied nor found late yet, as ingestion and the late-dose check keep it (in the past: overdue)."""
    due = bottle.get("dose_due") or plan_of(bottle).first_due(bottle.get("doses", []))
    return {
        "last_heartbeat": _instant_or_none(last_heartbeat),
        "last_action": bottle.get("last_action"),
        "last_action_time": _instant_or_none(bottle.get("last_action_time")),
        "open_since": _instant_or_none(bottle.get("open_since")),
        "last_dose_time": _instant_or_none(bottle.get("last_dose_time")),
        "next_dose_due": format_instant(due),
    }


def _instant_or_none(moment: datetime | None) -> str | None:
    return format_instant(moment) if moment is not None else None
