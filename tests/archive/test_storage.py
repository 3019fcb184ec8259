"""The archive's seam (shared/archive/storage.py) and its files (layout, parquet): a local folder and a blob
container on Azurite keep the same contract (replace, guarded writes by version, listing by prefix), a file's name
says what it holds, the Parquet files have the columns and types docs/archive.md gives, and an HTTP cold start
never loads pyarrow.

Blob conditional writes (If-Match, If-None-Match: *) as "Specifying conditional headers for Blob service
operations" describes them: https://learn.microsoft.com/rest/api/storageservices/specifying-conditional-headers-for-blob-service-operations
"""

import itertools
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from shared.archive import layout, parquet
from shared.archive.blob import BlobArchive, container_client
from shared.archive.current import archive_of, get_archive
from shared.archive.storage import Archive, ArchiveUnavailable, FolderArchive
from shared.settings import InvalidSettings, Settings, get_settings
from tests import azurite

ROOT = Path(__file__).resolve().parents[2]
_containers = itertools.count()


@pytest.fixture(params=["folder", pytest.param("blob", marks=pytest.mark.azurite)])
def archive(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Archive]:
    """An empty archive: a local folder, and a fresh container on Azurite (created by the first write)."""
    if request.param == "folder":
        yield FolderArchive(tmp_path / "archive")
        return
    port = request.getfixturevalue("azurite_blob_port")
    settings = Settings(
        AzureWebJobsStorage=azurite.blob_connection_string(port), ARCHIVE_CONTAINER=f"archive-{next(_containers)}"
    )
    yield BlobArchive(container_client(settings))


def test_a_file_written_is_read_back_with_a_version_and_listed_under_its_folder(archive: Archive) -> None:
    assert archive.read("actions/date=2026-03-29/a.parquet") is None
    assert archive.names("actions/") == []
    archive.write("actions/date=2026-03-29/a.parquet", b"one")
    archive.write("actions/date=2026-03-30/b.parquet", b"two")
    archive.write("heartbeats/date=2026-03-29/c.parquet", b"three")
    stored = archive.read("actions/date=2026-03-29/a.parquet")
    assert stored is not None
    assert stored.data == b"one"
    assert stored.version
    assert archive.names("actions/") == ["actions/date=2026-03-29/a.parquet", "actions/date=2026-03-30/b.parquet"]
    assert archive.names("actions/date=2026-03-30/") == ["actions/date=2026-03-30/b.parquet"]
    archive.write("actions/date=2026-03-29/a.parquet", b"again")  # a repeated write replaces it
    again = archive.read("actions/date=2026-03-29/a.parquet")
    assert again is not None
    assert again.data == b"again"


def test_a_guarded_write_lands_only_on_the_version_it_read(archive: Archive) -> None:
    name = "heartbeats/date=2026-03-29/hour-07-users-0001.parquet"
    assert archive.write_guarded(name, b"first", None) is not None  # none yet: created
    assert archive.write_guarded(name, b"second", None) is None  # one exists now: refused
    first = archive.read(name)
    assert first is not None
    assert first.data == b"first"
    merged = archive.write_guarded(name, b"merged", first.version)
    assert merged is not None
    assert archive.write_guarded(name, b"stale", first.version) is None  # another writer moved it on: refused
    now = archive.read(name)
    assert now is not None
    assert now.data == b"merged"
    assert now.version == merged  # what the write answered is what a read finds


