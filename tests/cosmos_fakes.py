"""Fakes that behave like Cosmos DB for MongoDB as documented: throttling answers error 16500
("TooManyRequests", with RetryAfterMs in the message), a bulk write can be throttled part-way, reporting a
write error per op that was not applied, `GetChangeStreamTokens` answers a token per physical partition, and
indexes serve queries only once their transformation has ended (`IndexTransformingDatabase`)."""

import json
import random
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from pymongo import monitoring
from pymongo.errors import BulkWriteError, OperationFailure

THROTTLE_MESSAGE = (
    "Error=16500, RetryAfterMs=3, Details='Response status code does not indicate success: "
    "TooManyRequests (429); Substatus: 3200; Request rate is large.'"
)
CALLS = ("bulk_write", "find_one", "find_one_and_update", "update_one", "insert_many", "find")


def throttled() -> OperationFailure:
    return OperationFailure(THROTTLE_MESSAGE, code=16500)


class ThrottlingDatabase:
    """Wraps a real database. `failures` maps "collection" (any call) or "collection.method" to how many
    calls answer 16500 first (float("inf") for always). With `partial=True`, a throttled bulk write
    applies its first op before the rest is refused. "collection.getMore" throttles a cursor's getMore: a
    `find` answers its first batch, then the next batch is refused (and the cursor is dead, as pymongo's is)."""

    def __init__(self, db: Any, failures: dict[str, float], *, partial: bool = False, error: Any = None) -> None:
        self.db = db
        self.remaining = dict(failures)
        self.partial = partial
        self.error = error or throttled
        self.calls: list[str] = []

    def __getitem__(self, name: str) -> "ThrottlingCollection":
        return ThrottlingCollection(self, self.db[name], name)

    def __getattr__(self, name: str) -> Any:  # the rest (a command, the name) as the database has it
        return getattr(self.db, name)


class ThrottlingCollection:
    def __init__(self, owner: ThrottlingDatabase, collection: Any, name: str) -> None:
        self._owner = owner
        self._collection = collection
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        real = getattr(self._collection, attribute)
        if attribute == "find" and self._owner.remaining.get(f"{self._name}.getMore", 0) > 0:
            return self._find_throttling_get_more(real)
        if attribute not in CALLS:
            return real

        def call(*args: Any, **kwargs: Any) -> Any:
            call_name = f"{self._name}.{attribute}"
            self._owner.calls.append(call_name)
            budget = next((k for k in (call_name, self._name) if self._owner.remaining.get(k, 0) > 0), None)
            if budget is None:
                return real(*args, **kwargs)
            self._owner.remaining[budget] -= 1
            if attribute == "bulk_write" and self._owner.partial and len(args[0]) > 1:
                return self._partially_throttled_bulk(list(args[0]), **kwargs)
            raise self._owner.error()

        return call

    def _find_throttling_get_more(self, find: Any) -> Any:
        def call(*args: Any, batch_size: int = 101, **kwargs: Any) -> Iterator[Any]:
            self._owner.calls.append(f"{self._name}.find")
            return ThrottledGetMore(self._owner, f"{self._name}.getMore", find(*args, **kwargs), batch_size)

        return call

    def _partially_throttled_bulk(self, ops: list[Any], **kwargs: Any) -> Any:
        applied = self._collection.bulk_write(ops[:1], **kwargs)
        errors = [{"index": i, "code": 16500, "errmsg": THROTTLE_MESSAGE} for i in range(1, len(ops))]
        counts = {
            "nInserted": applied.inserted_count,
            "nUpserted": applied.upserted_count,
            "nMatched": applied.matched_count,
            "nModified": applied.modified_count,
        }
        raise BulkWriteError({"writeErrors": errors, **counts})


