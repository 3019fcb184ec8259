"""What the app's start-up checks beyond the settings class (functions/start_up.py): a database, a client pymongo
makes of its connection string, the host's storage for the queue and the archive, an ARCHIVE_DIR it can write.
Under the Functions host (a process that imports function_app.py) all of it; under the local host (tools/host/,
which installs its own store, queues and archive) only what is set."""

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from functions import start_up
from functions.start_up import start_up_problems
from shared.settings import Settings, get_settings
from shared.store import client
from tests.functions.test_settings import REQUIRED, SECRET, start_app

ROOT = Path(__file__).resolve().parents[2]


def settings(**values: str) -> Settings:
    """Settings with these values (by field name or the host's alias), as the start-up reads them."""
    return Settings(**values)  # pydantic-settings takes the names (or the host's aliases) as keyword arguments


def deployed(**values: str) -> Settings:
    """What a deployment sets (a database and the host's storage), with these values."""
    return settings(**(REQUIRED | values))


# --- the database --------------------------------------------------------------------------------------------------


def test_an_empty_connection_string_stops_the_host_s_start_naming_it():
    """Before, the app started without one: every request answered 503 and the checks' timers ran anyway."""
    started = start_app(MONGODB_CONNECTION_STRING="")

    assert started.returncode != 0
    assert "invalid app settings: MONGODB_CONNECTION_STRING: is empty: set the connection string" in started.stderr


def test_the_local_host_needs_no_connection_string_its_caller_installs_the_store():
    assert start_up_problems(settings(AzureWebJobsStorage="UseDevelopmentStorage=true"), local_host=True) == []
    assert start_up_problems(settings(AzureWebJobsStorage="UseDevelopmentStorage=true"), local_host=False) == [
        "MONGODB_CONNECTION_STRING: is empty: set the connection string of the MongoDB or Cosmos DB for MongoDB "
        "account (without it every request would answer 503 and no check could run)"
    ]


@pytest.mark.parametrize(
    ("uri", "words"),
    [
        ("mongodb://h/?authMechanism=GSSAPI", "GSSAPI requires a username"),
        (f"mongodb://acct:{SECRET}@h/?authMechanism=MONGODB-OIDC", "password is not supported by MONGODB-OIDC"),
        (f"mongodb://acct:{SECRET}@h/?tls=true&tlsCAFile={ROOT / 'host.json'}", "no certificate"),
    ],
    ids=["GSSAPI without a user", "OIDC with a password", "a CA file that holds no certificate"],
)
@pytest.mark.parametrize("local_host", [False, True])
def test_a_connection_string_pymongo_parses_but_makes_no_client_of_stops_the_start_up(uri, words, local_host):
    """pymongo checks these only as it makes the client, at the first request: each was a failed request."""
    [problem] = start_up_problems(deployed(MONGODB_CONNECTION_STRING=uri), local_host=local_host)

    assert problem.startswith("MONGODB_CONNECTION_STRING: pymongo cannot make a client of it: ")
    assert words in problem
    assert SECRET not in problem
    assert "s3cr3t" not in problem


def test_the_host_s_start_fails_on_a_connection_string_pymongo_makes_no_client_of():
    started = start_app(MONGODB_CONNECTION_STRING=f"mongodb://acct:{SECRET}@h/?authMechanism=MONGODB-OIDC")

    assert started.returncode != 0
    assert "MONGODB_CONNECTION_STRING: pymongo cannot make a client of it: " in started.stderr
    assert "s3cr3t" not in started.stderr


def test_the_host_s_start_makes_the_process_s_client_once_which_the_first_request_uses(monkeypatch):
    """Made to be checked, the client is kept: its TLS set-up (about 0.3 s) is not paid twice in a cold start."""
    monkeypatch.setattr(start_up, "_local_host", False)
    for name, value in (REQUIRED | {"MONGODB_CONNECTION_STRING": "mongodb://127.0.0.1:1/?tls=true"}).items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    made: list[object] = []
    real = client.create_client

    def counted(*args: Any, **kwargs: Any) -> Any:
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(client, "create_client", counted)

    start_up.check_start_up()

    assert client.get_client() is made[0]
    assert len(made) == 1
    made[0].close()


# --- the host's storage: the queue and the archive -----------------------------------------------------------------

NO_QUEUE = (
    "AzureWebJobsStorage: neither it nor AzureWebJobsStorage__queueServiceUri is set: the checks would send no "
    "notification (set the storage connection string, or the queue endpoint in Azure)"
)
NO_ARCHIVE = (
    "AzureWebJobsStorage__blobServiceUri: not set, nor AzureWebJobsStorage or ARCHIVE_DIR: nothing would be "
    "archived, and opened/closed events would be gone after ACTIONS_RETENTION_DAYS"
)
QUEUE_URI = "https://acct.queue.core.windows.net"
BLOB_URI = "https://acct.blob.core.windows.net"


