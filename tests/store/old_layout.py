"""An account's collections as the code before the notifications' `bucket` left them (OLD_KEYS), and pending
notifications to fill them; the setup and deploy-check tests share them."""

from datetime import UTC, datetime
from typing import Any

from shared.notifications import documents
from shared.notifications.documents import Episode
from shared.store.retries import RetryPolicy


def pending_notifications(db: Any, count: int) -> None:
    now = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)
    episodes = [Episode(f"bottle-{i}", f"user-{i}", "aspirin", "left_open", now) for i in range(count)]
    documents.record(db, episodes, now, RetryPolicy())


OLD_KEYS = [("delivery", 1), ("kind", 1), ("created_at", 1)]  # the delivery sweep's index before `bucket`
