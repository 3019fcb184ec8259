"""A device request end to end: check the key's shape, validate every event, authenticate, store."""

from datetime import datetime, timedelta
from typing import Any

from pymongo.database import Database

from shared.api.payloads import check_media_type, check_size, decode_json
from shared.devices.device_keys import hash_key
from shared.devices.heartbeat_document import Window
from shared.ingestion.authentication import authenticate, check_key_shape
from shared.ingestion.events import parse_events
from shared.ingestion.storing import IngestResult, ingest_events
from shared.settings import Settings
from shared.store.retries import RetryPolicy


def receive(
    db: Database[Any],
    bottle_id: str,
    device_key: str | None,
    body: bytes,
    *,
    now: datetime,
    settings: Settings,
    content_type: str | None = None,
) -> IngestResult:
    """A device's request, end to end: check the body's size and media type and the key's shape, decode
    and validate every event, then store them all, authenticating on the way.

    Validation needs no database, so it comes before anything is read or written; its answers say
    nothing about the registry. A request of heartbeats only is authenticated by its own write; one
    with actions reads the bottle (one point read): the key is checked against it, their owner and medication
    come from it, and a dose's status write is computed from it."""
    check_size(body)
    check_media_type(content_type)
    key = check_key_shape(device_key)
    events = parse_events(decode_json(body), now, timedelta(days=settings.max_event_age_days))
    policy = RetryPolicy.for_request(settings)
    registry, bottle = None, None
    if any(e.type != "heartbeat" for e in events):
        registry, bottle = authenticate(db, bottle_id, key, policy)
    return ingest_events(
        db,
        bottle_id,
        hash_key(key),
        events,
        registry=registry,
        bottle=bottle,
        now=now,
        policy=policy,
        window=Window(settings.heartbeat_window_hours),
        dose_history=settings.dose_history,
    )