@pytest.mark.parametrize(
    ("storage", "expected"),
    [
        ({}, [NO_QUEUE, NO_ARCHIVE]),
        ({"AzureWebJobsStorage__queueServiceUri": QUEUE_URI}, [NO_ARCHIVE]),
        ({"AzureWebJobsStorage__blobServiceUri": BLOB_URI}, [NO_QUEUE]),
        ({"AzureWebJobsStorage__queueServiceUri": QUEUE_URI, "AzureWebJobsStorage__blobServiceUri": BLOB_URI}, []),
        ({"AzureWebJobsStorage": "UseDevelopmentStorage=true"}, []),
    ],
    ids=["none", "the queue endpoint only", "the blob endpoint only", "both endpoints (infra/)", "a string"],
)
def test_the_host_s_start_needs_a_way_to_the_notifications_queue_and_to_the_archive(storage, expected):
    """An app with no queue storage failed every notification's send (only a log said so); one with no archive
    kept opened/closed events only ACTIONS_RETENTION_DAYS, though they are to be kept for good."""
    values = {"MONGODB_CONNECTION_STRING": "mongodb://127.0.0.1:1/", **storage}

    assert start_up_problems(settings(**values), local_host=False) == expected
    assert start_up_problems(settings(**values), local_host=True) == []


def test_an_archive_folder_stands_for_the_blob_endpoint(tmp_path):
    values = {"AzureWebJobsStorage__queueServiceUri": QUEUE_URI, "ARCHIVE_DIR": str(tmp_path)}

    assert start_up_problems(settings(MONGODB_CONNECTION_STRING="mongodb://h/", **values), local_host=False) == []


def test_the_host_s_start_without_queue_storage_fails_naming_it():
    started = start_app(AzureWebJobsStorage="")

    assert started.returncode != 0
    assert f"invalid app settings: {NO_QUEUE}; {NO_ARCHIVE}" in started.stderr


# --- ARCHIVE_DIR -------------------------------------------------------------------------------------------------


def archive_dir_problems(folder: object) -> list[str]:
    return start_up_problems(settings(ARCHIVE_DIR=str(folder)), local_host=True)


def test_an_archive_dir_that_is_a_file_stops_the_start_up_naming_it(tmp_path):
    (tmp_path / "archive").write_text("not a folder")

    assert archive_dir_problems(tmp_path / "archive") == [
        f"ARCHIVE_DIR: {tmp_path / 'archive'} is a file, not a folder"
    ]
    assert archive_dir_problems(tmp_path / "archive" / "below") == [
        f"ARCHIVE_DIR: cannot make the folder {tmp_path / 'archive' / 'below'}: Not a directory"
    ]


def test_an_archive_dir_no_file_can_be_written_in_stops_the_start_up_naming_it():
    """sysfs takes no new file, whoever asks (root too, which file modes do not stop)."""
    assert archive_dir_problems("/sys") == ["ARCHIVE_DIR: cannot write in the folder /sys: Permission denied"]


def test_an_archive_dir_not_made_yet_is_made_and_left_empty(tmp_path):
    folder = tmp_path / "data" / "archive"

    assert archive_dir_problems(folder) == []
    assert folder.is_dir()
    assert list(folder.iterdir()) == []


def test_the_host_s_start_fails_on_an_archive_dir_that_is_a_file(tmp_path):
    (tmp_path / "archive").write_text("")

    started = start_app(ARCHIVE_DIR=str(tmp_path / "archive"))

    assert started.returncode != 0
    assert f"invalid app settings: ARCHIVE_DIR: {tmp_path / 'archive'} is a file, not a folder" in started.stderr


def test_dev_serve_with_an_archive_dir_that_is_a_file_says_so_in_one_line_and_exits_2(tmp_path):
    (tmp_path / "archive").write_text("")
    env = {k: v for k, v in os.environ.items() if k != "ARCHIVE_DIR"}
    served = subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.command",
            "./dev serve",
            "tools.serve",
            "--port",
            "0",
            "--archive-dir",
            str(tmp_path / "archive"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )

    assert served.returncode == 2, served.stderr
    assert "Traceback" not in served.stderr
    last = served.stderr.strip().splitlines()[-1]
    assert last.startswith("./dev serve: error: ")
    assert f"invalid app settings: ARCHIVE_DIR: {tmp_path / 'archive'} is a file, not a folder" in last