def test_of_two_writers_guarded_by_the_same_version_one_lands(archive: Archive) -> None:
    name = "heartbeats/date=2026-03-29/hour-08-users-0002.parquet"
    archive.write(name, b"base")
    base = archive.read(name)
    assert base is not None
    results: list[bool] = []
    threads = [
        threading.Thread(target=lambda d=data: results.append(archive.write_guarded(name, d, base.version) is not None))
        for data in (b"left", b"right")
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [False, True]
    landed = archive.read(name)
    assert landed is not None
    assert landed.data in (b"left", b"right")


def test_a_folder_refuses_names_outside_it_and_hides_its_temporary_files(tmp_path: Path) -> None:
    folder = FolderArchive(tmp_path / "archive")
    for bad in ("../escape.parquet", "actions//a.parquet", "actions/.hidden", ""):
        with pytest.raises(ValueError, match="not an archive file name"):
            folder.write(bad, b"x")
    folder.write("actions/date=2026-03-29/a.parquet", b"x")
    (tmp_path / "archive" / "actions" / "date=2026-03-29" / ".a.parquet.tmp").write_bytes(b"half")
    assert folder.names("") == ["actions/date=2026-03-29/a.parquet"]


def test_a_folder_that_cannot_be_written_is_unavailable_naming_it(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"not a folder")
    folder = FolderArchive(tmp_path / "file")
    with pytest.raises(ArchiveUnavailable, match=r"folder .*file"):
        folder.write("actions/date=2026-03-29/a.parquet", b"x")


def test_an_unreachable_blob_service_is_unavailable_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    port = azurite.free_port()  # nothing listens there
    settings = Settings(AzureWebJobsStorage=azurite.blob_connection_string(port))
    monkeypatch.setattr("shared.archive.blob.RETRIES", 0)  # the SDK's retries would only make it slower
    store = BlobArchive(container_client(settings))
    with pytest.raises(ArchiveUnavailable, match="container archive: cannot"):
        store.read("actions/date=2026-03-29/a.parquet")


# --- names ---------------------------------------------------------------------------------------------------


def test_file_names_say_what_each_file_holds_and_parse_back() -> None:
    day, received = datetime(2026, 3, 28, tzinfo=UTC), datetime(2026, 3, 29, 7, 42, tzinfo=UTC)
    name = layout.action_file(day, received, 3)
    assert name == "actions/date=2026-03-28/received-2026-03-29T07-0003.parquet"
    assert layout.parse_action_file(name) == (day, datetime(2026, 3, 29, 7, tzinfo=UTC), 3)
    hour = datetime(2026, 3, 29, 23, 10, tzinfo=UTC)
    name = layout.heartbeat_file(hour, 1023)
    assert name == "heartbeats/date=2026-03-29/hour-23-users-1023.parquet"
    assert layout.parse_heartbeat_file(name) == (datetime(2026, 3, 29, 23, tzinfo=UTC), 1023)
    assert layout.parse_action_file(layout.heartbeat_file(hour, 1)) is None
    assert layout.parse_heartbeat_file("heartbeats/date=2026-03-29/other.parquet") is None


# --- Parquet -------------------------------------------------------------------------------------------------


def test_the_parquet_files_have_the_documented_columns_and_types() -> None:
    assert parquet.ACTION_SCHEMA.names == [
        "bottle_id",
        "user_id",
        "medication",
        "time",
        "action",
        "mass_of_contents",
        "number_of_pills",
        "pills_taken",
        "received_at",
    ]
    assert parquet.HEARTBEAT_SCHEMA.names == ["bottle_id", "user_id", "hour", "slots"]
    assert str(parquet.ACTION_SCHEMA.field("time").type) == "timestamp[ms, tz=UTC]"
    assert parquet.ACTION_SCHEMA.field("pills_taken").nullable
    assert str(parquet.HEARTBEAT_SCHEMA.field("slots").type) == "list<minute: int8 not null>"


def test_the_same_rows_make_the_same_file_and_read_back_as_written() -> None:
    at = datetime(2026, 3, 29, 7, 0, 10, 250000, tzinfo=UTC)
    opened = {
        "bottle_id": "bottle-1",
        "user_id": "willcross1024",
        "medication": "Cordrazine",
        "time": at,
        "action": "opened",
        "mass_of_contents": 15.2,
        "number_of_pills": 30,
        "received_at": at,
    }
    closed = {**opened, "action": "closed", "number_of_pills": 29, "pills_taken": 1}
    data = parquet.encode_actions([opened, closed])
    assert data == parquet.encode_actions([dict(opened), dict(closed)])
    rows = parquet.decode(data)
    assert rows == [{**opened, "pills_taken": None}, closed]


def test_an_http_cold_start_does_not_import_pyarrow_or_the_blob_sdk() -> None:
    code = "import sys, function_app; print(sorted(m for m in ('pyarrow', 'azure.storage.blob') if m in sys.modules))"
    # What the start-up requires (functions/start_up.py): a database and the host's storage, neither of them reached.
    env = {
        **os.environ,
        "MONGODB_CONNECTION_STRING": "mongodb://h/",
        "AzureWebJobsStorage": "UseDevelopmentStorage=true",
    }
    found = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]", found.stderr


# --- settings ------------------------------------------------------------------------------------------------


def test_the_archive_settings_default_to_the_documented_ones_and_a_bad_container_name_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = Settings()
    assert (settings.archive_container, settings.heartbeat_archive_days, settings.archive_dir) == ("archive", 14, "")
    with monkeypatch.context() as bad:
        bad.setenv("ARCHIVE_CONTAINER", "Archive_2026")
        bad.setenv("HEARTBEAT_ARCHIVE_DAYS", "0")
        get_settings.cache_clear()
        with pytest.raises(InvalidSettings) as refused:
            get_settings()
    get_settings.cache_clear()
    with pytest.raises(ValueError, match="no two hyphens"):
        Settings(ARCHIVE_CONTAINER="pill--archive")
    assert "ARCHIVE_CONTAINER" in str(refused.value)
    assert "HEARTBEAT_ARCHIVE_DAYS" in str(refused.value)


def test_the_archive_is_the_folder_else_the_host_s_storage_else_none(tmp_path: Path) -> None:
    assert archive_of(Settings()) is None
    folder = archive_of(Settings(ARCHIVE_DIR=str(tmp_path), AzureWebJobsStorage="UseDevelopmentStorage=true"))
    assert isinstance(folder, FolderArchive)
    assert folder.root == tmp_path
    blob = archive_of(Settings(AzureWebJobsStorage__blobServiceUri="https://stexample.blob.core.windows.net"))
    assert isinstance(blob, BlobArchive)
    assert blob.where == "container archive"
    assert get_archive(Settings()) is None
