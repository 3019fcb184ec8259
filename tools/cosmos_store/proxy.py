"""A Cosmos DB for MongoDB (RU) in front of any MongoDB-compatible server: a TCP proxy on 127.0.0.1 that
forwards the wire protocol to the backend (SecantusDB in the tests) and answers as Cosmos DB would where the
two differ. The app reaches it by its connection string (`proxy.uri`), so its own pymongo client and code run
unchanged. See docs/cosmos-store.md for what it models and what it does not.

    with SecantusDBServer(storage_path=":memory:") as backend, CosmosProxy(backend.uri) as cosmos:
        client = create_client(cosmos.uri)

Threads: one accepts, one serves each client connection (at most `max_connections`; more are refused), and the
optional TTL sweeper. Everything listens on loopback only."""

import contextlib
import hashlib
import itertools
import logging
import math
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import bson
from bson.int64 import Int64
from bson.timestamp import Timestamp
from pymongo import MongoClient

from shared.settings import Settings
from shared.store.schema import collection_specs
from tools.cosmos_store import charges, features, rules, streams, wire
from tools.cosmos_store.indexes import BAD_VALUE, IndexCatalog, ttl_problem
from tools.cosmos_store.partitions import (
    TOP,
    Collection,
    Merge,
    Partition,
    PartitionMaps,
    Split,
    parse_bound,
    range_bound,
)

log = logging.getLogger(__name__)

THROTTLED = 16500
EXCEEDED_TIME_LIMIT = 50
NAMESPACE_EXISTS = 48
INVALID_RESUME_TOKEN = 260
CHANGE_STREAM_FATAL = 280
INTERNAL_ERROR = 1
HELLO = {"hello", "ismaster", "isMaster"}
Document = dict[str, Any]


@dataclass
class Options:
    """The knobs: `partition_bytes` stands for 50 GB, `partition_ru_per_second` for 10,000 RU/s (both scaled
    down); `index_delay_seconds` is how long an index transformation takes; `clock` is the proxy's time (the
    throughput's seconds, documents' `_ts`, index readiness); `seed` orders the tokens of
    GetChangeStreamTokens (None: a different order each time), unless `shuffle_tokens` is off.
    `logical_partition_bytes` stands for a logical partition's 20 GB (None: no cap); `server_side_retry` is the
    account capability (16500 retried inside the server for up to `server_retry_seconds` of the proxy's clock,
    waiting with `sleep`, then code 50); `incomplete_during_index_drops`: a filter on a path whose index is
    being dropped misses what the removal has reached; `autoscale_max_ru_per_second` (scaled as
    `partition_ru_per_second`) gives every collection an autoscale maximum, raised by the storage floor;
    `large_documents` is the account capability EnableMongo16MBDocumentSupport (documents up to 16 MB, not 2 MB)."""

    partition_bytes: int = 1_000_000
    partition_ru_per_second: float = 10_000.0
    initial_partitions: int = 1
    auto_split: bool = True
    index_delay_seconds: float = 0.0
    max_connections: int = 64
    ttl_sweep_seconds: float = 0.0  # 0: expire only when asked (`expire()`)
    seed: int | None = None
    shuffle_tokens: bool = True  # False: partition order, to tell a test's other failures from token order's
    max_wire_version: int | None = None  # what hello reports (MongoDB's numbering: 4.2 is 8); None: the backend's
    clock: Callable[[], float] = time.monotonic
    logical_partition_bytes: int | None = None
    server_side_retry: bool = False
    server_retry_seconds: float = 60.0
    sleep: Callable[[float], None] = time.sleep  # waits `seconds` of the proxy's clock (server-side retry)
    incomplete_during_index_drops: bool = True
    autoscale_max_ru_per_second: float | None = None
    large_documents: bool = False


@dataclass
class RequestStatistics:
    command: str
    charge: float
    duration_ms: float

    def reply(self) -> Document:
        """As getLastRequestStatistics answers: "the name of the last operation executed, its request charge,
        and its duration" (https://learn.microsoft.com/azure/cosmos-db/mongodb/find-request-unit-charge)."""
        return {
            "CommandName": self.command,
            "RequestCharge": self.charge,
            "RequestDurationInMilliSeconds": round(self.duration_ms, 3),
            "ActivityId": str(uuid.uuid4()),
            "ok": 1.0,
        }


@dataclass(eq=False)
class _Connection:
    client: socket.socket
    backend: socket.socket
    last: RequestStatistics | None = None


@dataclass
class _Stream:
    """A change stream cursor the proxy reshapes: its collection, the feed range it reads, and its last token."""

    collection: Collection
    low: int
    high: int
    partition_id: int | None  # None: the whole collection
    token: Document  # the batch token last handed out
    rid: str


