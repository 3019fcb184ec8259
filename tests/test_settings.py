"""A bad app setting stops the app at start-up, naming the setting (never its value)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def start_app(**settings: str) -> subprocess.CompletedProcess[str]:
    """Import the function app as the Functions host's worker does at start-up, with these app settings."""
    env = {k: v for k, v in os.environ.items() if k.upper() not in settings} | settings
    return subprocess.run(
        [sys.executable, "-c", "import function_app"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("CHECK_BATCH_SIZE", "0", "CHECK_BATCH_SIZE: Input should be greater than or equal to 1"),
        ("CHANGE_SOURCE", "kafka", "CHANGE_SOURCE: Input should be 'change_stream' or 'polling'"),
        ("REQUEST_DEADLINE_SECONDS", "soon", "REQUEST_DEADLINE_SECONDS: Input should be a valid number"),
        ("REPORTS_LEASE_SECONDS", "50", "REPORTS_LEASE_SECONDS (50) must be longer than a worker's run"),
    ],
)
def test_a_bad_setting_fails_the_start_up_naming_it(name, value, message):
    started = start_app(**{name: value, "MONGODB_CONNECTION_STRING": "mongodb://user:s3cr3t@db.example/"})

    assert started.returncode != 0
    assert message in started.stderr
    assert "s3cr3t" not in started.stderr


def test_good_settings_start_without_touching_the_network():
    started = start_app(MONGODB_CONNECTION_STRING="mongodb://127.0.0.1:1/", CHECK_BATCH_SIZE="200")
    assert started.returncode == 0, started.stderr
