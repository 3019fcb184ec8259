"""The stored documents the code writes with a guard have one typed definition each, and mypy --strict (with the
project's configuration, as `./dev test` runs it) refuses a field that is not in it: a field renamed in its
definition fails every writer and reader that still names the old one. Each case type-checks a small module that
misspells one field (or names one check's marker field on the other check's document), and the same module spelled
right, which must pass."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# (what is imported, the misspelled use, the right one, what mypy says of the misspelling)
CASES = {
    "a notification read": (
        "from shared.notifications.documents import NotificationDocument",
        "def read(document: NotificationDocument) -> object:\n    return document['{field}']\n",
        ("feed_kye", "feed_key"),
        'TypedDict "NotificationDocument" has no key "feed_kye"',
    ),
    "a notification's guard": (
        "from shared.notifications.documents import NotificationFilter",
        "SELECTOR: NotificationFilter = {{'_id': 'b|silent|x', '{field}': None}}\n",
        ("resolved", "resolved_at"),
        'Extra key "resolved" for TypedDict "NotificationFilter"',
    ),
    "a notification's update": (
        "from datetime import UTC, datetime\nfrom shared.notifications.documents import NotificationUpdate",
        "UPDATE: NotificationUpdate = {{'$set': {{'{field}': datetime.now(UTC)}}}}\n",
        ("queued", "queued_at"),
        'Extra key "queued" for TypedDict "NotificationFields"',
    ),
    "a bottle": (
        "from shared.doses.bottle_document import BottleDocument",
        "def read(bottle: BottleDocument) -> object:\n    return bottle['{field}']\n",
        ("last_actoin", "last_action"),
        'TypedDict "BottleDocument" has no key "last_actoin"',
    ),
    "a heartbeat document": (
        "from shared.devices.heartbeat_document import HeartbeatDocument",
        "def read(beats: HeartbeatDocument) -> object:\n    return beats['{field}']\n",
        ("alive", "alive_at"),
        'TypedDict "HeartbeatDocument" has no key "alive"',
    ),
    "the left-open check's marker": (
        "from shared.doses.bottle_document import LeftOpenMarker",
        "def read(bottle: LeftOpenMarker) -> object:\n    return bottle['{field}']\n",
        ("open_episode_user", "open_episode_users"),
        'TypedDict "LeftOpenMarker" has no key "open_episode_user"',
    ),
    "a marker as a check names it": (
        "from shared.devices.heartbeat_document import HeartbeatDocument\n"
        "from shared.notifications.checks.rules import LEFT_OPEN, SILENT",
        "def read(beats: HeartbeatDocument) -> object:\n    return beats[{field}.marker]\n",
        ("LEFT_OPEN", "SILENT"),
        'TypedDict "HeartbeatDocument" has no key "open_episode"',
    ),
    "the silent check's marker": (
        "from datetime import UTC, datetime\nfrom shared.devices.heartbeat_document import HeartbeatUpdate",
        "UPDATE: HeartbeatUpdate = {{'$set': {{'{field}': datetime.now(UTC)}}}}\n",
        ("silent_episod", "silent_episode"),
        'Extra key "silent_episod" for TypedDict "HeartbeatDocument"',
    ),
    "the silent marker's guard": (
        "from shared.devices.heartbeat_document import HeartbeatFilter",
        "GUARD: HeartbeatFilter = {{'_id': 'b', '{field}': ['u']}}\n",
        ("silent_users", "silent_episode_users"),
        'Extra key "silent_users" for TypedDict "HeartbeatFilter"',
    ),
    "the late-dose check's marker": (
        "from shared.doses.bottle_document import LateMarker",
        "def read(bottle: LateMarker) -> object:\n    return bottle['{field}']\n",
        ("late_episodes", "late_episode"),
        'TypedDict "LateMarker" has no key "late_episodes"',
    ),
    "a lease": (
        "from shared.feeds.leases import LeaseDocument",
        "def read(lease: LeaseDocument) -> object:\n    return lease['{field}']\n",
        ("checkpoint", "checkpoint_time"),
        'TypedDict "LeaseDocument" has no key "checkpoint"',
    ),
    "the archive's catch-up lease": (
        "from shared.archive.catch_up import CatchUpLeaseDocument",
        "MARK: CatchUpLeaseDocument = {{'{field}': None}}\n",
        ("unreachable", "unreachable_at"),
        'Extra key "unreachable" for TypedDict "CatchUpLeaseDocument"',
    ),
    "an hourly pass's token": (
        "from datetime import UTC, datetime\nfrom shared.feeds.sweeps import PassToken",
        "TOKEN: PassToken = {{'{field}': datetime.now(UTC), 'last_pages': 3}}\n",
        ("last_begun", "last_began"),
        'Extra key "last_begun" for TypedDict "PassToken"',
    ),
    "the archive sweep's token": (
        "from shared.archive.actions import SweepToken",
        "def read(token: SweepToken) -> object:\n    return token['{field}']\n",
        ("chunk_start", "chunk_from"),
        'TypedDict "SweepToken" has no key "chunk_start"',
    ),
    "an hourly report": (
        "from shared.reports.documents import HourlyReport",
        "def read(report: HourlyReport) -> object:\n    return report['{field}']\n",
        ("updated", "updated_at"),
        'TypedDict "HourlyReport" has no key "updated"',
    ),
    "a daily report": (
        "from shared.reports.documents import DailyReport",
        "def read(report: DailyReport) -> object:\n    return report['{field}']\n",
        ("hour", "day"),
        'TypedDict "DailyReport" has no key "hour"',
    ),
    "a report's stored entry": (
        "from shared.reports.documents import StoredEntry",
        "ENTRY: StoredEntry = {{'bottle_id': 'bottle-1', '{field}': 3}}\n",
        ("heartbeat", "heartbeats"),
        'Extra key "heartbeat" for TypedDict "StoredEntry"',
    ),
}


def type_check(module: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "mypy", "--config-file", "pyproject.toml", "--no-error-summary", str(module)]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False, timeout=300)


@pytest.mark.parametrize(("imports", "use", "fields", "error"), CASES.values(), ids=CASES.keys())
def test_mypy_refuses_a_document_field_its_definition_does_not_have(
    tmp_path: Path, imports: str, use: str, fields: tuple[str, str], error: str
) -> None:
    wrong, right = fields
    misspelled, spelled = tmp_path / "misspelled.py", tmp_path / "spelled.py"
    misspelled.write_text(f"{imports}\n\n\n{use.format(field=wrong)}")
    spelled.write_text(f"{imports}\n\n\n{use.format(field=right)}")

    refused, passed = type_check(misspelled), type_check(spelled)

    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert error in refused.stdout
    assert passed.returncode == 0, passed.stdout + passed.stderr