class FakeCosmosDatabase:
    """A database that answers Cosmos' extension commands as documented: `customAction:
    CreateCollection` creates a (sharded) collection and refuses an existing one; plain
    `create_collection` would make an unsharded collection, so the fake refuses it to catch the mistake."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self.shard_keys: dict[str, str | None] = {}
        self.request_charge = 7.5

    def list_collection_names(self) -> list[str]:
        return list(self.db.list_collection_names())

    def create_collection(self, name: str) -> Any:
        raise AssertionError(f"{name}: on Cosmos DB, create sharded collections with customAction")

    def command(self, command: dict[str, Any]) -> dict[str, Any]:
        if command.get("customAction") == "CreateCollection":
            name = command["collection"]
            if name in self.db.list_collection_names():
                raise OperationFailure(f"Collection {name} already exists.", code=48)
            self.db.create_collection(name)
            self.shard_keys[name] = command.get("shardKey")
            return {"ok": 1.0}
        if "getLastRequestStatistics" in command:
            return {"CommandName": "insert", "RequestCharge": self.request_charge, "ok": 1.0}
        raise OperationFailure(f"no such command: {next(iter(command))}", code=59)

    def __getitem__(self, name: str) -> Any:
        return self.db[name]

    @property
    def name(self) -> str:
        return str(self.db.name)

    @property
    def client(self) -> "FakeCosmosClient":
        return FakeCosmosClient(self)

    def current_op(self, command: dict[str, Any]) -> dict[str, Any]:
        """`currentOp` as Cosmos DB answers it: only index builds (none here: every index is built at once)."""
        return {"inprog": [], "ok": 1.0}


class FakeCosmosClient:
    """The client of a fake database: its `admin` database answers `currentOp` (what the setup asks of it)."""

    def __init__(self, db: FakeCosmosDatabase) -> None:
        self.admin = self
        self._db = db

    def command(self, command: dict[str, Any]) -> dict[str, Any]:
        if "currentOp" not in command:
            raise OperationFailure(f"no such admin command: {next(iter(command))}", code=59)
        return self._db.current_op(command)


NO_INDEX_FOR_SORT = 2  # "The index path corresponding to the specified order-by item is excluded."


class IndexTransformingDatabase(FakeCosmosDatabase):
    """Indexes as https://learn.microsoft.com/azure/cosmos-db/mongodb/indexing#background-index-updates describes
    them: "Queries will only utilize new indexes once the index transformation is complete", and a dropped index
    stops serving at once. A new index is listed at once (the least forgiving reading: listing is no proof it is
    built), and its transformation takes `polls` answers of `currentOp`, which reports it with its progress as the
    page's "Track index progress" shows ({"inprog": [{"command": {"createIndexes": ..., "$db": ...}, "progress":
    {"done": n, "total": 100}}]}, then {"inprog": []}). A sorted find needs a built index whose keys are the sort's
    exactly (or all reversed), else it fails with code 2, as Cosmos DB's does. `on_poll` runs at each `currentOp`
    (what the running app does meanwhile)."""

    def __init__(self, db: Any, *, polls: int = 3) -> None:
        super().__init__(db)
        self.polls = polls
        self.building: dict[tuple[str, str], int] = {}  # (collection, index) -> polls left
        self.on_poll: Callable[[], None] = lambda: None
        self.polled = 0

    def command(self, command: dict[str, Any]) -> dict[str, Any]:
        if command.get("customAction") == "CreateCollection":
            self.db.create_collection(command["collection"])  # a new collection's indexes build at once
            self.shard_keys[command["collection"]] = command.get("shardKey")
            return {"ok": 1.0}
        return super().command(command)

    def __getitem__(self, name: str) -> Any:
        return TransformingCollection(self, self.db[name], name)

    def current_op(self, command: dict[str, Any]) -> dict[str, Any]:
        self.polled += 1
        self.on_poll()
        collection = command.get("command.createIndexes")
        inprog = [
            {
                "command": {"createIndexes": c, "indexes": [], "$db": self.name},
                "progress": {"done": 100 * (self.polls - left) // self.polls, "total": 100},
            }
            for (c, _), left in self.building.items()
            if collection in (None, c)
        ]
        self.building = {key: left - 1 for key, left in self.building.items() if left > 1}
        return {"inprog": inprog, "ok": 1.0}

    def built_keys(self, collection: str) -> list[list[tuple[str, int]]]:
        info = self.db[collection].index_information()
        return [
            [(k, int(d)) for k, d in index["key"]]
            for name, index in info.items()
            if (collection, name) not in self.building
        ]


class TransformingCollection:
    def __init__(self, owner: IndexTransformingDatabase, collection: Any, name: str) -> None:
        self._owner, self._collection, self._name = owner, collection, name

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._collection, attribute)

    def create_indexes(self, models: list[Any], **kwargs: Any) -> list[str]:
        before = set(self._collection.index_information())
        names: list[str] = self._collection.create_indexes(models, **kwargs)
        populated = self._collection.estimated_document_count() > 0
        for name in names:
            if name not in before and populated:
                self._owner.building[(self._name, name)] = self._owner.polls
        return names

    def find(self, *args: Any, **kwargs: Any) -> "SortChecked":
        return SortChecked(self, self._collection.find(*args, **kwargs))


class SortChecked:
    """A cursor whose sort needs a built index with exactly its keys (Cosmos DB's rule), else code 2."""

    def __init__(self, collection: TransformingCollection, cursor: Any) -> None:
        self._collection, self._cursor = collection, cursor

    def sort(self, keys: list[tuple[str, int]], *args: Any) -> "SortChecked":
        wanted = [(k, int(d)) for k, d in keys]
        reversed_ = [(k, -d) for k, d in wanted]
        built = self._collection._owner.built_keys(self._collection._name)
        if wanted != [("_id", 1)] and wanted not in built and reversed_ not in built:
            raise OperationFailure(
                "The index path corresponding to the specified order-by item is excluded.", code=NO_INDEX_FOR_SORT
            )
        self._cursor = self._cursor.sort(keys, *args)
        return self

    def limit(self, count: int) -> "SortChecked":
        self._cursor = self._cursor.limit(count)
        return self

    def __iter__(self) -> Any:
        return iter(self._cursor)


# --- GetChangeStreamTokens: one token per physical partition, keyed by its feed range ----------------------------

# Effective partition keys of the fake, as integers: its ranges split [0, EPK_TOP). Cosmos DB's hashed keys stay below
# "40" (the top bits of the hash are cleared), so inner boundaries written as 4 hex digits all sort below "FF", the
# key space's end, as strings.
EPK_TOP = 0x4000


def epk(value: int) -> str:
    return "" if value == 0 else "FF" if value >= EPK_TOP else f"{value:04X}"


def cosmos_token(low: int, high: int, position: str = "1") -> dict[str, Any]:
    """A resume token shaped as the documented sample of
    https://learn.microsoft.com/azure/cosmos-db/mongodb/custom-commands#parallel-change-stream: `_data` is BinData
    holding JSON whose continuation names the token's feed range."""
    return composite_token([(low, high, position)])


def composite_token(entries: list[tuple[int, int, str]]) -> dict[str, Any]:
    """A resume token of the same shape holding one continuation per (low, high, position): what a stream whose
    range split may hand out, as the NoSQL SDKs keep a composite continuation, an entry per range the split left
    (Azure/azure-cosmos-dotnet-v3, FeedRangeCompositeContinuation: "FeedRangeContinuation using Composite
    Continuation Tokens and split proof")."""
    data = {
        "V": 2,
        "Rid": "PxUaALn0SKE=",
        "Continuation": [
            {
                "FeedRange": {"type": "Effective Partition Key Range", "value": {"min": epk(low), "max": epk(high)}},
                "State": {"type": "continuation", "value": f'"{position}"'},
            }
            for low, high, position in entries
        ],
    }
    return {"_data": json.dumps(data).encode(), "_kind": 1}


class CosmosTokens:
    """A database whose `GetChangeStreamTokens` answers one token per physical partition, as Cosmos DB does: each
    token names its feed range, and the reply's order changes from call to call (the documentation promises a
    token per partition, not an order). `split(i)` halves the i-th range, as Cosmos DB splits a partition that
    outgrew 50 GB; setting `partitions` lays the key space out evenly again."""

    def __init__(self, db: Any, partitions: int) -> None:
        self._db = db
        self.asked = 0
        self._order = random.Random(partitions)
        self.partitions = partitions

    @property
    def partitions(self) -> int:
        return len(self.ranges)

    @partitions.setter
    def partitions(self, count: int) -> None:
        self.ranges = [(i * EPK_TOP // count, (i + 1) * EPK_TOP // count) for i in range(count)]

    def split(self, index: int) -> None:
        low, high = sorted(self.ranges)[index]
        middle = (low + high) // 2
        self.ranges = sorted([r for r in self.ranges if r != (low, high)] + [(low, middle), (middle, high)])

    def tokens(self) -> list[dict[str, Any]]:
        self.asked += 1
        tokens = [cosmos_token(low, high, position=str(self.asked)) for low, high in self.ranges]
        self._order.shuffle(tokens)
        return tokens

    def command(self, command: Mapping[str, Any]) -> dict[str, Any]:
        if command.get("customAction") == "GetChangeStreamTokens":
            return {"resumeAfterTokens": self.tokens(), "ok": 1}
        raise OperationFailure("no such command", code=59)

    def __getitem__(self, name: str) -> Any:
        return self._db[name]


class LastCommand(monitoring.CommandListener):
    """Remembers the last command a client sent (handshakes aside), as a server knows its connection's."""

    def __init__(self) -> None:
        self.name = ""

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name not in {"hello", "isMaster", "ismaster", "endSessions"}:
            self.name = event.command_name

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


class RequestStatistics:
    """A database that answers Cosmos DB's `getLastRequestStatistics` as its documentation shows the reply
    (CommandName, RequestCharge, RequestDurationInMilliSeconds, ActivityId), charging `charges[command]` for the
    last command `last` saw; every other command goes to the real database."""

    def __init__(self, db: Any, last: LastCommand, charges: dict[str, float]) -> None:
        self._db, self._last, self._charges = db, last, charges

    def command(self, command: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(command, dict) and "getLastRequestStatistics" in command:
            name = self._last.name
            return {"CommandName": name, "RequestCharge": self._charges[name], "RequestDurationInMilliSeconds": 3,
                    "ActivityId": "00000000-0000-0000-0000-000000000000", "ok": 1.0}  # fmt: skip
        return self._db.command(command, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


class ThrottledGetMore:
    """A cursor whose first batch comes with the `find`, and whose getMore is throttled while `owner` has budget
    for `name`: the error ends the cursor, as a failed getMore does in pymongo."""

    def __init__(self, owner: ThrottlingDatabase, name: str, cursor: Any, batch_size: int) -> None:
        self._owner, self._name, self._cursor = owner, name, cursor
        self._left_in_batch = batch_size
        self._dead = False

    def __iter__(self) -> "ThrottledGetMore":
        return self

    def __next__(self) -> Any:
        if self._dead:
            raise StopIteration
        if self._left_in_batch == 0 and self._owner.remaining.get(self._name, 0) > 0:
            self._owner.remaining[self._name] -= 1
            self._owner.calls.append(self._name)
            self._dead = True
            raise throttled()
        self._left_in_batch = max(0, self._left_in_batch - 1)
        return next(self._cursor)

    def close(self) -> None:
        self._dead = True

    def __enter__(self) -> "ThrottledGetMore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class QuietStream:
    """A Cosmos DB change stream (a ChangeReader, shared/feeds/sources.py) with nothing new: its position
    stays the token it was opened at. A watch for the workers: `watch=QuietStream`."""

    def __init__(self, partition: Any, token: Any) -> None:
        self.resume_token = token

    def next_change(self) -> None:
        return None

    def at_batch_end(self) -> bool:
        return True

    def close(self) -> None:
        pass
