"""`./dev local-settings`: write `local.settings.json`, the settings `func start` (Core Tools) and F5 in VS Code
give the app, from `local.settings.json.example`, pointed at the local stores: the MongoDB that `./dev store`
serves (or `--mongodb-uri`) and Azurite for the queues (`UseDevelopmentStorage=true`). An existing file is kept
unless `--force` (`--keep`: keep it without a word, as the editor's start-up task does); the connection string is
never printed."""

import argparse
import json
from pathlib import Path
from typing import Any

from shared.settings import connection_string_problem
from shared.store.command_line import CommandFailed
from tools.store_server import DEFAULT_PORT

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "local.settings.json.example"
TARGET = ROOT / "local.settings.json"
LOCAL_STORE_URI = f"mongodb://127.0.0.1:{DEFAULT_PORT}/?directConnection=true"


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
    problem = connection_string_problem(args.mongodb_uri)
    if problem is not None:
        raise CommandFailed(f"--mongodb-uri: {problem}")
    if args.output.exists() and not args.force:
        if args.keep:
            return 0
        raise CommandFailed(f"{args.output} exists: --force replaces it, --keep leaves it")
    args.output.write_text(json.dumps(local_settings(args.mongodb_uri), indent=2) + "\n")
    print(f"wrote {args.output}: the store is {'./dev store' if args.mongodb_uri == LOCAL_STORE_URI else 'yours'}")
    print("next: ./dev store (one terminal), npx azurite --silent --disableTelemetry (another), then func start or F5")
    return 0
