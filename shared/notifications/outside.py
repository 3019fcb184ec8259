"""A notification as it is shown outside the store, in its two shapes: the queue message the checks send
(`queue_message`) and the read API's view (`notification_view`, openapi.yaml `Notification`). Both carry the same
fields, from one place (`outside_fields`), and differ only around them: the message names the id
`notification_id` (the key consumers deduplicate on), the view `id`; only the view has `resolved_at` (a message
is sent once, whatever became of the episode since). Both are published contracts (docs/checks.md, docs/api.md)."""

import json
from typing import Any

from shared.instants import format_instant
from shared.notifications.documents import NotificationDocument


def outside_fields(notification: NotificationDocument) -> dict[str, Any]:
    """The fields both shapes carry, in their order, instants as ISO-8601: owner, bottle, medication, kind, when
    the episode began and when a check recorded it."""
    return {
        "user_id": notification["user_id"],
        "bottle_id": notification["bottle_id"],
        "medication": notification["medication"],
        "kind": notification["kind"],
        "episode_start": format_instant(notification["episode_start"]),
        "created_at": format_instant(notification["created_at"]),
    }


def queue_message(notification: NotificationDocument) -> str:
    """The queue message of a notification: JSON, `notification_id` (the key to deduplicate on) first."""
    message = {"notification_id": notification["_id"], **outside_fields(notification)}
    return json.dumps(message, separators=(",", ":"))


def notification_view(notification: NotificationDocument) -> dict[str, Any]:
    """A notification as the read API answers it: `id` first, `resolved_at` (null while the episode lasts) last."""
    resolved = notification.get("resolved_at")
    return {
        "id": notification["_id"],
        **outside_fields(notification),
        "resolved_at": format_instant(resolved) if resolved is not None else None,
    }
