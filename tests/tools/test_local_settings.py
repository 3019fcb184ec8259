"""`./dev local-settings` and `./dev store`: what `func start` and F5 in VS Code need on a fresh clone (the
settings file for the local stores, and a MongoDB-compatible server to point it at), and the editor tasks that
run them, as the official Functions templates ship them."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from shared.settings import Settings
from shared.store import schema
from shared.store.command_line import CommandFailed
from tests.ctrl_c import ctrl_c_default_action
from tools import local_settings

ROOT = Path(__file__).resolve().parents[2]


def test_the_written_settings_are_the_example_s_pointed_at_the_local_store_and_azurite(tmp_path, capsys):
    target = tmp_path / "local.settings.json"
    assert local_settings.main(["--output", str(target)]) == 0
    written = json.loads(target.read_text())
    example = json.loads((ROOT / "local.settings.json.example").read_text())
    assert set(written["Values"]) == set(example["Values"])
    assert written["Values"]["MONGODB_CONNECTION_STRING"] == "mongodb://127.0.0.1:27017/?directConnection=true"
    assert written["Values"]["AzureWebJobsStorage"] == "UseDevelopmentStorage=true"
    Settings.model_validate({k.lower(): v for k, v in written["Values"].items() if k.lower() in Settings.model_fields})
    assert "./dev store" in capsys.readouterr().out


def test_an_existing_file_is_kept_unless_forced_and_a_bad_uri_is_refused(tmp_path):
    target = tmp_path / "local.settings.json"
    target.write_text("{}")
    with pytest.raises(CommandFailed, match="exists: --force replaces it"):
        local_settings.main(["--output", str(target)])
    assert local_settings.main(["--output", str(target), "--keep"]) == 0
    assert target.read_text() == "{}"
    with pytest.raises(CommandFailed, match="--mongodb-uri"):
        local_settings.main(["--output", str(target), "--force", "--mongodb-uri", "notauri"])
    assert local_settings.main(["--output", str(target), "--force", "--mongodb-uri", "mongodb://db:27017/"]) == 0
    assert json.loads(target.read_text())["Values"]["MONGODB_CONNECTION_STRING"] == "mongodb://db:27017/"


def stopped_within(server: subprocess.Popen[str], seconds: float) -> str:
    """The server's stderr once it has exited; a failure with every thread's stack if it is still running after
    `seconds` (SIGABRT makes Python's faulthandler write them)."""
    try:
        return server.communicate(timeout=seconds)[1]
    except subprocess.TimeoutExpired:
        server.send_signal(signal.SIGABRT)
        _, errors = server.communicate(timeout=30)
        pytest.fail(f"./dev store did not stop within {seconds} s of Ctrl-C; where it was:\n{errors[-8000:]}")


def test_the_local_store_serves_the_app_s_collections_and_stops_on_ctrl_c(tmp_path):
    environ = {k: v for k, v in os.environ.items() if k != "MONGODB_CONNECTION_STRING"}
    environ["PYTHONFAULTHANDLER"] = "1"  # a stop that hangs is shown with where each thread was
    with ctrl_c_default_action():  # as from a terminal, even if the suite was started with Ctrl-C ignored
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tools.command",
                "./dev store",
                "tools.store_server",
                "--port",
                "0",
                "--data-dir",
                str(tmp_path / "store"),
            ],
            cwd=ROOT,
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith("serving mongodb://127.0.0.1:"), line
        uri = line.split()[1]
        with MongoClient[dict[str, Any]](uri, serverSelectionTimeoutMS=10_000) as client:
            names = set(client[Settings.model_fields["mongodb_database"].default].list_collection_names())
        assert {schema.BOTTLES, schema.BOTTLE_HEARTBEATS, schema.NOTIFICATIONS} <= names
    finally:
        server.send_signal(signal.SIGINT)
        errors = stopped_within(server, seconds=60)  # its stop takes ~2.5 s
    assert server.returncode == 130
    assert errors.strip().endswith("./dev store: interrupted")


def test_the_editor_s_start_task_writes_the_settings_before_the_host_starts():
    tasks = {task["label"]: task for task in json.loads((ROOT / ".vscode" / "tasks.json").read_text())["tasks"]}
    start = tasks["func: host start"]
    assert start["command"] == "host start"
    assert start["dependsOn"] == "local settings (functions)"
    assert tasks["local settings (functions)"]["command"] == "./dev local-settings --keep"
    launch = json.loads((ROOT / ".vscode" / "launch.json").read_text())["configurations"][0]
    assert (launch["type"], launch["preLaunchTask"]) == ("debugpy", "func: host start")
    assert ".vscode" in (ROOT / ".funcignore").read_text().split()
