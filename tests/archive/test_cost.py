"""What the archive costs at the design scale (tools/costs/billing.py, its own section): the sweep's request
units by the model's rules at the design's rates, the heartbeats at none, files and transactions from the archive's
layout, storage from bytes per row that its own Parquet files measure; and docs/costs.md shows that bill."""

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks import design_scale
from shared.archive import actions, parquet
from shared.settings import Settings, get_settings
from tools.costs.billing import ArchiveScale, archive_bill, archive_markdown
from tools.costs.request_units import FANOUT_RU

ROOT = Path(__file__).resolve().parents[2]


def test_the_archive_s_scale_is_the_design_s_and_the_app_s_settings() -> None:
    scale, settings = ArchiveScale(), Settings()
    assert scale.events_per_second == design_scale.OPENED_PER_SECOND + design_scale.CLOSED_PER_SECOND
    assert scale.bottles == design_scale.BOTTLES
    assert scale.tally_partitions == design_scale.REPORTS_PARTITIONS
    assert scale.chunk_rows == actions.CHUNK_ROWS
    assert scale.page_size == settings.archive_page_size
    assert scale.spread_minutes == settings.reports_tally_spread_minutes
    assert scale.heartbeat_days == settings.heartbeat_archive_days


def test_the_sweep_bills_each_event_s_read_and_its_pages_fan_out_at_its_paced_peak() -> None:
    """A document a query returns costs its point read (1 RU under 1 KB); a page reaches all 82 physical partitions;
    paced over REPORTS_TALLY_SPREAD_MINUTES of the hour (60 by default: the whole hour), the hour bills 60 / that
    of the average. The heartbeats add nothing."""
    bill = archive_bill()
    average = 1_400 * 1.0 + 1_400 / 5_000 * 82 * FANOUT_RU
    assert round(bill.sweep_ru_average, 6) == round(average, 6)
    peak = 60 / get_settings().reports_tally_spread_minutes
    assert round(bill.sweep_ru_billed, 6) == round(average * peak, 6)
    assert round(bill.sweep_dollars_month) == round(average * peak / 100 * 0.012 * 730)
    assert bill.heartbeat_merges_hour == 1024 + 64 * 53  # each bucket-hour once, and once more per run's end
    assert bill.heartbeat_merges_hour_most == bill.heartbeat_merges_hour + 1024 * 28


def test_the_bytes_per_row_are_what_the_archive_s_files_measure() -> None:
    """Rows of the design's sizes (17-character bottle ids, 13-character user ids), in a file as the app writes it."""
    rng = random.Random(29)
    hour = datetime(2026, 3, 29, 7, tzinfo=UTC)
    events: list[dict[str, Any]] = []
    for n in range(20_000):
        at = hour + timedelta(milliseconds=rng.randrange(3_600_000))
        events.append(
            {
                "bottle_id": f"bottle-{rng.randrange(30_000_000):010d}",
                "user_id": f"user-{rng.randrange(10_000_000):08d}",
                "medication": rng.choice(["Cordrazine", "Metformin", "Lisinopril", "Atorvastatin"]),
                "time": at - timedelta(seconds=rng.randrange(60)),
                "action": "closed" if n % 2 else "opened",
                "mass_of_contents": round(rng.uniform(5, 20), 2),
                "number_of_pills": rng.randrange(90),
                "pills_taken": rng.randrange(1, 3) if n % 2 else None,
                "received_at": at,
            }
        )
    events.sort(key=lambda row: row["received_at"])
    hours = sorted(
        (f"bottle-{rng.randrange(30_000_000):010d}", f"user-{rng.randrange(10_000_000):08d}") for _ in range(20_000)
    )
    bottle_hours = [{"bottle_id": b, "user_id": u, "hour": hour, "slots": [5, 35]} for b, u in hours]
    scale = ArchiveScale()
    per_event = len(parquet.encode_actions(events)) / len(events)
    per_bottle_hour = len(parquet.encode_heartbeats(bottle_hours)) / len(bottle_hours)
    assert abs(per_event - scale.event_row_bytes) / scale.event_row_bytes < 0.2, per_event
    assert abs(per_bottle_hour - scale.bottle_hour_row_bytes) / scale.bottle_hour_row_bytes < 0.2, per_bottle_hour


def test_the_costs_page_shows_the_archive_s_bill_as_the_model_computes_it() -> None:
    assert archive_markdown(archive_bill()) in (ROOT / "docs" / "costs.md").read_text()
