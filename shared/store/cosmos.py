"""Cosmos DB for MongoDB specifics behind one seam: its error codes, its `customAction` and
`getLastRequestStatistics` commands. Everything here also works on plain MongoDB, where the Cosmos-only
commands are simply not used."""

import base64
import binascii
import json
import re
from collections.abc import Mapping
from typing import Any, Literal

from pymongo.database import Database
from pymongo.errors import BulkWriteError, OperationFailure

THROTTLED = 16500  # Cosmos DB "TooManyRequests": the request exceeded the provisioned RU/s.
# "ExceededTimeLimit": with server-side retry on, what a request still throttled after 60 s ends in (and what any
# MongoDB answers when an operation's maxTimeMS runs out).
EXCEEDED_TIME_LIMIT = 50
DUPLICATE_KEY = 11000
NAMESPACE_EXISTS = 48
_RETRY_AFTER = re.compile(r"RetryAfterMs=(\d+)")


def is_cosmos_uri(uri: str) -> bool:
    """Cosmos DB for MongoDB (RU) endpoints live under *.mongo.cosmos.azure.com (or .cosmos.azure.us/.cn)."""
    return ".mongo.cosmos." in uri.lower() or ".cosmos.azure." in uri.lower()


def is_throttling_code(code: Any) -> bool:
    """Throttling as the server reports it: 16500, or 50 once server-side retry gave up."""
    return code in (THROTTLED, EXCEEDED_TIME_LIMIT)


def throttle_delay_ms(error: BaseException) -> int | None:
    """The server's suggested wait if `error` is Cosmos throttling (16500, or 50 after server-side retry), else
    None. 0 when the server suggested nothing."""
    if isinstance(error, BulkWriteError):
        delays = [
            delay_from_message(e.get("errmsg", ""))
            for e in error.details.get("writeErrors", [])
            if is_throttling_code(e.get("code"))
        ]
        return max(delays) if delays else None
    if isinstance(error, OperationFailure) and (is_throttling_code(error.code) or "TooManyRequests" in str(error)):
        return delay_from_message(str(error))
    return None


def throttle_code(error: BaseException) -> int | None:
    """THROTTLED or EXCEEDED_TIME_LIMIT when `error` is throttling as the app sees it; None otherwise. A bulk
    write is THROTTLED if any op was, EXCEEDED_TIME_LIMIT if its ops only ran out of time."""
    if throttle_delay_ms(error) is None:
        return None
    if isinstance(error, BulkWriteError):
        codes = {e.get("code") for e in error.details.get("writeErrors", [])}
        return THROTTLED if THROTTLED in codes or EXCEEDED_TIME_LIMIT not in codes else EXCEEDED_TIME_LIMIT
    if isinstance(error, OperationFailure) and error.code == EXCEEDED_TIME_LIMIT:
        return EXCEEDED_TIME_LIMIT
    return THROTTLED


def delay_from_message(message: str) -> int:
    """The `RetryAfterMs=` of a Cosmos DB error message (0 when it has none)."""
    match = _RETRY_AFTER.search(message)
    return int(match.group(1)) if match else 0


def create_sharded_collection(db: Database[Any], name: str, shard_key: str | None) -> None:
    """Create `name` sharded on `shard_key` on Cosmos DB (its `customAction` extension command).

    Cosmos answers an existing collection with an error that we treat as success, so setup is idempotent.
    """
    command: dict[str, Any] = {"customAction": "CreateCollection", "collection": name}
    if shard_key is not None:
        command["shardKey"] = shard_key
    try:
        db.command(command)
    except OperationFailure as error:
        if error.code != NAMESPACE_EXISTS and "already exists" not in str(error).lower():
            raise


def change_stream_tokens(db: Database[Any], collection: str) -> list[Any] | None:
    """One change-stream resume token per physical partition of `collection` (Cosmos DB's
    `GetChangeStreamTokens` custom command): each opens a change stream that reads that partition only, which
    is how a consumer scales out on Cosmos DB. None where the command does not exist (any other MongoDB);
    throttling is raised, for the caller's retries: it says nothing about the partitions."""
    try:
        reply = db.command({"customAction": "GetChangeStreamTokens", "collection": collection})
    except OperationFailure as error:
        if throttle_delay_ms(error) is not None:
            raise
        return None
    tokens = reply.get("resumeAfterTokens")
    return list(tokens) if tokens else None


FeedRange = tuple[str, str]  # an effective partition key range [min, max): upper-case hex, "" the lowest


