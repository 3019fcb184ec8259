"""What every benchmark shares: an in-process SecantusDB, a command-counting client, and table output."""

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pymongo import MongoClient
from pymongo.database import Database

from shared.settings import Settings, get_settings
from shared.store import client as store
from shared.store.setup import ensure_store
from tools.command_tally import CommandTally

# How long the benchmarks' own clients wait for the store (a server, a connection, a reply): the most the app's
# settings allow (STORE_*_TIMEOUT_MS), not the app's defaults of a few seconds. On a loaded machine the
# in-process store can take longer than those over one command without any outage (a quick run once died after
# 5.5 minutes on "timed out"), and a benchmark has no device waiting for its answer.
GENEROUS_TIMEOUTS_MS = {
    "store_server_selection_timeout_ms": 60_000,
    "store_connect_timeout_ms": 60_000,
    "store_socket_timeout_ms": 300_000,
}


def bench_settings() -> Settings:
    """The app's settings with GENEROUS_TIMEOUTS_MS (validated: they stay within the settings' bounds)."""
    return Settings.model_validate({**get_settings().model_dump(), **GENEROUS_TIMEOUTS_MS})


def bench_client(uri: str, listeners: Sequence[Any] = ()) -> MongoClient[dict[str, Any]]:
    """A client of the app's (store.create_client) with GENEROUS_TIMEOUTS_MS, for every benchmark's store."""
    return store.create_client(uri, event_listeners=list(listeners), settings=bench_settings())


@contextlib.contextmanager
def installed_store(
    uri: str, database: str, settings: Settings | None = None, listeners: Sequence[Any] = ()
) -> Iterator[Database[Any]]:
    """A set-up database on the server at `uri` (its collections and indexes), installed as the app's store
    while the block runs, through a bench_client with these command listeners."""
    client = bench_client(uri, listeners)
    db = client[database]
    ensure_store(db, settings or get_settings(), on_cosmos=False)
    store.use_client(client)
    try:
        yield db
    finally:
        store.use_client(None)
        client.close()


@contextlib.contextmanager
def seeding_database(uri: str, database: str) -> Iterator[Database[Any]]:
    """The database at `uri` through a client of its own without the app's request timeouts, for writing a
    benchmark's fixtures (thousands of documents a command, which a loaded machine can take longer to store than
    the app's socket timeout allows a request), never for what is measured: no socket timeout at all, and a
    minute to find the server (GENEROUS_TIMEOUTS_MS)."""
    client: MongoClient[dict[str, Any]] = MongoClient(
        uri,
        tz_aware=True,
        retryWrites=False,
        serverSelectionTimeoutMS=GENEROUS_TIMEOUTS_MS["store_server_selection_timeout_ms"],
        connectTimeoutMS=GENEROUS_TIMEOUTS_MS["store_connect_timeout_ms"],
    )
    try:
        yield client[database]
    finally:
        client.close()


@contextlib.contextmanager
def secantus_server() -> Iterator[str]:
    """An in-process SecantusDB in memory, without expiry mid-run; its URI."""
    from secantus import SecantusDBServer

    with SecantusDBServer(storage_path=":memory:", ttl_sweep_seconds=0) as server:
        yield server.uri


@contextlib.contextmanager
def secantus_store(database: str = "bench") -> Iterator[tuple[Any, CommandTally]]:
    """A fresh, set-up database on an in-process SecantusDB, installed as the app's store."""
    tally = CommandTally()
    with secantus_server() as uri, installed_store(uri, database, listeners=[tally]) as db:
        yield db, tally


@dataclass
class Measurement:
    name: str
    units: int
    seconds: float
    commands: int
    cpu_seconds: float = 0.0  # the process's CPU time: with an in-process server, the app's and the server's

    @property
    def per_second(self) -> float:
        return self.units / self.seconds if self.seconds else float("inf")

    @property
    def commands_per_unit(self) -> float:
        return self.commands / self.units if self.units else 0.0

    @property
    def cpu_ms_per_unit(self) -> float:
        return 1000 * self.cpu_seconds / self.units if self.units else 0.0


def measure(name: str, units: int, tally: CommandTally, run: Callable[[], None]) -> Measurement:
    before = tally.count
    start, cpu = time.perf_counter(), time.process_time()
    run()
    return Measurement(name, units, time.perf_counter() - start, tally.count - before, time.process_time() - cpu)


@dataclass(frozen=True)
class Table:
    title: str
    header: list[str]
    rows: list[list[str]]

    def column(self, row: list[str], name: str) -> str:
        return str(row[self.header.index(name)])


# Every table printed in this process, in order: the suite reads its summary from them.
PRINTED: list[Table] = []


def print_table(title: str, rows: list[list[str]], header: list[str]) -> str:
    PRINTED.append(Table(title, list(header), [list(map(str, r)) for r in rows]))
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = [title, "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    text = "\n".join(lines)
    print(text)
    return text
