"""The store for local runs: any MongoDB by URI, or by default SecantusDB in-process (nothing to install)."""

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

from pymongo.database import Database

from shared.settings import get_settings
from shared.store import client as store
from shared.store.command_line import CommandFailed, open_client, store_errors
from shared.store.setup import ensure_store


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


# Ctrl-C reaches every process of the terminal's foreground group: the child leaves it to its parent, which
# ends it by closing its stdin (and says so in one line).
_SERVER = """
import signal
import sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
from secantus import SecantusDBServer

with SecantusDBServer(storage_path=sys.argv[1], ttl_sweep_seconds=float(sys.argv[2])) as server:
    print(server.uri, flush=True)
    sys.stdin.read()  # until the parent closes it
"""


@contextlib.contextmanager
def secantus_process(storage_path: str = ":memory:", *, expire: bool = True) -> Iterator[str]:
    """SecantusDB in a child process (its own interpreter, so the app and the database do not share a
    GIL: on two cores both run at once); yields its URI. `expire`: its TTL indexes delete expired documents
    every minute, by the real clock (off for a simulated clock, whose documents would all look long past)."""
    command = [sys.executable, "-c", _SERVER, storage_path, "60" if expire else "0"]
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdin is not None
    assert child.stdout is not None
    try:
        uri = child.stdout.readline().strip()
        if not uri:
            raise CommandFailed(f"the embedded store (SecantusDB at {storage_path}) did not start: its error is above")
        yield uri
    finally:
        child.stdin.close()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        child.stdout.close()


@contextlib.contextmanager
def local_store(
    uri: str | None = None,
    *,
    data_dir: str | None = None,
    listeners: list[Any] | None = None,
    expire: bool = True,
    on_cosmos: bool = False,
    source: str = "--mongodb-uri",
) -> Iterator[Database[Any]]:
    """A set-up database installed as the app's store for the duration of the block.

    Without a URI, SecantusDB serves it (in memory, or persisted under `data_dir`), and unless the
    environment says otherwise the report consumer reads it with the polling source (the embedded store's
    change streams work, but each empty poll waits on the server, which a local run does not need) with a
    10-second overlap: one process on one clock has no skew between instances to cover, and its writes
    commit within milliseconds of their receive time. `expire`: see secantus_process. `on_cosmos`: set the store
    up as on Cosmos DB (its `customAction` collections, `_ts` TTL), as the Cosmos-faithful store requires. A store
    that cannot be used is a CommandFailed naming `source`, the option the URI came from."""
    with contextlib.ExitStack() as stack:
        if uri is None:
            source = "the embedded store"
            stack.enter_context(setting_defaults(CHANGE_SOURCE="polling", REPORTS_POLL_OVERLAP_SECONDS="10"))
            if data_dir:
                make_data_dir(data_dir)
            uri = stack.enter_context(secantus_process(data_dir or ":memory:", expire=expire))
        client = open_client(uri, source, event_listeners=listeners or [])
        stack.callback(client.close)
        stack.enter_context(store_errors(source))
        db = client[get_settings().mongodb_database]
        ensure_store(db, get_settings(), on_cosmos=on_cosmos)
        store.use_client(client)
        stack.callback(store.use_client, None)
        yield db


def make_data_dir(path: str) -> None:
    if os.path.exists(path) and not os.path.isdir(path):
        raise CommandFailed(f"--data-dir {path}: not a directory")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as error:
        raise CommandFailed(f"--data-dir {path}: {error.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise CommandFailed(f"--data-dir {path}: not writable")