def feed_range(token: Mapping[str, Any]) -> FeedRange:
    """The effective partition key range a `GetChangeStreamTokens` token reads: its identity, since the reply
    promises one token per physical partition and no order. The token is `{"_data": BinData(JSON), "_kind": 1}`,
    the JSON `{"V": 2, "Rid": ..., "Continuation": [{"FeedRange": {"type": "Effective Partition Key Range",
    "value": {"min": "", "max": "FF"}}, "State": ...}]}`, as the sample of
    https://learn.microsoft.com/azure/cosmos-db/mongodb/custom-commands#parallel-change-stream decodes.
    ValueError for a token that carries no range (the caller cannot key a lease by it)."""
    data = token.get("_data")
    try:
        raw = bytes(data) if isinstance(data, bytes | bytearray) else base64.b64decode(str(data), validate=True)
        continuations = json.loads(raw)["Continuation"]
        ranges = {(str(c["FeedRange"]["value"]["min"]), str(c["FeedRange"]["value"]["max"])) for c in continuations}
    except (binascii.Error, ValueError, KeyError, TypeError):
        raise ValueError(f"a change stream token without a readable feed range: {dict(token)!r:.200}") from None
    if len(ranges) != 1:
        raise ValueError(f"a change stream token with {len(ranges)} feed ranges; one expected")
    low, high = ranges.pop()
    return low.upper(), high.upper()


ChildStart = Literal["own_entry", "narrowed", "by_time"]


def child_token(token: Mapping[str, Any], span: FeedRange) -> tuple[dict[str, Any] | None, ChildStart]:
    """Where a split child starts in its one parent's token, and how: the token's continuation entry for exactly
    the child's feed range where the token holds one per child (`own_entry`: the NoSQL SDKs' split handling keeps
    a composite continuation, one entry per range the parent split into), else the one entry whose range holds the
    child's, narrowed to it, its position (`State`) kept (`narrowed`: as Cosmos DB's own change feed clients carry
    a parent's continuation on to its children); else none (`by_time`: the child recovers from the checkpoint time).
    The API for MongoDB documents neither: a store that refuses the token at open leaves the child to recover by
    time too (shared/feeds/sources.py)."""
    data = token.get("_data")
    try:
        raw = bytes(data) if isinstance(data, bytes | bytearray) else base64.b64decode(str(data), validate=True)
        document = json.loads(raw)
        entries = [(_entry_range(entry), entry) for entry in document["Continuation"]]
    except (binascii.Error, ValueError, KeyError, TypeError, AttributeError):
        return None, "by_time"
    own = [entry for found, entry in entries if found == span]
    holding = [entry for (low, high), entry in entries if low <= span[0] and span[1] <= high]
    start: ChildStart
    if len(own) == 1:
        document["Continuation"], start = own, "own_entry"
    elif len(holding) == 1:
        [entry] = holding
        entry["FeedRange"]["value"]["min"], entry["FeedRange"]["value"]["max"] = span
        document["Continuation"], start = holding, "narrowed"
    else:
        return None, "by_time"
    encoded = json.dumps(document, separators=(",", ":")).encode()
    data = encoded if isinstance(data, bytes | bytearray) else base64.b64encode(encoded).decode()
    return {**token, "_data": data}, start


def _entry_range(entry: Mapping[str, Any]) -> FeedRange:
    value = entry["FeedRange"]["value"]
    return str(value["min"]).upper(), str(value["max"]).upper()


def ranges_overlap(a: FeedRange, b: FeedRange) -> bool:
    """Whether two [min, max) ranges of one key space share a key (hex strings of one width compare as numbers;
    Cosmos DB compares effective partition keys as strings, "" lowest)."""
    return a[0] < b[1] and b[0] < a[1]


WHOLE_RANGE: FeedRange = ("", "FF")  # the hash space a collection's physical partitions divide between them


def uncovered(span: FeedRange, ranges: list[FeedRange]) -> list[FeedRange]:
    """The parts of `span` that none of `ranges` covers, in order (a reply's tokens must cover WHOLE_RANGE: each
    physical partition owns one contiguous range of the hash space)."""
    gaps: list[FeedRange] = []
    at = span[0]
    for low, high in sorted(ranges):
        if at >= span[1]:
            break
        if high <= at:
            continue
        if low > at:
            gaps.append((at, min(low, span[1])))
        at = max(at, high)
    if at < span[1]:
        gaps.append((at, span[1]))
    return gaps


def overlaps(ranges: list[FeedRange]) -> list[FeedRange]:
    """The keys that two or more of `ranges` share, as ranges in order (none, between physical partitions)."""
    shared: list[FeedRange] = []
    reached: str | None = None
    for low, high in sorted(ranges):
        if reached is not None and low < reached:
            shared.append((low, min(high, reached)))
        reached = high if reached is None else max(reached, high)
    return shared


def last_request_charge(db: Database[Any]) -> float | None:
    """Request units charged for this connection's last operation (Cosmos only); None elsewhere."""
    try:
        stats = db.command({"getLastRequestStatistics": 1})
    except OperationFailure:
        return None
    charge = stats.get("RequestCharge")
    return float(charge) if charge is not None else None