@dataclass
class Metered:
    """What the proxy has charged and refused, for a run's summary."""

    request_units: dict[str, float] = field(default_factory=dict)  # per "db.collection"
    throttled: int = 0
    retried_in_server: int = 0  # operations server-side retry delayed, then served
    timed_out: int = 0  # operations server-side retry gave up on (code 50)
    # per "db.collection", per hour of the proxy's clock (its seconds // 3600): the most RU charged in one second
    hourly_peak_ru: dict[str, dict[int, float]] = field(default_factory=dict)
    _second: dict[str, tuple[int, float]] = field(default_factory=dict, repr=False)

    def add(self, collection: str, charge: float, now: float) -> None:
        """Count a charge: the collection's total and its second, and the hour's peak second."""
        self.request_units[collection] = self.request_units.get(collection, 0.0) + charge
        second, spent = self._second.get(collection, (-1, 0.0))
        spent = spent + charge if second == math.floor(now) else charge
        self._second[collection] = (math.floor(now), spent)
        hours = self.hourly_peak_ru.setdefault(collection, {})
        hour = math.floor(now) // 3600
        hours[hour] = max(hours.get(hour, 0.0), spent)

    def peak_ru_per_second(self, collection: str) -> float:
        """The collection's highest hourly peak: what autoscale's busiest hour bills."""
        return max(self.hourly_peak_ru.get(collection, {}).values(), default=0.0)


