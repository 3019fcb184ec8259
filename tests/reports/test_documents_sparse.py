"""Reports are stored sparse (shared/reports/documents.py): a counter at 0 and a null reading are left out of the
report and of each bottle's entry, which is ~40 % of an hourly report of heartbeats only, the storage Cosmos DB bills
for the reports' 60 days (docs/costs.md). Every reader takes a missing counter as 0 and a missing reading as null: the
API answers every field as before, a day sums sparse hours, and a report stored whole before the change is the same
content as its sparse form (no rewrite of every report after the upgrade). Pure functions, no store."""

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import bson

from shared.reports.documents import (
    COUNTERS,
    LAST_READINGS,
    Entry,
    daily_document,
    full_report,
    hourly_document,
    same_content,
    stored_entry,
)
from shared.reports.reading import report_view

HOUR = datetime(2027, 3, 10, 8, tzinfo=UTC)


def entry(bottle: int, *, heartbeats: int = 2, dose: bool = False) -> Entry:
    """Bottle `bottle`'s whole entry: `heartbeats` heartbeats, and an opened/closed dose if `dose`."""
    taken = int(dose)
    return {
        "bottle_id": f"bottle-{1_000_000 + bottle}",
        "medication": "Cordrazine",
        "opened": taken,
        "closed": taken,
        "doses": taken,
        "pills_taken": taken,
        "heartbeats": heartbeats,
        "last_number_of_pills": 29 if dose else None,
        "last_mass_of_contents": 14.5 if dose else None,
    }


def whole(document: Mapping[str, Any]) -> dict[str, Any]:
    """`document` as reports were stored before: every counter and reading, in the report and its entries."""
    return full_report(document)


def test_an_hour_of_heartbeats_only_stores_no_zero_counter_and_no_null_reading_at_the_top_or_in_an_entry():
    report = hourly_document("user-0001234", HOUR, [entry(0), entry(1), entry(2)], HOUR)

    assert {c for c in COUNTERS if c in report} == {"heartbeats"}
    assert report["heartbeats"] == 6
    for stored in report["bottles"]:
        assert stored == {"bottle_id": stored["bottle_id"], "medication": "Cordrazine", "heartbeats": 2}
    # The lever's arithmetic (docs/costs.md): 729 bytes whole, 386 sparse for three bottles' heartbeats.
    assert len(bson.encode(report)) <= 0.55 * len(bson.encode(whole(report)))


def test_an_entry_with_a_dose_keeps_every_counter_and_reading_it_has():
    report = hourly_document("user-1", HOUR, [entry(0, heartbeats=0, dose=True), entry(1)], HOUR)

    dosed, beating = report["bottles"]
    assert dosed == {k: v for k, v in entry(0, heartbeats=0, dose=True).items() if k != "heartbeats"}
    assert set(LAST_READINGS) <= set(dosed)
    assert "opened" not in beating
    assert (report["opened"], report["doses"], report["heartbeats"]) == (1, 1, 2)


def test_the_api_answers_every_counter_and_reading_of_a_sparse_report_in_order():
    report = hourly_document("user-1", HOUR, [entry(0)], HOUR)

    view = report_view(report)

    assert {c: view[c] for c in COUNTERS} == {"opened": 0, "closed": 0, "doses": 0, "pills_taken": 0, "heartbeats": 2}
    assert view["bottles"] == [entry(0)]
    assert list(view["bottles"][0]) == list(entry(0))


def test_a_day_sums_sparse_hours_and_whole_ones_alike():
    sparse_hours = [
        hourly_document("user-1", HOUR, [entry(0)], HOUR),
        hourly_document("user-1", HOUR.replace(hour=9), [entry(0, heartbeats=1, dose=True)], HOUR),
    ]
    whole_hours = [whole(h) for h in sparse_hours]

    day = daily_document("user-1", HOUR, sparse_hours)

    assert day == daily_document("user-1", HOUR, whole_hours)
    assert day is not None
    assert (day["opened"], day["heartbeats"]) == (1, 3)
    assert day["bottles"] == [stored_entry(entry(0, heartbeats=3, dose=True))]


def test_a_report_stored_whole_before_is_the_same_content_as_its_sparse_form_and_differs_from_another():
    report = hourly_document("user-1", HOUR, [entry(0), entry(1, dose=True)], HOUR)

    assert same_content(whole(report), report)
    assert same_content(report, whole(report))
    other = hourly_document("user-1", HOUR, [entry(0, heartbeats=3), entry(1, dose=True)], HOUR)
    assert not same_content(whole(report), other)
