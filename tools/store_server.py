"""`./dev store`: a MongoDB-compatible server for `func start` and F5 (SecantusDB, GPL-2.0, development only) on
127.0.0.1, its collections and indexes set up as the app expects, its data kept under `--data-dir` between runs;
Ctrl-C stops it. `./dev local-settings` points local.settings.json at it."""

import argparse
import contextlib
import errno
import io
import os
import sys
import time
from typing import Any

from shared.store.command_line import CommandFailed
from tools.arguments import int_between

DEFAULT_PORT = 27017
HOST = "127.0.0.1"


def cannot_listen(port: int, error: OSError) -> CommandFailed:
    """The one line for a port the server cannot have: what the system said, and what to do."""
    why = os.strerror(error.errno) if error.errno else str(error)
    if error.errno != errno.EADDRINUSE:
        return CommandFailed(f"cannot listen on {HOST}:{port}: {why} (pick another --port, 0 for any free one)")
    if port == DEFAULT_PORT:  # ./dev local-settings points local.settings.json here by default
        instead = "./dev store --port N and ./dev local-settings --mongodb-uri mongodb://127.0.0.1:N/"
    else:
        instead = "pick another --port, 0 for any free one"
    return CommandFailed(f"cannot listen on {HOST}:{port}: {why} (another server has it: stop it, or {instead})")


def cannot_open(data_dir: str, error: Exception) -> CommandFailed:
    """The one line for a data folder the store cannot open (another server holds it: WiredTiger's EBUSY)."""
    if "busy" in str(error).lower():
        return CommandFailed(
            f"--data-dir {data_dir} is in use by another running store: stop it, or pick another --data-dir"
        )
    return CommandFailed(f"--data-dir {data_dir}: the store cannot open it: {error}")


def open_store(port: int, data_dir: str) -> Any:
    """SecantusDBServer on `data_dir` (not listening yet), or CommandFailed in one line when its storage engine
    cannot open the folder. WiredTiger's Python binding writes the engine's own error to sys.stderr before it
    raises: held back while the folder opens, it is written out unless the one line says it instead."""
    from secantus import SecantusDBServer
    from wiredtiger import WiredTigerError  # type: ignore[import-untyped]  # SecantusDB's storage engine

    held = io.StringIO()
    refused: Exception | None = None
    with contextlib.redirect_stderr(held):
        try:
            server = SecantusDBServer(host=HOST, port=port, storage_path=data_dir)
        except WiredTigerError as error:
            refused = error
    if refused is not None:
        raise cannot_open(data_dir, refused)
    sys.stderr.write(held.getvalue())
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./dev store", description=__doc__)
    parser.add_argument("--port", type=int_between(0, 65535), default=DEFAULT_PORT, help="0: any free port")
    parser.add_argument("--data-dir", default=".local/store", help="where the data is kept (default: .local/store)")
    args = parser.parse_args(argv)
    from pymongo import MongoClient  # the store's libraries: not for --help

    from shared.settings import get_settings
    from shared.store.setup import ensure_store
    from tools.local_store import make_data_dir, setting_defaults

    make_data_dir(args.data_dir)
    server = open_store(args.port, args.data_dir)
    try:
        try:
            server.start()
        except OSError as error:  # a port in use, or one below 1024 without the right
            raise cannot_listen(args.port, error) from None
        uri = f"{server.uri}{'&' if '?' in server.uri else '?'}directConnection=true"
        with setting_defaults(MONGODB_CONNECTION_STRING=uri), MongoClient[dict[str, Any]](uri, tz_aware=True) as client:
            ensure_store(client[get_settings().mongodb_database], get_settings(), on_cosmos=False)
        print(f"serving {uri} (data in {args.data_dir}); Ctrl-C stops", flush=True)
        while True:  # until Ctrl-C (run_command says so in one line)
            # Woken each second: a Ctrl-C that lands just before an endless wait began would not end it.
            time.sleep(1)
    finally:
        server.stop()  # also when it never started: its storage is open from the start
    return 0
