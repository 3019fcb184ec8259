"""The process-wide database handle: one lazily created MongoClient, no network I/O at import."""

import threading
from collections.abc import Sequence
from typing import Any

from pymongo import MongoClient
from pymongo.database import Database

from shared.settings import Settings, get_settings

Document = dict[str, Any]

# Cosmos DB drops idle connections after about 4 minutes; close ours before it does.
MAX_IDLE_TIME_MS = 120_000

_lock = threading.Lock()
_client: MongoClient[Document] | None = None


class StoreNotConfigured(RuntimeError):
    """MONGODB_CONNECTION_STRING is missing."""


def create_client(
    uri: str, *, event_listeners: Sequence[Any] = (), settings: Settings | None = None
) -> MongoClient[Document]:
    """A client tuned for Cosmos DB for MongoDB (works on any MongoDB). Connects lazily.

    Every client of the app's data is made here, the local tools' too, so they run as the app does.
    `event_listeners`: pymongo command listeners (the cost tests and benchmarks count commands). The timeouts
    (STORE_*_TIMEOUT_MS of `settings`, by default the app's) bound each attempt, so an unreachable store fails
    fast instead of hanging for pymongo's default 30 s of server selection; the retry policy's deadline bounds
    the attempts together."""
    settings = settings or get_settings()
    return MongoClient(
        uri,
        tz_aware=True,
        maxIdleTimeMS=MAX_IDLE_TIME_MS,
        # Cosmos DB rejects retryable writes; our writes are idempotent and retried by us. (SecantusDB
        # accepts them, but scans every one it has recorded on each write, slowing several-fold in a long run.)
        retryWrites=False,
        appname="pillbottle-functions",
        connect=False,
        serverSelectionTimeoutMS=settings.store_server_selection_timeout_ms,
        connectTimeoutMS=settings.store_connect_timeout_ms,
        socketTimeoutMS=settings.store_socket_timeout_ms,
        event_listeners=list(event_listeners),
    )


def get_client() -> MongoClient[Document]:
    """The one MongoClient of this process, created on first use."""
    global _client  # noqa: PLW0603 - the process-wide singleton is the point
    if _client is None:
        with _lock:
            if _client is None:
                uri = get_settings().mongodb_connection_string
                if not uri:
                    raise StoreNotConfigured("MONGODB_CONNECTION_STRING is not set")
                _client = create_client(uri)
    return _client


def use_client(client: MongoClient[Document] | None) -> None:
    """Install a client (tests, the simulator, the local server); None forgets it."""
    global _client  # noqa: PLW0603
    with _lock:
        _client = client


def get_database() -> Database[Document]:
    """The app's database on the process-wide client."""
    return get_client()[get_settings().mongodb_database]
