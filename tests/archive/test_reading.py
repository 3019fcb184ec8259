"""Reading the archive back: the DuckDB queries of docs/archive.md, run as they are written there over a local
folder the app's own code wrote, answer what the source holds; `./dev archive` prints a bottle's dose history over a
range of dates, says clearly when a range has nothing archived yet, and refuses a bad range by name."""

import re
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest

from shared.archive.storage import FolderArchive
from shared.settings import Settings
from shared.store import schema
from tests.archive.sweeps import Sweeper, closed, opened
from tests.tally_fleet import CLOCK, DAY, HOUR, Fleet
from tests.tally_runner import TallyPartition
from tools import archive_history

# The tests play their instants from a fixed day: the clock runs from a week after it (tests/tally_fleet.py).
pytestmark = pytest.mark.own_clock(CLOCK)

ROOT = Path(__file__).resolve().parents[2]
MINUTE = timedelta(minutes=1)
DAY_LONG = timedelta(days=1)
BOTTLE = "bottle-0007"  # the bottle the documented queries ask for


def documented_queries() -> list[str]:
    """The ```sql blocks of docs/archive.md that read the local folder."""
    text = (ROOT / "docs" / "archive.md").read_text()
    return [block for block in re.findall(r"```sql\n(.*?)```", text, re.DOTALL) if ".local/archive" in block]


@pytest.fixture
def archived(mock_db: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Two bottles' doses and heartbeats on 28 and 29 March 2026 (one dose uploaded a day late), archived by the
    sweep and the tally into .local/archive under the test's working directory."""
    monkeypatch.chdir(tmp_path)
    archive = FolderArchive(Path(".local/archive"))
    settings = Settings()
    fleet = Fleet(mock_db, settings)
    fleet.partition = TallyPartition(mock_db, settings, archive)
    day = DAY  # the app refuses events older than 30 days: the fleet plays a week ago, then the rows are moved
    for bottle_id in (BOTTLE, "bottle-0008"):
        fleet.provision(bottle_id, "user-001", day)
    for n, bottle_id in enumerate((BOTTLE, BOTTLE, "bottle-0008")):
        at = day + (8 + n) * HOUR
        fleet.send(bottle_id, opened(at), closed(at + MINUTE, taken=n + 1), now=at + MINUTE)
        fleet.beat(bottle_id, at + 2 * MINUTE)
    late = day + 20 * HOUR
    fleet.send(BOTTLE, opened(late), closed(late + MINUTE, taken=2), now=late + 26 * HOUR)  # uploaded a day late
    fleet.beat(BOTTLE, day + 30 * HOUR)
    end = day + 2 * DAY_LONG + HOUR
    Sweeper(mock_db, settings, archive).run(end)
    fleet.tally(end)
    return mock_db, archive, day


def test_the_documented_duckdb_queries_answer_what_the_source_holds(archived: Any) -> None:
    db, _, day = archived
    doses_query, heartbeats_query = documented_queries()
    # The documented dates, moved to the days the fixture played.
    played = (day.strftime("%Y-%m-%d"), (day + DAY_LONG).strftime("%Y-%m-%d"))
    doses_query = doses_query.replace("2026-03-28", played[0]).replace("2026-03-29", played[1])

    rows = duckdb.execute(doses_query).fetchall()

    found = db[schema.BOTTLE_ACTIONS].find({"bottle_id": BOTTLE})
    stored = sorted(found, key=lambda a: (a["time"], a["action"] == "opened"))
    assert [(r[0], r[1], r[2]) for r in rows] == [
        (a["time"].astimezone(UTC), a["action"], a.get("pills_taken")) for a in stored
    ]
    assert len(rows) == 6
    heartbeats = duckdb.execute(heartbeats_query).fetchall()
    assert [(str(date), count, hours) for date, count, hours in heartbeats] == [
        (played[0], 2, 2),
        (played[1], 1, 1),
    ]


def test_dev_archive_prints_a_bottle_s_doses_over_a_range_of_dates(
    archived: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    _, _, day = archived
    status = archive_history.main([BOTTLE, f"{day:%Y-%m-%d}", f"{day + DAY_LONG:%Y-%m-%d}"])

    out = capsys.readouterr().out
    assert status == 0
    assert f"{BOTTLE}: dose history from {day:%Y-%m-%d} to {day + DAY_LONG:%Y-%m-%d} (UTC), 6 events" in out
    assert out.count(" closed ") == 3
    assert "doses: 3, pills taken: 5" in out
    assert "bottle-0008" not in out


def test_dev_archive_says_so_for_a_range_with_nothing_archived_and_for_a_bottle_with_no_event(
    archived: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    _, _, day = archived
    later = day + 10 * DAY_LONG
    assert archive_history.main([BOTTLE, f"{later:%Y-%m-%d}"]) == 1
    error = capsys.readouterr().err
    assert f"nothing is archived for {later:%Y-%m-%d} in the folder .local/archive" in error
    assert "within about two hours" in error

    assert archive_history.main(["bottle-0099", f"{day:%Y-%m-%d}"]) == 0
    assert "bottle-0099: no opened/closed event archived" in capsys.readouterr().out


def test_dev_archive_refuses_a_range_that_ends_before_it_starts_and_a_folder_that_is_not_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as refused:
        archive_history.main([BOTTLE, "2026-03-29", "2026-03-28"])
    assert refused.value.code == 2
    assert "TO (2026-03-28) is before FROM (2026-03-29)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        archive_history.main([BOTTLE, "2026-3-29"])
    assert "'2026-3-29' is not a date YYYY-MM-DD" in capsys.readouterr().err
    assert archive_history.main([BOTTLE, "2026-03-29", "--dir", str(tmp_path / "none")]) == 1
    assert "no archive folder" in capsys.readouterr().err


def test_dev_serve_archives_into_the_folder_chosen_else_beside_its_data_else_the_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def folder(chosen: str | None, data_dir: str | None) -> str | None:
        with archive_history.archive_setting(chosen, data_dir):
            return Settings().archive_dir

    assert folder(None, None) == ".local/archive"
    assert folder(None, str(tmp_path)) == str(tmp_path / "archive")
    assert folder(str(tmp_path / "mine"), str(tmp_path)) == str(tmp_path / "mine")
    monkeypatch.setenv("ARCHIVE_DIR", "/from/the/environment")
    assert folder(None, None) == "/from/the/environment"
    assert folder(str(tmp_path / "mine"), None) == str(tmp_path / "mine")
    assert Settings().archive_dir == "/from/the/environment"