class CosmosProxy:
    """The proxy: start()/stop() or a context manager; `uri` is what the app connects to."""

    def __init__(self, backend_uri: str, options: Options | None = None) -> None:
        self.options = options or Options()
        self._backend_uri = backend_uri
        self._observer: MongoClient[Document] = MongoClient(backend_uri, directConnection=True)
        host, port = self._observer.address or _address_of(backend_uri)
        self._backend_address = (host, port)
        self._shard_keys: dict[str, str | None] = {}
        self._schema_keys = {spec.name: spec.shard_key for spec in collection_specs(Settings())}
        self.partitions = PartitionMaps(
            limit_bytes=self.options.partition_bytes,
            ru_per_second=self.options.partition_ru_per_second,
            initial_partitions=self.options.initial_partitions,
            auto_split=self.options.auto_split,
            shard_key_of=self._shard_key_of,
            clock=self.options.clock,
            logical_limit_bytes=self.options.logical_partition_bytes,
            autoscale_max=self.options.autoscale_max_ru_per_second,
        )
        self.indexes = IndexCatalog(self._list_indexes, self.options.clock, self.options.index_delay_seconds)
        self.metered = Metered()
        self._random = random.Random(self.options.seed)
        self._streams: dict[int, _Stream] = {}
        self._cursors: dict[int, list[Partition]] = {}
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._connections: set[_Connection] = set()
        self._threads: list[threading.Thread] = []
        self._slots = threading.BoundedSemaphore(self.options.max_connections)
        self._stopping = threading.Event()
        self._request_ids = itertools.count(1)
        self.address: tuple[str, int] = ("127.0.0.1", 0)

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
            _close(connection.client)
            _close(connection.backend)
        for thread in self._threads:
            thread.join(timeout=5)
        self._observer.close()

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
                _close(client)
                continue
            self._spawn(self._serve, "cosmos-proxy-connection", client)

    def _serve(self, client: socket.socket) -> None:
        connection: _Connection | None = None
        try:
            client.settimeout(None)
            backend = socket.create_connection(self._backend_address)
            connection = _Connection(client, backend)
            with self._lock:
                self._connections.add(connection)
            while not self._stopping.is_set():
                request = wire.read_message(client)
                if request is None:
                    return
                self._handle(connection, request)
        except (OSError, ValueError) as error:
            if not self._stopping.is_set():
                log.debug("cosmos proxy: connection ended: %s", error)
        finally:
            if connection is not None:
                with self._lock:
                    self._connections.discard(connection)
                _close(connection.backend)
            _close(client)
            self._slots.release()

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
        with self._lock:
            peaks = dict(self.metered.hourly_peak_ru.get(f"{database}.{collection}", {}))
        return {hour: charges.billed_in_hour(peak, maximum) for hour, peak in peaks.items()}

    def expire(self) -> int:
        """Delete what TTL has expired by now (a document's `_ts` plus the collection's TTL, or its own `ttl`);
        the number deleted. Cosmos DB does this in the background with spare throughput."""
        deleted = 0
        for collection in self.partitions.collections():
            database, name = collection.name.split(".", 1)
            ttl = self.indexes.ttl_seconds(database, name)
            if ttl is None:
                continue
            now = self.options.clock()
            expired = [
                key
                for key, stored in list(collection.documents.items())
                if (stored.ttl if stored.ttl is not None else ttl) >= 0
                and stored.written_at + (stored.ttl if stored.ttl is not None else ttl) <= now
            ]
            for key in expired:
                document_id = _id_of(key)
                self._observer[database][name].delete_one({"_id": document_id})
                self.partitions.record(collection, document_id, None)
            deleted += len(expired)
        return deleted

    def _sweep(self) -> None:
        while not self._stopping.wait(self.options.ttl_sweep_seconds):
            try:
                self.expire()
            except Exception:  # the sweeper must outlive a failed pass
                log.exception("cosmos proxy: TTL sweep failed")

    # --- dispatch ---

    def _handle(self, connection: _Connection, request: wire.Message) -> None:
        if request.op_code == wire.OP_QUERY:
            query = wire.decode_op_query(request.body)
            hello = query.collection.endswith(".$cmd") and next(iter(query.query), "") in HELLO
            self._forward(connection, request, rewrite=self._hello_reply if hello else None)
            return
        if request.op_code != wire.OP_MSG:
            self._forward(connection, request)
            return
        message = wire.decode_op_msg(request.body)
        name = message.name
        if name in HELLO:
            self._forward(connection, request, rewrite=self._hello_reply)
            return
        if name == "getLastRequestStatistics":
            last = connection.last or RequestStatistics("", 0.0, 0.0)
            self._answer(connection, request, last.reply())
            return
        started = time.perf_counter()
        command = message.merged()
        database = str(command.get("$db", "admin"))
        try:
            outcome = self._command(connection, request, message, command, database)
        except (OSError, ValueError):
            raise
        except Exception as error:  # a bug of the proxy's: the app sees a failed command, not a dropped connection
            log.exception("cosmos proxy: %s failed", name)
            outcome = 0.0, wire.error_document(INTERNAL_ERROR, f"cosmos proxy: {name} failed: {error!r}")
        if outcome is not None:
            charge, reply = outcome
            connection.last = RequestStatistics(name, charge, (time.perf_counter() - started) * 1000)
            self._answer(connection, request, reply)

    def _command(
        self, connection: _Connection, request: wire.Message, message: wire.OpMsg, command: Document, database: str
    ) -> tuple[float, Document] | None:
        """A command's charge and reply, or None when it was forwarded and answered already."""
        name = message.name
        target = command.get(name)
        try:
            features.check_command(name, command)
        except features.Refusal as refusal:
            return 0.0, wire.error_document(refusal.code, refusal.message, refusal.code_name)
        if name == "customAction":
            return 0.0, self._custom_action(command, database)
        if name == "currentOp":
            return 0.0, self._index_builds(command)
        if name == "createIndexes" and isinstance(target, str):
            return self._create_indexes(connection, request, database, target, command)
        if name in {"drop", "dropDatabase"}:
            collection_name = target if isinstance(target, str) and name == "drop" else None
            self.partitions.forget(database, collection_name)
            self.indexes.forget(database, collection_name)
        if name == "dropIndexes" and isinstance(target, str):
            self.indexes.dropped(database, target, command.get("index"))
        if name == "aggregate" and _is_change_stream(command):
            return self._open_stream(connection, request, command, database)
        if name == "killCursors":
            self._forget_cursors(command.get("cursors", []))
        if name == "getMore" and int(command.get("getMore", 0)) in self._streams:
            return self._stream_more(connection, request, command)
        if name in charges.READS or name in charges.WRITES:
            return self._data_command(connection, request, name, command, database)
        self._forward(connection, request)
        return None

    # --- wire plumbing ---

    def _exchange(self, connection: _Connection, raw: bytes, expect_reply: bool = True) -> wire.Message | None:
        connection.backend.sendall(raw)
        if not expect_reply:
            return None
        reply = wire.read_message(connection.backend)
        if reply is None:
            raise OSError("the backend closed the connection")
        return reply

    def _forward(
        self,
        connection: _Connection,
        request: wire.Message,
        rewrite: Callable[[Document], Document] | None = None,
    ) -> None:
        """Send the request on as it is, and its reply (every reply, for an exhaust cursor) back, rewritten."""
        more_to_come = request.op_code == wire.OP_MSG and (request.body[0] & wire.MORE_TO_COME)
        reply = self._exchange(connection, request.encode(), expect_reply=not more_to_come)
        while reply is not None:
            flags = 0
            if rewrite is not None:
                reply = _rewritten(reply, rewrite)
            if reply.op_code == wire.OP_MSG:
                flags = int.from_bytes(reply.body[:4], "little")
            connection.client.sendall(reply.encode())
            if not flags & wire.MORE_TO_COME:
                return
            reply = wire.read_message(connection.backend)

    def _backend_command(self, connection: _Connection, command: Document) -> Document:
        """Run a (rewritten) command on the backend over this connection; its reply document."""
        raw = wire.Message(next(self._request_ids), 0, wire.OP_MSG, wire.encode_op_msg(command)).encode()
        reply = self._exchange(connection, raw)
        assert reply is not None
        return wire.decode_op_msg(reply.body).command

    def _raw_reply(self, connection: _Connection, request: wire.Message) -> Document:
        reply = self._exchange(connection, request.encode())
        assert reply is not None
        return wire.decode_op_msg(reply.body).command

    def _answer(self, connection: _Connection, request: wire.Message, document: Document) -> None:
        connection.client.sendall(wire.reply_to(request, document).encode())

    def _hello_reply(self, reply: Document) -> Document:
        """The backend's hello, with the proxy's address where the backend names its own (else pymongo
        would find the backend and connect to it directly), and no compression."""
        address = f"{self.address[0]}:{self.address[1]}"
        for name in ("me", "primary"):
            if name in reply:
                reply[name] = address
        if "hosts" in reply:
            reply["hosts"] = [address]
        reply.pop("compression", None)
        if self.options.max_wire_version is not None and "maxWireVersion" in reply:
            reply["maxWireVersion"] = self.options.max_wire_version
            reply["minWireVersion"] = min(int(reply.get("minWireVersion", 0)), self.options.max_wire_version)
        return reply

    # --- collections and indexes ---

    def _shard_key_of(self, database: str, name: str) -> str | None:
        full = f"{database}.{name}"
        if full in self._shard_keys:
            return self._shard_keys[full]
        return self._schema_keys.get(name)

    def _list_indexes(self, database: str, name: str) -> list[Mapping[str, Any]]:
        return list(self._observer[database][name].list_indexes())

    def _custom_action(self, command: Document, database: str) -> Document:
        action = command.get("customAction")
        name = command.get("collection")
        if not isinstance(name, str) or not name:
            return wire.error_document(BAD_VALUE, f"customAction {action!r} needs a 'collection' name")
        if action == "CreateCollection":
            return self._create_collection(database, name, command.get("shardKey"))
        if action == "GetChangeStreamTokens":
            return self._change_stream_tokens(database, name, command.get("startAtOperationTime"))
        return wire.error_document(BAD_VALUE, f"customAction {action!r} is not one this store knows")

    def _create_collection(self, database: str, name: str, shard_key: Any) -> Document:
        if name in self._observer[database].list_collection_names():
            return wire.error_document(NAMESPACE_EXISTS, f"Collection {database}.{name} already exists.")
        self._observer[database].create_collection(name)
        key = str(shard_key) if shard_key else None
        self._shard_keys[f"{database}.{name}"] = key
        self.partitions.set_shard_key(database, name, key)
        return {"ok": 1.0}

    def _create_indexes(
        self, connection: _Connection, request: wire.Message, database: str, name: str, command: Document
    ) -> tuple[float, Document]:
        indexes = [i for i in command.get("indexes", []) if isinstance(i, Mapping)]
        shard_key = self.partitions.collection(database, name).shard_key
        for index in indexes:
            problem = ttl_problem(index)
            if problem is not None:
                return 0.0, wire.error_document(BAD_VALUE, problem)
            unique = rules.unique_index_problem(
                index, shard_key, self._count(database, name) if index.get("unique") else 0
            )
            if unique is not None:
                return 0.0, wire.error_document(rules.CANNOT_CREATE_INDEX, unique, "CannotCreateIndex")
        self.indexes.load(database, name)
        reply = self._raw_reply(connection, request)
        if reply.get("ok"):
            self.indexes.created(database, name, indexes)
        return 0.0, reply

    def _index_builds(self, command: Document) -> Document:
        """`currentOp` as Cosmos DB answers it for index progress: with the filter `command.createIndexes` and
        `command.$db`, one entry per index of that collection still transforming, with its `progress`
        (https://learn.microsoft.com/azure/cosmos-db/mongodb/indexing#track-index-progress); nothing else."""
        collection, database = command.get("command.createIndexes"), command.get("command.$db")
        if not isinstance(collection, str) or not isinstance(database, str):
            return {"inprog": [], "ok": 1.0}
        building = self.indexes.building(database, collection)
        inprog = [
            {
                "command": {
                    "createIndexes": collection,
                    "indexes": [{"key": dict(i.keys), "name": i.name}],
                    "$db": database,
                },
                "msg": "Index Build (background) Index Build (background): 0/1 0%",
                "progress": {"done": 0, "total": 1},
            }
            for i in building
        ]
        return {"inprog": inprog, "ok": 1.0}

    # --- reads and writes ---

    def _targets(self, collection: Collection, query: Any) -> list[Partition]:
        """The partitions a filter reaches: one per shard key value it pins by equality (or `$in`), else all."""
        if collection.shard_key is None or not isinstance(query, Mapping) or collection.shard_key not in query:
            return list(collection.partitions)
        value = query[collection.shard_key]
        if isinstance(value, Mapping):
            if set(value) == {"$eq"}:
                values = [value["$eq"]]
            elif set(value) == {"$in"} and isinstance(value["$in"], list):
                values = list(value["$in"])
            else:
                return list(collection.partitions)
        else:
            values = [value]
        return _unique(collection.partition_of(collection.hash_of({collection.shard_key: v})) for v in values)

    def _data_command(
        self, connection: _Connection, request: wire.Message, name: str, command: Document, database: str
    ) -> tuple[float, Document]:
        if name == "getMore":
            cursor_id = int(command["getMore"])
            target = str(command.get("collection"))
            collection = self.partitions.collection(database, target)
            with self._lock:
                reached = self._cursors.get(cursor_id) or list(collection.partitions)
        else:
            target = str(command.get(name))
            collection = self.partitions.collection(database, target)
            problem = self._sort_problem(database, target, name, command)
            if problem is not None:
                return 0.0, wire.error_document(BAD_VALUE, problem)
        effects: charges.WriteEffects | None = None
        if name in charges.WRITES:
            prepared = self._prepare_write(collection, name, command)
            if isinstance(prepared, dict):
                return 0.0, prepared
            effects, reached = prepared
        elif name != "getMore":
            reached = self._targets(collection, _filter_of(name, command))
        wait_ms = self.partitions.throttled_for_ms(reached)
        if wait_ms is not None:
            refusal = self._wait_for_throughput(reached, wait_ms)
            if refusal is not None:
                return 0.0, refusal
        hidden = self._hidden_by_drops(collection, name, command) if name != "getMore" else None
        if hidden is not None:
            reply = self._backend_command(connection, hidden)
        else:
            reply = self._raw_reply(connection, request)
        charge = 0.0
        if reply.get("ok"):
            charge = self._charge_reply(
                collection, target=target, name=name, reply=reply, effects=effects, reached=reached
            )
            self._remember_cursor(reply, reached)
            if name == "getMore" and not int(reply.get("cursor", {}).get("id", 0)):  # exhausted
                self._forget_cursors([command["getMore"]])
        return charge, reply

    # --- the rules a write meets before it runs ---

    def _count(self, database: str, name: str) -> int:
        return int(self._observer[database][name].estimated_document_count())

    def _prepare_write(
        self, collection: Collection, name: str, command: Document
    ) -> tuple[charges.WriteEffects, list[Partition]] | Document:
        """What a write will touch and the partitions it reaches, or Cosmos DB's refusal of it."""
        refused = self._write_problem(collection, name, command)
        if refused is not None:
            return refused
        database, target = collection.name.split(".", 1)
        effects = charges.look_before(self._observer[database][target], name, command)
        too_large = self._document_too_large(name, command, effects)
        if too_large is not None:
            return too_large
        overflow = self._logical_overflow(collection, name, command, effects)
        if overflow is not None:
            return overflow
        return effects, self._write_targets(collection, name, command, effects)

    def _write_problem(self, collection: Collection, name: str, command: Document) -> Document | None:
        """Cosmos DB's refusal of a write that leaves a document without its shard key (61) or changes one's
        shard key value (66), or None (rules.py quotes the pages)."""
        shard_key = collection.shard_key
        if shard_key is None or name == "delete":
            return None
        missing = rules.missing_shard_key(name, command, shard_key)
        if missing is not None:
            return wire.error_document(rules.SHARD_KEY_NOT_FOUND, f"{collection.name}: {missing}", "ShardKeyNotFound")
        database, target = collection.name.split(".", 1)

        def current(query: Any) -> Any:
            found = self._observer[database][target].find_one(query, {shard_key: 1})
            return None if found is None else found.get(shard_key)

        changed = rules.shard_key_change(name, command, shard_key, current)
        if changed is not None:
            return wire.error_document(
                rules.IMMUTABLE_FIELD, f"{collection.name}: the write would change {changed}", "ImmutableField"
            )
        return None

    def _document_too_large(self, name: str, command: Document, effects: charges.WriteEffects) -> Document | None:
        """A write that would store a document past 2 MB (16 MB with `large_documents`): refused, nothing written
        (features.py quotes the pages)."""
        if name == "delete":
            return None
        limit = features.LARGE_DOCUMENT_LIMIT if self.options.large_documents else features.DOCUMENT_LIMIT
        before = [t.before for t in effects.touched if t.before is not None]
        size, which = features.largest_written(name, command, before)
        if size <= limit:
            return None
        refusal = features.document_too_large(size, limit, which)
        return wire.error_document(refusal.code, refusal.message, refusal.code_name)

    def _logical_overflow(
        self, collection: Collection, name: str, command: Document, effects: charges.WriteEffects
    ) -> Document | None:
        """A write that would take one shard key value's documents past the logical partition limit (20 GB,
        scaled: `logical_partition_bytes`): refused, nothing written. Inserts are sized exactly; an update as if
        it grew its document by all it carries (what it really adds is known only after it ran)."""
        added: dict[int, int] = {}
        for document in effects.inserted:
            key_hash = collection.hash_of(document)
            added[key_hash] = added.get(key_hash, 0) + len(_bson(document))
        growth = max((len(_bson({"u": u})) for u in rules.updates(name, command)), default=0)
        for touched in effects.touched if name != "insert" else []:
            if touched.before is not None:  # at most by what the update carries
                key_hash = collection.hash_of(touched.before)
                added[key_hash] = added.get(key_hash, 0) + growth
        overflow = self.partitions.logical_overflow(collection, added)
        if overflow is None:
            return None
        limit = self.partitions.logical_limit_bytes
        return wire.error_document(
            BAD_VALUE,
            f"Response status code does not indicate success: Forbidden (403); Substatus: 1014; Partition key "
            f"reached maximum size of {limit} bytes (20 GB scaled): {collection.name}'s shard key value would hold "
            f"{overflow[1]} bytes",
        )

    def _wait_for_throughput(self, reached: list[Partition], wait_ms: int) -> Document | None:
        """Past a partition's throughput: 16500 at once, or with server-side retry on, the operation waits in
        the server until the partitions have budget (None) or `server_retry_seconds` have passed (code 50)."""
        if not self.options.server_side_retry:
            return self._throttled(reached, wait_ms)
        started, slept = self.options.clock(), 0.0
        waiting: int | None = wait_ms
        while waiting is not None:
            self.partitions.refuse(reached)
            elapsed = max(self.options.clock() - started, slept)
            if elapsed >= self.options.server_retry_seconds:
                with self._lock:
                    self.metered.timed_out += 1
                return wire.error_document(
                    EXCEEDED_TIME_LIMIT,
                    f"Request timed out. Retries due to rate limiting: True. (server-side retry gave up after "
                    f"{self.options.server_retry_seconds:g} s)",
                    "ExceededTimeLimit",
                )
            pause = min(waiting / 1000, self.options.server_retry_seconds - elapsed)
            self.options.sleep(pause)
            slept += pause
            waiting = self.partitions.throttled_for_ms(reached)
        with self._lock:
            self.metered.retried_in_server += 1
        return None

    def _hidden_by_drops(self, collection: Collection, name: str, command: Document) -> Document | None:
        """The command rewritten to miss what a running index removal has reached, if its filter names a path
        being removed (indexes.py quotes the page), else None. The removal walks the documents indexed before
        it began in a fixed order, in proportion to its time; documents written since it began are not in the
        index it reads at all. The least forgiving reading of "inconsistent and incomplete"."""
        if not self.options.incomplete_during_index_drops:
            return None
        database, target = collection.name.split(".", 1)
        paths = rules.filter_paths(_filter_of(name, command))
        removals = [r for r in self.indexes.removing(database, target) if r.paths & paths] if paths else []
        if not removals:
            return None
        now = self.options.clock()
        hidden: set[bytes] = set()
        documents = self.partitions.documents_of(collection)
        for removal in removals:
            before = sorted((k for k, d in documents if d.written_at <= removal.started), key=_removal_order)
            hidden |= {k for k, d in documents if d.written_at > removal.started}
            hidden |= set(before[: int(len(before) * removal.progress(now))])
        if not hidden:
            return None
        excluded = {"_id": {"$nin": [_id_of(k) for k in hidden]}}
        if name == "aggregate":
            return {**command, "pipeline": [{"$match": excluded}, *command.get("pipeline", [])]}
        key = "filter" if name == "find" else "query"
        return {**command, key: {"$and": [command.get(key) or {}, excluded]}}

    def _write_targets(
        self, collection: Collection, name: str, command: Document, effects: charges.WriteEffects
    ) -> list[Partition]:
        if name == "insert":
            return _unique(collection.partition_of(collection.hash_of(d)) for d in effects.inserted)
        found = [t.before for t in effects.touched if t.before is not None]
        if found:
            return _unique(collection.partition_of(collection.hash_of(d)) for d in found)
        filters = [q for q, _ in charges.statements(name, command)]
        return _unique(p for q in filters for p in self._targets(collection, q))

    def _charge_reply(
        self,
        collection: Collection,
        *,
        target: str,
        name: str,
        reply: Document,
        effects: charges.WriteEffects | None,
        reached: list[Partition],
    ) -> float:
        database = collection.name.split(".", 1)[0]
        writes = None
        if effects is not None:
            charges.look_after(self._observer[database][target], effects, reply)
            writes = charges.document_writes(effects, target)
            for index, document in enumerate(effects.inserted):
                if index not in effects.failed_inserts:
                    self._record(collection, document["_id"], document)
            for touched in effects.touched:
                if touched.matched or touched.after is not None:
                    self._record(collection, touched.document_id, touched.after)
        value = reply.get("value")
        charge = charges.request_charge(
            name,
            target,
            returned=charges.returned_sizes(reply) if name in charges.READS else None,
            writes=writes,
            reply_document=len(_bson(value)) if name == "findAndModify" and isinstance(value, Mapping) else None,
            partitions_reached=len(reached),
        )
        self._spend(collection, reached, charge)
        return charge

    def _record(self, collection: Collection, document_id: Any, document: Document | None) -> None:
        for split in self.partitions.record(collection, document_id, document):
            log.info(
                "cosmos proxy: %s split partition %d into %d and %d",
                split.collection,
                split.parent.id,
                *(c.id for c in split.children),
            )

    def _spend(self, collection: Collection, reached: list[Partition], charge: float) -> None:
        self.partitions.charge(reached, charge)
        with self._lock:
            self.metered.add(collection.name, charge, self.options.clock())

    def _throttled(self, reached: list[Partition], wait_ms: int) -> Document:
        """Cosmos DB's answer past a partition's throughput: 16500, with the wait in `RetryAfterMs=`."""
        self.partitions.refuse(reached)
        with self._lock:
            self.metered.throttled += 1
        return wire.error_document(
            THROTTLED,
            f"Error={THROTTLED}, RetryAfterMs={wait_ms}, Details='Response status code does not indicate success: "
            "TooManyRequests (429); Substatus: 3200; Reason: (Request rate is large. More Request Units may be "
            "needed, so no changes were made. Please retry this request later.)'",
            "TooManyRequests",
        )

    def _remember_cursor(self, reply: Document, reached: list[Partition]) -> None:
        cursor = reply.get("cursor")
        if not isinstance(cursor, Mapping):
            return
        cursor_id = int(cursor.get("id", 0))
        with self._lock:
            if cursor_id:
                self._cursors[cursor_id] = reached
            if len(self._cursors) > 10_000:  # cursors abandoned without killCursors: forget the oldest
                for stale in list(self._cursors)[:5_000]:
                    del self._cursors[stale]

    def _forget_cursors(self, cursor_ids: Any) -> None:
        with self._lock:
            for cursor_id in cursor_ids if isinstance(cursor_ids, list) else []:
                self._cursors.pop(int(cursor_id), None)
                self._streams.pop(int(cursor_id), None)

    def _sort_problem(self, database: str, collection: str, name: str, command: Document) -> str | None:
        sorts: list[Any] = []
        if name in {"find", "findAndModify"}:
            sorts = [command.get("sort")]
        elif name == "aggregate":
            sorts = [s["$sort"] for s in command.get("pipeline", []) if isinstance(s, Mapping) and "$sort" in s]
        for sort in sorts:
            if isinstance(sort, Mapping) and sort:
                problem = self.indexes.sort_problem(database, collection, name, sort)
                if problem is not None:
                    return problem
        return None

    # --- change streams ---

    def _change_stream_tokens(self, database: str, name: str, start_at: Any) -> Document:
        """One token per physical partition, each reading that partition only, in no promised order
        (https://learn.microsoft.com/azure/cosmos-db/mongodb/custom-commands: "returns one or more change stream
        resume tokens - each one corresponding to data from a single physical shard/partition"). After a merge,
        none from a start time (https://learn.microsoft.com/azure/cosmos-db/merge: "After a container has been
        merged, it isn't possible to read the change feed with start time.")."""
        collection = self.partitions.collection(database, name)
        if start_at is not None and collection.merged:
            return wire.error_document(
                BAD_VALUE,
                f"{collection.name} has been merged: its change feed cannot be read from a start time "
                "(startAtOperationTime); https://learn.microsoft.com/azure/cosmos-db/merge",
            )
        if isinstance(start_at, Timestamp):
            state = f"ts:{start_at.time}:{start_at.inc}"
        else:  # "Defaults to the time the command is run."
            with self._observer[database][name].watch([], max_await_time_ms=1) as probe:
                probe.try_next()
                position = probe.resume_token
            assert position is not None
            state = streams.backend_state(position)
        rid = streams.collection_rid(collection.name)
        tokens = [streams.StreamToken(rid, *p.feed_range, state).encode() for p in collection.partitions]
        if self.options.shuffle_tokens:
            with self._lock:
                self._random.shuffle(tokens)
        return {"resumeAfterTokens": tokens, "ok": 1.0}

    def _open_stream(
        self, connection: _Connection, request: wire.Message, command: Document, database: str
    ) -> tuple[float, Document]:
        name = str(command["aggregate"])
        pipeline = list(command["pipeline"])
        stage = dict(pipeline[0]["$changeStream"])
        problem = streams.pipeline_problem(pipeline[1:], stage)
        if problem is not None:
            return 0.0, wire.error_document(BAD_VALUE, problem)
        collection = self.partitions.collection(database, name)
        rid = streams.collection_rid(collection.name)
        low, high, partition_id = 0, TOP, None
        given = stage.pop("resumeAfter", None) or stage.pop("startAfter", None)
        if given is not None:
            try:
                token = streams.decode_token(given)
            except streams.NotOurToken as error:
                return 0.0, wire.error_document(INVALID_RESUME_TOKEN, str(error), "InvalidResumeToken")
            if token.rid != rid:
                return 0.0, wire.error_document(
                    INVALID_RESUME_TOKEN, f"the resume token belongs to another collection than {collection.name}"
                )
            low, high = parse_bound(token.low), parse_bound(token.high)
            if not token.whole:
                found = self._partition_for(collection, low, high)
                if isinstance(found, str):
                    return 0.0, wire.error_document(CHANGE_STREAM_FATAL, found, "ChangeStreamFatalError")
                partition_id = found.id
            stage.update(token.backend_position())
        reached = self._stream_partitions(collection, partition_id)
        rewritten = {**command, "pipeline": [{"$changeStream": stage}, *pipeline[1:]]}
        if self.partitions.throttled_for_ms(reached) is not None:
            self.partitions.refuse(reached)  # a throttled stream starts with an empty page
            rewritten["cursor"] = {**rewritten.get("cursor", {}), "batchSize": 0}
        reply = self._backend_command(connection, rewritten)
        if not reply.get("ok"):
            return 0.0, reply
        state = _Stream(collection, low, high, partition_id, given or {}, rid)
        return self._reshape(state, reply, "firstBatch"), reply

    def _partition_for(self, collection: Collection, low: int, high: int) -> Partition | str:
        """The partition a token's feed range names, or why it is refused.

        After a split the parent's range is no partition's: Cosmos DB's documentation does not say what a
        parent's token does then, so this store takes the least forgiving reading and refuses it (code 280,
        non-resumable): the consumer must ask GetChangeStreamTokens again, and the new tokens start at the time
        of that call, so whatever was written since the parent's last token is for the consumer to recover.
        After a merge the two parents' tokens are refused the same way (the merge page is silent on tokens too)."""
        for partition in collection.partitions:
            if (partition.low, partition.high) == (low, high):
                return partition
        return (
            f"PartitionKeyRangeGone: the feed range [{_bounds(low, high)[0]!r}, {_bounds(low, high)[1]!r}) of "
            f"{collection.name} is no physical partition now (it split or merged); ask GetChangeStreamTokens again"
        )

    def _stream_partitions(self, collection: Collection, partition_id: int | None) -> list[Partition]:
        if partition_id is None:
            return list(collection.partitions)
        return [p for p in collection.partitions if p.id == partition_id]

    def _stream_more(self, connection: _Connection, request: wire.Message, command: Document) -> tuple[float, Document]:
        cursor_id = int(command["getMore"])
        with self._lock:
            state = self._streams[cursor_id]
        reached = self._stream_partitions(state.collection, state.partition_id)
        namespace = f"{state.collection.name}"
        if state.partition_id is not None and not reached:
            with self._lock:
                self._streams.pop(cursor_id, None)
            self._backend_command(
                connection,
                {"killCursors": command.get("collection"), "cursors": [Int64(cursor_id)], "$db": command.get("$db")},
            )
            message = self._partition_for(state.collection, state.low, state.high)
            return 0.0, wire.error_document(CHANGE_STREAM_FATAL, str(message), "ChangeStreamFatalError")
        if self.partitions.throttled_for_ms(reached) is not None:
            self.partitions.refuse(reached)
            empty = {"id": Int64(cursor_id), "ns": namespace, "nextBatch": [], "postBatchResumeToken": state.token}
            return 0.0, {"cursor": empty, "ok": 1.0}
        reply = self._raw_reply(connection, request)
        if not reply.get("ok"):
            with self._lock:
                self._streams.pop(cursor_id, None)
            return 0.0, reply
        charge = self._reshape(state, reply, "nextBatch")
        if not int(reply["cursor"].get("id", 0)):
            self._forget_cursors([cursor_id])
        return charge, reply

    def _reshape(self, state: _Stream, reply: Document, batch_name: str) -> float:
        """Cosmos DB's batch: only the stream's feed range, every document carrying one token that points after
        the batch; the charge of reading it."""
        cursor = reply["cursor"]
        batch = cursor.get(batch_name, []) or []
        after = cursor.get("postBatchResumeToken") or (batch[-1]["_id"] if batch else None)
        if after is not None:
            state.token = streams.StreamToken(
                state.rid, *_bounds(state.low, state.high), streams.backend_state(after), state.partition_id is None
            ).encode()
        kept = []
        for change in batch:
            document = change.get("fullDocument")
            if not isinstance(document, Mapping):
                continue  # deleted before its lookup: Cosmos DB has no such change to show
            key_hash = state.collection.hash_of(dict(document))
            if state.partition_id is None or state.low <= key_hash < state.high:
                kept.append({**change, "_id": state.token})
        cursor[batch_name] = kept
        cursor["postBatchResumeToken"] = state.token
        cursor_id = int(cursor.get("id", 0))
        if cursor_id:
            with self._lock:
                self._streams[cursor_id] = state
        reached = self._stream_partitions(state.collection, state.partition_id)
        charge = charges.request_charge("getMore", state.collection.name, returned=charges.returned_sizes(reply))
        self._spend(state.collection, reached, charge)
        return charge


