"""Driving the report functions as the Functions host would: the `aggregate_reports` timer and the read API;
and reading what they stored."""

import json
from dataclasses import dataclass
from typing import Any

import azure.functions as func
import mongomock
import pytest

from functions import reports
from shared.settings import get_settings
from shared.store import schema
from tests.api import Response

_aggregate = reports.aggregate_reports.build().get_user_function()
_get_reports = reports.get_user_reports.build().get_user_function()


@dataclass
class Timer:
    past_due: bool = False


def aggregate() -> None:
    """One run of the timer function, on the app's store, at the server's clock."""
    _aggregate(Timer())


def get_reports(user_id: str, **params: str) -> Response:
    request = func.HttpRequest(
        method="GET",
        url=f"/api/users/{user_id}/reports",
        headers={},
        params=params,
        route_params={"user_id": user_id},
        body=b"",
    )
    response = _get_reports(request)
    return Response(response.status_code, json.loads(response.get_body()), dict(response.headers))


def use_change_source_of(db: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """Change streams where the store has them (SecantusDB); polling on mongomock, which has none."""
    source = "polling" if isinstance(db.client, mongomock.MongoClient) else "change_stream"
    monkeypatch.setenv("CHANGE_SOURCE", source)
    get_settings.cache_clear()
    return source


def set_setting(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    get_settings.cache_clear()


def stored_reports(db: Any, *, with_updated_at: bool = False) -> dict[str, dict[str, Any]]:
    """Every hourly and daily report by `_id` (without `updated_at` unless asked: a rebuild's differ)."""
    found = {}
    for name in (schema.USER_HOURLY_REPORTS, schema.USER_DAILY_REPORTS):
        for doc in db[name].find():
            if not with_updated_at:
                doc.pop("updated_at")
            found[f"{name}/{doc['_id']}"] = doc
    return found


def clear_reports(db: Any) -> None:
    """Forget every report and every consumer position: the next run starts from scratch."""
    for name in (schema.USER_HOURLY_REPORTS, schema.USER_DAILY_REPORTS, schema.LEASES):
        db[name].delete_many({})
