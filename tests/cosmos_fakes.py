"""Fakes that behave like Cosmos DB for MongoDB as documented: throttling answers error 16500
("TooManyRequests", with RetryAfterMs in the message), a bulk write can be throttled part-way, reporting a
write error per op that was not applied, and `GetChangeStreamTokens` answers a token per physical partition."""

import json
import random
from collections.abc import Mapping
from typing import Any

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
    applies its first op before the rest is refused."""

    def __init__(self, db: Any, failures: dict[str, float], *, partial: bool = False, error: Any = None) -> None:
        self.db = db
        self.remaining = dict(failures)
        self.partial = partial
        self.error = error or throttled
        self.calls: list[str] = []

    def __getitem__(self, name: str) -> "ThrottlingCollection":
        return ThrottlingCollection(self, self.db[name], name)


class ThrottlingCollection:
    def __init__(self, owner: ThrottlingDatabase, collection: Any, name: str) -> None:
        self._owner = owner
        self._collection = collection
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        real = getattr(self._collection, attribute)
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
    data = {
        "V": 2,
        "Rid": "PxUaALn0SKE=",
        "Continuation": [
            {
                "FeedRange": {"type": "Effective Partition Key Range", "value": {"min": epk(low), "max": epk(high)}},
                "State": {"type": "continuation", "value": f'"{position}"'},
            }
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
