"""`python -m shared.reports.rebuild` as an operator runs it, on mongomock standing in for the store its --uri
names: what it rebuilds and says it did, and the one-line usage error (exit 2) for each way to call it wrong.
(tests/tools/test_command_line.py has what every command shares: an unusable store, invalid settings, documented
options.)"""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.reports import rebuild
from shared.settings import get_settings
from shared.store import client as store_client
from tests.api import SPEC, closed, heartbeat, iso, opened, post_events, provisioned
from tests.report_client import (
    aggregate,
    clear_reports,
    played_report_day,
    set_setting,
    stored_reports,
    use_change_source_of,
)

PROG = "python -m shared.reports.rebuild"
USER = SPEC["user_id"]
# A day whose hours are all in the past, its 08:00 to 11:00 within 48 hours, and the options of its range: made
# for each test (report_day below).
DAY = H8 = datetime.min.replace(tzinfo=UTC)
RANGE: list[str] = []


@pytest.fixture(autouse=True)
def report_day() -> None:
    """The day these tests report on and its hours, as this test starts (tests/report_client.py)."""
    global DAY, H8, RANGE  # noqa: PLW0603 - the tests read them as the module's constants
    DAY = played_report_day()
    H8 = DAY + timedelta(hours=8)
    RANGE = ["--from", iso(DAY), "--to", iso(DAY + timedelta(days=1))]


URI = ["--uri", "mongodb://store.invalid/"]


@pytest.fixture(autouse=True)
def store(mock_db: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """mock_db is the database the command opens (MONGODB_DATABASE names it) whatever --uri says."""
    set_setting(monkeypatch, "HEARTBEAT_WINDOW_HOURS", "48")
    use_change_source_of(mock_db, monkeypatch)
    monkeypatch.setattr(store_client, "create_client", lambda uri, **_: mock_db.client)  # as open_client calls it
    return mock_db


def usage_error(argv: list[str], capsys: Any) -> list[str]:
    """Run the command expecting a usage error: exit 2, no traceback, the usage then one error line; the lines."""
    with pytest.raises(SystemExit) as exit_:
        rebuild.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert lines[0].startswith(f"usage: {PROG} "), err
    return lines


def test_the_command_rebuilds_one_users_reports_and_says_what_it_read_and_wrote(mock_db, capsys):
    key = provisioned("bottle-1")
    events = [heartbeat(H8), opened(H8), closed(H8 + timedelta(hours=2), taken=2)]
    assert post_events("bottle-1", key, {"events": events}).status == 202
    other = provisioned("bottle-2", {**SPEC, "user_id": "other"})
    assert post_events("bottle-2", other, {"events": [heartbeat(H8), opened(H8)]}).status == 202
    aggregate()
    expected = {k: r for k, r in stored_reports(mock_db).items() if r["user_id"] == USER}
    clear_reports(mock_db)

    rebuild.main(["--user", USER, *RANGE, *URI])

    assert stored_reports(mock_db) == expected  # the user's hours and day, nobody else's
    assert len(expected) == 3
    assert capsys.readouterr().out == "read 3 source documents; 3 hourly and 1 daily report writes\n"


def test_without_a_user_or_all_it_is_a_usage_error_naming_both(capsys):
    lines = usage_error([*RANGE, *URI], capsys)

    assert lines[-1] == f"{PROG}: error: one of the arguments --user --all is required"


@pytest.mark.parametrize("missing", ["--from", "--to"])
def test_without_either_end_of_the_range_it_is_a_usage_error_naming_it(missing, capsys):
    argv = list(RANGE)
    at = argv.index(missing)
    del argv[at : at + 2]

    lines = usage_error(["--all", *argv, *URI], capsys)

    assert lines[-1] == f"{PROG}: error: the following arguments are required: {missing}"


@pytest.mark.parametrize("option", ["--from", "--to"])
def test_an_end_that_is_not_a_date_time_is_a_usage_error_naming_it_and_saying_what_is_wrong(option, capsys):
    argv = list(RANGE)
    argv[argv.index(option) + 1] = "2026-11-01T00:00:00"

    lines = usage_error(["--all", *argv, *URI], capsys)

    assert lines[-1] == f"{PROG}: error: {option}: '2026-11-01T00:00:00' has no UTC offset; add 'Z' or '+hh:mm'"


@pytest.mark.parametrize("before", [timedelta(0), timedelta(hours=1)], ids=["at-the-start", "an-hour-before"])
def test_a_range_that_does_not_end_after_it_starts_is_a_usage_error(before, mock_db, capsys):
    lines = usage_error(["--all", "--from", RANGE[1], "--to", iso(DAY - before), *URI], capsys)

    assert lines[-1] == f"{PROG}: error: --to must be later than --from"
    assert stored_reports(mock_db) == {}


def test_without_a_connection_string_it_is_a_usage_error_saying_where_to_give_one(monkeypatch, capsys):
    monkeypatch.delenv("MONGODB_CONNECTION_STRING", raising=False)
    get_settings.cache_clear()

    lines = usage_error(["--all", *RANGE], capsys)

    assert lines[-1] == f"{PROG}: error: no connection string: pass --uri or set MONGODB_CONNECTION_STRING"


def test_help_shows_the_examples_as_written(capsys):
    with pytest.raises(SystemExit) as exit_:
        rebuild.main(["--help"])

    assert exit_.value.code == 0
    shown = capsys.readouterr().out.splitlines()
    examples = [line for line in (rebuild.__doc__ or "").splitlines() if line.startswith(f"    {PROG} ")]
    assert len(examples) == 2
    assert all(line in shown for line in examples)