def _bounds(low: int, high: int) -> tuple[str, str]:
    return range_bound(low), range_bound(high)


def _unique(partitions: Iterator[Partition] | Any) -> list[Partition]:
    found: dict[int, Partition] = {}
    for partition in partitions:
        found.setdefault(partition.id, partition)
    return list(found.values())


def _filter_of(name: str, command: Document) -> Any:
    if name == "aggregate":
        return next((s["$match"] for s in command.get("pipeline", []) if isinstance(s, Mapping) and "$match" in s), {})
    if name == "count":
        return command.get("query", {})
    if name == "distinct":
        return command.get("query", {})
    return command.get("filter", {})


def _is_change_stream(command: Document) -> bool:
    pipeline = command.get("pipeline")
    return (
        isinstance(pipeline, list)
        and bool(pipeline)
        and isinstance(pipeline[0], Mapping)
        and "$changeStream" in pipeline[0]
    )


def _rewritten(reply: wire.Message, rewrite: Callable[[Document], Document]) -> wire.Message:
    if reply.op_code == wire.OP_REPLY:
        documents = [rewrite(d) for d in wire.decode_op_reply(reply.body)]
        return wire.Message(reply.request_id, reply.response_to, reply.op_code, wire.encode_op_reply(documents))
    if reply.op_code == wire.OP_MSG:
        message = wire.decode_op_msg(reply.body)
        body = wire.encode_op_msg(rewrite(message.command), flags=message.flags)
        return wire.Message(reply.request_id, reply.response_to, reply.op_code, body)
    return reply


def _bson(document: Mapping[str, Any]) -> bytes:
    return bson.encode(document)


def _removal_order(key: bytes) -> bytes:
    return hashlib.md5(key).digest()


def _id_of(key: bytes) -> Any:
    return bson.decode(key)[""]


def _address_of(uri: str) -> tuple[str, int]:
    host = uri.split("://", 1)[1].split("/", 1)[0].split(",", maxsplit=1)[0]
    name, _, port = host.rpartition(":")
    return name, int(port)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
