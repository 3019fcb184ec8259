"""Azurite as a user starts it for `func start` and F5: the editor's task, the hint `./dev local-settings` prints
and docs/local-development.md give one command; run as the task runs it (a shell, in the workspace folder, on
Azurite's default ports), it serves the app's own queue and blob code on the pinned Storage SDKs, with the settings
`./dev local-settings` writes, and leaves nothing in the repository that git would show."""

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from azure.storage.queue import QueueClient

from shared.archive.current import get_archive
from shared.notifications.queue import get_sender
from shared.settings import get_settings
from tests import azurite
from tools import local_settings

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PORTS = (10000, 10001, 10002)  # blob, queue, table: what UseDevelopmentStorage=true points at
STARTUP_SECONDS = 30


def task_command() -> str:
    """The command of the editor's Azurite task."""
    tasks = json.loads((ROOT / ".vscode" / "tasks.json").read_text())["tasks"]
    [task] = [task for task in tasks if "azurite" in task["command"]]
    assert task["type"] == "shell"
    assert task.get("options", {}).get("cwd") is None  # run in the workspace folder: the repository
    command: str = task["command"]
    return command


def test_the_task_the_hint_and_the_docs_start_azurite_alike(tmp_path, capsys):
    assert local_settings.main(["--output", str(tmp_path / "local.settings.json")]) == 0
    hint = capsys.readouterr().out

    assert f"{task_command()} (another, in {ROOT})" in hint
    assert task_command() in (ROOT / "docs" / "local-development.md").read_text()


def accepts(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def git(workspace: Path, *argv: str) -> str:
    return subprocess.run(["git", *argv], cwd=workspace, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A repository with this one's .gitignore and its node_modules (a link: npx runs the pinned Azurite from it),
    where the task's command can write what it writes without touching this checkout."""
    folder = tmp_path / "workspace"
    folder.mkdir()
    shutil.copy2(ROOT / ".gitignore", folder / ".gitignore")
    (folder / "node_modules").symlink_to(ROOT / "node_modules")
    git(folder, "init", "--quiet")
    return folder


@contextmanager
def task_azurite(workspace: Path) -> Iterator[None]:
    """Azurite started by the task's command in `workspace`, as the editor runs a shell task, once its services
    listen; stopped as a closed terminal stops it."""
    log = workspace.parent / "azurite.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            task_command(), shell=True, cwd=workspace, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while not all(accepts(port) for port in DEFAULT_PORTS):
            assert process.poll() is None, f"Azurite exited with {process.returncode}: {log.read_text()}"
            assert time.monotonic() < deadline, f"Azurite did not listen within {STARTUP_SECONDS} s: {log.read_text()}"
            time.sleep(0.1)
        yield
    finally:
        os.killpg(process.pid, signal.SIGINT)  # the task's terminal closed: npx and Azurite with it
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.mark.azurite
def test_the_task_s_azurite_takes_a_notification_and_an_archive_file_and_leaves_git_clean(
    workspace, tmp_path, monkeypatch
):
    """F5 could not send a notification or write the archive: the task started an Azurite that refused the SDKs'
    API version ("The API version 2026-10-06 is not supported by Azurite"). And the Azurite of the hint
    `./dev local-settings` printed wrote five __azurite_db_*.json files into the repository."""
    reason = azurite.missing()
    if reason:
        pytest.skip(reason)
    busy = [port for port in DEFAULT_PORTS if accepts(port)]
    if busy:
        pytest.skip(f"ports {busy} are in use (an Azurite of your own?): the task's Azurite needs them")
    settings_file = tmp_path / "local.settings.json"
    assert local_settings.main(["--output", str(settings_file)]) == 0
    for name, value in json.loads(settings_file.read_text())["Values"].items():
        monkeypatch.setenv(name, value)  # as the host gives the worker its Values
    get_settings.cache_clear()
    settings = get_settings()
    before = git(workspace, "status", "--porcelain", "--untracked-files=all")

    with task_azurite(workspace):
        get_sender(settings)('{"notification_id": "bottle-0007|left_open|1"}')
        archive = get_archive(settings)
        assert archive is not None
        archive.write("actions/date=2026-03-28/part.parquet", b"rows")

        with QueueClient.from_connection_string(
            settings.storage_connection_string, settings.notifications_queue
        ) as queue:
            [message] = queue.receive_messages()
        assert base64.b64decode(message.content) == b'{"notification_id": "bottle-0007|left_open|1"}'
        stored = archive.read("actions/date=2026-03-28/part.parquet")
        assert stored is not None
        assert stored.data == b"rows"

    assert git(workspace, "status", "--porcelain", "--untracked-files=all") == before
    assert (workspace / ".azurite" / "__azurite_db_queue__.json").exists()  # its data is where --location says
