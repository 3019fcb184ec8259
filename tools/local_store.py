"""The store for local runs: any MongoDB by URI, or by default SecantusDB in-process (nothing to install)."""

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from pymongo import MongoClient
from pymongo.database import Database

from shared import store
from shared.settings import get_settings
from shared.store_setup import ensure_store


@contextlib.contextmanager
def local_store(
    uri: str | None = None, *, data_dir: str | None = None, listeners: list[Any] | None = None
) -> Iterator[Database[Any]]:
    """A set-up database installed as the app's store for the duration of the block.

    Without a URI, an in-process SecantusDB serves it (in memory, or persisted under `data_dir`)."""
    with contextlib.ExitStack() as stack:
        if uri is None:
            from secantus import SecantusDBServer

            if data_dir:
                os.makedirs(data_dir, exist_ok=True)
            server = stack.enter_context(SecantusDBServer(storage_path=data_dir or ":memory:"))
            uri = server.uri
        client: MongoClient[Any] = MongoClient(uri, tz_aware=True, event_listeners=listeners or [])
        stack.callback(client.close)
        db = client[get_settings().mongodb_database]
        ensure_store(db, get_settings(), on_cosmos=False)
        store.use_client(client)
        stack.callback(store.use_client, None)
        yield db
