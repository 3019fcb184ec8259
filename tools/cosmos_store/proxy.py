"""A Cosmos DB for MongoDB (RU) in front of any MongoDB-compatible server: a TCP proxy on 127.0.0.1 that
forwards the wire protocol to the backend (SecantusDB in the tests) and answers as Cosmos DB would where the
two differ. The app reaches it by its connection string (`proxy.uri`), so its own pymongo client and code run
unchanged. See docs/cosmos-store.md for what it models, and which module applies each rule.

    with SecantusDBServer(storage_path=":memory:") as backend, CosmosProxy(backend.uri) as cosmos:
        client = create_client(cosmos.uri)

This module is the server and the API tests use: threads, one accepting, one serving each client connection
(at most `max_connections`; more are refused), and the optional TTL sweeper; everything listens on loopback
only. What each request gets is router.py's."""

import logging
import socket
import threading
from collections.abc import Callable
from typing import Any

from tools.cosmos_store import charges, expiry, relay, wire
from tools.cosmos_store.indexes import IndexCatalog
from tools.cosmos_store.metering import Metered
from tools.cosmos_store.options import Options
from tools.cosmos_store.partitions import Merge, Partition, PartitionMaps, Split
from tools.cosmos_store.router import Router
from tools.cosmos_store.state import StoreState

__all__ = ["CosmosProxy", "Options"]
log = logging.getLogger(__name__)


class CosmosProxy:
    """The proxy: start()/stop() or a context manager; `uri` is what the app connects to."""

    def __init__(self, backend_uri: str, options: Options | None = None) -> None:
        self.options = options or Options()
        self._state = StoreState.open(backend_uri, self.options)
        self._backend_address = self._state.observer.address or _address_of(backend_uri)
        self._router = Router(self._state, lambda: self.address)
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._connections: set[relay.Connection] = set()
        self._threads: list[threading.Thread] = []
        self._slots = threading.BoundedSemaphore(self.options.max_connections)
        self._stopping = threading.Event()
        self.address: tuple[str, int] = ("127.0.0.1", 0)

    @property
    def partitions(self) -> PartitionMaps:
        return self._state.partitions

    @property
    def indexes(self) -> IndexCatalog:
        return self._state.indexes

    @property
    def metered(self) -> Metered:
        return self._state.metered

    # --- lifecycle ---

    @property
    def uri(self) -> str:
        return f"mongodb://{self.address[0]}:{self.address[1]}/"

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._connections)

    def start(self) -> "CosmosProxy":
        listener = socket.create_server(("127.0.0.1", 0))
        listener.settimeout(0.2)
        self._listener, self.address = listener, listener.getsockname()[:2]
        self._spawn(self._accept, "cosmos-proxy-accept")
        if self.options.ttl_sweep_seconds > 0:
            self._spawn(self._sweep, "cosmos-proxy-ttl")
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            relay.close(connection.client)
            relay.close(connection.backend)
        for thread in self._threads:
            thread.join(timeout=5)
        self._state.observer.close()

    def __enter__(self) -> "CosmosProxy":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn(self, target: Callable[..., None], name: str, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()]
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self._slots.acquire(blocking=False):
                log.warning("cosmos proxy: %d connections open; refusing another", self.options.max_connections)
                relay.close(client)
                continue
            self._spawn(self._serve, "cosmos-proxy-connection", client)

    def _serve(self, client: socket.socket) -> None:
        connection: relay.Connection | None = None
        try:
            client.settimeout(None)
            backend = socket.create_connection(self._backend_address)
            connection = relay.Connection(client, backend)
            with self._lock:
                self._connections.add(connection)
            while not self._stopping.is_set():
                request = wire.read_message(client)
                if request is None:
                    return
                self._router.handle(connection, request)
        except (OSError, ValueError) as error:
            if not self._stopping.is_set():
                log.debug("cosmos proxy: connection ended: %s", error)
        finally:
            if connection is not None:
                with self._lock:
                    self._connections.discard(connection)
                relay.close(connection.backend)
            relay.close(client)
            self._slots.release()

    def _sweep(self) -> None:
        while not self._stopping.wait(self.options.ttl_sweep_seconds):
            try:
                self.expire()
            except Exception:  # the sweeper must outlive a failed pass
                log.exception("cosmos proxy: TTL sweep failed")

    # --- the API tests use ---

    def split(self, database: str, collection: str, partition_id: int | None = None) -> list[Split]:
        """Split a physical partition now (its largest, unless named), as Cosmos DB does when one grows."""
        return self.partitions.split(database, collection, partition_id)

    def merge(self, database: str, collection: str, partition_ids: tuple[int, int] | None = None) -> Merge:
        """Merge two adjacent partitions now (the pair holding the least, unless named), as an operator's merge
        does (https://learn.microsoft.com/azure/cosmos-db/merge)."""
        return self.partitions.merge(database, collection, partition_ids)

    def partition_map(self, database: str, collection: str) -> list[Partition]:
        return list(self.partitions.collection(database, collection).partitions)

    def hourly_bill(self, database: str, collection: str) -> dict[int, float]:
        """Per hour of the proxy's clock, the RU/s autoscale bills the collection: the hour's peak second, and at
        least a tenth of its maximum when it has one (`autoscale_max_ru_per_second`)."""
        maximum = self.partitions.collection(database, collection).autoscale_max or 0.0
        with self._state.lock:
            peaks = dict(self.metered.hourly_peak_ru.get(f"{database}.{collection}", {}))
        return {hour: charges.billed_in_hour(peak, maximum) for hour, peak in peaks.items()}

    def expire(self) -> int:
        """Delete what TTL has expired by now (a document's `_ts` plus the collection's TTL, or its own `ttl`);
        the number deleted (expiry.py)."""
        return expiry.expire(self._state)


def _address_of(uri: str) -> tuple[str, int]:
    host = uri.split("://", 1)[1].split("/", 1)[0].split(",", maxsplit=1)[0]
    name, _, port = host.rpartition(":")
    return name, int(port)
