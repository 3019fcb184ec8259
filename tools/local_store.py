"""The store for local runs: any MongoDB by URI, or by default SecantusDB in-process (nothing to install)."""

import contextlib
import multiprocessing
import os
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

from pymongo import MongoClient
from pymongo.database import Database

from shared import store
from shared.settings import get_settings
from shared.store_setup import ensure_store


@contextlib.contextmanager
def setting_defaults(**values: str) -> Iterator[None]:
    """App settings for the duration of the block, unless the environment already sets them."""
    added = [name for name in values if name not in os.environ]
    for name in added:
        os.environ[name] = values[name]
    get_settings.cache_clear()
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)
        get_settings.cache_clear()


def _serve(connection: Connection, storage_path: str) -> None:
    from secantus import SecantusDBServer

    with SecantusDBServer(storage_path=storage_path) as server:
        connection.send(server.uri)
        connection.recv()  # until the parent says stop


@contextlib.contextmanager
def secantus_process(storage_path: str = ":memory:") -> Iterator[str]:
    """SecantusDB in a child process (its own interpreter, so the app and the database do not share a
    GIL: on two cores both run at once); yields its URI."""
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=_serve, args=(child, storage_path), daemon=True)
    process.start()
    try:
        yield str(parent.recv())
    finally:
        parent.send("stop")
        process.join(timeout=10)
        if process.is_alive():
            process.terminate()


@contextlib.contextmanager
def local_store(
    uri: str | None = None, *, data_dir: str | None = None, listeners: list[Any] | None = None
) -> Iterator[Database[Any]]:
    """A set-up database installed as the app's store for the duration of the block.

    Without a URI, SecantusDB serves it (in memory, or persisted under `data_dir`), and the report
    consumer reads it with the polling source unless CHANGE_SOURCE says otherwise: the embedded store's
    change streams work, but each empty poll waits on the server, which a local run does not need."""
    with contextlib.ExitStack() as stack:
        if uri is None:
            stack.enter_context(setting_defaults(CHANGE_SOURCE="polling"))
            if data_dir:
                os.makedirs(data_dir, exist_ok=True)
            uri = stack.enter_context(secantus_process(data_dir or ":memory:"))
        client: MongoClient[Any] = MongoClient(uri, tz_aware=True, event_listeners=listeners or [])
        stack.callback(client.close)
        db = client[get_settings().mongodb_database]
        ensure_store(db, get_settings(), on_cosmos=False)
        store.use_client(client)
        stack.callback(store.use_client, None)
        yield db
