"""The archive end to end: the report dispatcher and its workers, as the host runs them, archive every stored
event once and every bottle-hour the tally counted with its ring's slots, hour after hour, with late uploads, a
reassignment, partitions that change their layout, and a worker killed mid-run; on SecantusDB with the local
folder, and on mongomock with the blob container on Azurite (the same SDK the app uses in Azure)."""

import json
import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from shared.archive.blob import BlobArchive, container_client
from shared.archive.current import use_archive
from shared.archive.feeds import ACTIONS_ARCHIVE
from shared.archive.storage import Archive, FolderArchive
from shared.consumers.plugged import dispatch, partition_of, process_partition
from shared.feeds.partitions import Partition
from shared.reports.feeds import HEARTBEAT_TALLY
from shared.settings import Settings
from shared.store import schema
from tests import azurite
from tests.tally_fleet import CLOCK, DAY, HOUR, Fleet, opened
from tools.archive_truth import check_archive

# The tests play their instants from a fixed day: the clock runs from a week after it (tests/tally_fleet.py).
pytestmark = pytest.mark.own_clock(CLOCK)

MINUTE = timedelta(minutes=1)


def dispatch_and_work(db: Any, now: datetime, settings: Settings, *, kill: str | None = None) -> None:
    """One dispatch at `now` and a run of each work message it sent (`kill`: the feed whose message is lost,
    the next dispatch sends it again)."""
    messages: list[str] = []
    dispatch(db, now=now, settings=settings, send=messages.extend, on_cosmos=False)
    for body in messages:
        partition = partition_of(json.loads(body))
        if partition.feed.key == kill:
            continue
        process_partition(db, partition, now=now, settings=settings)


def a_day_of_trouble(db: Any, archive: Archive) -> tuple[datetime, datetime]:
    """Six bottles of three users through 12 hours: heartbeats and doses every 30 minutes, uploads hours late, a
    reassignment, REPORTS_PARTITIONS changed from 4 to 3, a work message of each kind lost; a dispatch every hour
    (as often as the archive's hours end: every one of them is swept and counted by a dispatch of its own, and a
    dispatch between two costs a round of every partition's work and shows nothing more). The sweep's position
    and the start of the hours every ring still holds."""
    use_archive(archive)
    rng = random.Random(29)
    settings = Settings(
        reports_partitions=4, reports_page_size=3, reports_tally_spread_minutes=0, change_source="polling"
    )
    fleet = Fleet(db, settings)
    for n in range(6):
        fleet.provision(f"b{n}", f"user-{n % 3}", DAY)
    start = DAY + 6 * HOUR
    for step in range(0, 12 * 2):
        now = start + step * 30 * MINUTE
        for n in range(6):
            if rng.random() < 0.6:
                fleet.beat(f"b{n}", now - rng.randrange(0, 5) * MINUTE)
            if rng.random() < 0.2:
                fleet.send(f"b{n}", opened(now - rng.randrange(0, 10) * MINUTE), now=now)
        if step == 10:  # uploads buffered for hours, and a reassignment
            fleet.beat("b1", now - 5 * HOUR, received=now)
            fleet.send("b2", opened(now - 7 * HOUR), now=now)
            fleet.provision("b3", "user-9", now)
        if step == 16:
            settings = settings.model_copy(update={"reports_partitions": 3})
        if step % 2:
            kill = {7: ACTIONS_ARCHIVE.key, 19: HEARTBEAT_TALLY.key}.get(step)
            dispatch_and_work(db, now + MINUTE, settings, kill=kill)
    lease = db[schema.LEASES].find_one({"_id": Partition(ACTIONS_ARCHIVE, 0, 1).lease_id})
    return lease["checkpoint_time"], start + 12 * HOUR - 20 * HOUR


def assert_archived_once(db: Any, archive: Archive) -> None:
    until, window_start = a_day_of_trouble(db, archive)
    tallied = min(
        lease["checkpoint_time"] for lease in db[schema.LEASES].find({"feed": "heartbeat_tally", "retired_at": None})
    )
    check = check_archive(db, archive, until=until, heartbeats=(max(window_start, DAY), tallied))
    assert check.ok, check.problems
    assert check.events > 10
    assert check.bottle_hours > 30


@pytest.mark.integration
def test_on_secantus_with_the_local_folder_every_event_and_counted_bottle_hour_is_archived_once(
    real_db: Any, tmp_path: Path
) -> None:
    assert_archived_once(real_db, FolderArchive(tmp_path / "archive"))


@pytest.mark.azurite
def test_on_azurite_s_blob_service_every_event_and_counted_bottle_hour_is_archived_once(
    mock_db: Any, azurite_blob_port: int
) -> None:
    settings = Settings(AzureWebJobsStorage=azurite.blob_connection_string(azurite_blob_port))
    assert_archived_once(mock_db, BlobArchive(container_client(settings)))
