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

    Without a URI, an in-process SecantusDB serves it (in memory, or persisted under `data_dir`)."""
    with contextlib.ExitStack() as stack:
        if uri is None:
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
