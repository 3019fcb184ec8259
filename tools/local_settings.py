"""`./dev local-settings`: write `local.settings.json`, the settings `func start` (Core Tools) and F5 in VS Code
give the app, from `local.settings.json.example`, pointed at the local stores: the MongoDB that `./dev store`
serves (or `--mongodb-uri`) and Azurite for the queues (`UseDevelopmentStorage=true`). An existing file is kept
unless `--force` (`--keep`: keep it without a word, as the editor's start-up task does); the connection string is
never printed."""

import argparse
import json
from pathlib import Path
from typing import Any

from shared.store.command_line import CommandFailed
from tools.store_server import DEFAULT_PORT

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "local.settings.json.example"
TARGET = ROOT / "local.settings.json"
LOCAL_STORE_URI = f"mongodb://127.0.0.1:{DEFAULT_PORT}/?directConnection=true"
# Azurite for func start and F5, as .vscode/tasks.json starts it (tests/tools/test_local_azurite.py runs it):
# - --skipApiVersionCheck: the pinned Storage SDKs (requirements.txt) name a newer API version (x-ms-version
#   2026-10-06) than Azurite knows (3.35, package.json's, up to 2025-11-05), and Azurite refuses such a request
#   ("The API version ... is not supported by Azurite") unless told to skip the check (its `--help`: "Skip the
#   request API version check, request with all Api versions will be allowed"); the operations the app calls (send
#   a message, create a queue or a container, put, get and list blobs) are old ones that Azurite serves as ever;
# - --location .azurite: its data in the repository's .azurite/ (git-ignored); without it Azurite writes five
#   __azurite_db_*.json files and two folders into the directory it was started in.
AZURITE_COMMAND = "npx azurite --silent --disableTelemetry --skipApiVersionCheck --location .azurite"


def local_settings(mongodb_uri: str) -> dict[str, Any]:
    """The example's settings with the store's connection string and Azurite's storage."""
    settings: dict[str, Any] = json.loads(EXAMPLE.read_text())
    values = settings["Values"]
    values["MONGODB_CONNECTION_STRING"] = mongodb_uri
    values["AzureWebJobsStorage"] = "UseDevelopmentStorage=true"
    return settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./dev local-settings", description=__doc__)
    parser.add_argument("--mongodb-uri", default=LOCAL_STORE_URI, help=f"the store (default: {LOCAL_STORE_URI})")
    parser.add_argument("--output", type=Path, default=TARGET, help="where to write (default: local.settings.json)")
    existing = parser.add_mutually_exclusive_group()
    existing.add_argument("--force", action="store_true", help="replace an existing file")
    existing.add_argument("--keep", action="store_true", help="leave an existing file as it is, quietly")
    args = parser.parse_args(argv)
    from shared.settings import connection_string_problem  # pymongo and pydantic: not for --help

    problem = connection_string_problem(args.mongodb_uri)
    if problem is not None:
        raise CommandFailed(f"--mongodb-uri: {problem}")
    if args.output.exists() and not args.force:
        if args.keep:
            return 0
        raise CommandFailed(f"{args.output} exists: --force replaces it, --keep leaves it")
    args.output.write_text(json.dumps(local_settings(args.mongodb_uri), indent=2) + "\n")
    print(f"wrote {args.output}: the store is {'./dev store' if args.mongodb_uri == LOCAL_STORE_URI else 'yours'}")
    print(f"next: ./dev store (one terminal), {AZURITE_COMMAND} (another, in {ROOT}), then func start or F5")
    return 0
