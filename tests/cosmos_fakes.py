"""Fakes that behave like Cosmos DB for MongoDB as documented: throttling answers error 16500
("TooManyRequests", with RetryAfterMs in the message), and a bulk write can be throttled part-way,
reporting a write error per op that was not applied."""

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
