"""`./dev store`: a MongoDB-compatible server for `func start` and F5 (SecantusDB, GPL-2.0, development only) on
127.0.0.1, its collections and indexes set up as the app expects, its data kept under `--data-dir` between runs;
Ctrl-C stops it. `./dev local-settings` points local.settings.json at it."""

import argparse
import threading
from typing import Any

from pymongo import MongoClient

from shared.settings import get_settings
from shared.store.setup import ensure_store
from tools.arguments import int_between
from tools.local_store import make_data_dir, setting_defaults

DEFAULT_PORT = 27017


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./dev store", description=__doc__)
    parser.add_argument("--port", type=int_between(0, 65535), default=DEFAULT_PORT, help="0: any free port")
    parser.add_argument("--data-dir", default=".local/store", help="where the data is kept (default: .local/store)")
    args = parser.parse_args(argv)
    make_data_dir(args.data_dir)
    from secantus import SecantusDBServer

    with SecantusDBServer(host="127.0.0.1", port=args.port, storage_path=args.data_dir) as server:
        uri = f"{server.uri}{'&' if '?' in server.uri else '?'}directConnection=true"
        with setting_defaults(MONGODB_CONNECTION_STRING=uri), MongoClient[dict[str, Any]](uri, tz_aware=True) as client:
            ensure_store(client[get_settings().mongodb_database], get_settings(), on_cosmos=False)
        print(f"serving {uri} (data in {args.data_dir}); Ctrl-C stops", flush=True)
        threading.Event().wait()  # until Ctrl-C (run_command says so in one line)
    return 0
