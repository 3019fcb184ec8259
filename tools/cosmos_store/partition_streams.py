"""Change streams per physical partition, as Cosmos DB for MongoDB serves them: `GetChangeStreamTokens` hands
out one token per partition; a stream opened on one reads that partition's documents only, every document of a
batch carrying the batch's one token; a throttled stream answers empty pages; a token whose partition split or
merged away is refused (code 280). The tokens' shape and the required pipeline are streams.py's; each rule's
page is quoted by the function that applies it."""

from collections.abc import Mapping
from typing import Any

from bson.int64 import Int64
from bson.timestamp import Timestamp

from tools.cosmos_store import charges, relay, streams, wire
from tools.cosmos_store.cursors import StreamCursor
from tools.cosmos_store.indexes import BAD_VALUE
from tools.cosmos_store.partitions import TOP, Collection, Partition, parse_bound, range_bound
from tools.cosmos_store.state import StoreState
from tools.cosmos_store.targeting import stream_partitions

INVALID_RESUME_TOKEN = 260
CHANGE_STREAM_FATAL = 280
Document = dict[str, Any]


def is_change_stream(command: Document) -> bool:
    """Whether an aggregate opens a change stream (its pipeline starts with `$changeStream`)."""
    pipeline = command.get("pipeline")
    return (
        isinstance(pipeline, list)
        and bool(pipeline)
        and isinstance(pipeline[0], Mapping)
        and "$changeStream" in pipeline[0]
    )


def change_stream_tokens(state: StoreState, database: str, name: str, start_at: Any) -> Document:
    """One token per physical partition, each reading that partition only, in no promised order
    (https://learn.microsoft.com/azure/cosmos-db/mongodb/custom-commands: "returns one or more change stream
    resume tokens - each one corresponding to data from a single physical shard/partition"). After a merge,
    none from a start time (https://learn.microsoft.com/azure/cosmos-db/merge: "After a container has been
    merged, it isn't possible to read the change feed with start time.")."""
    collection = state.partitions.collection(database, name)
    if start_at is not None and collection.merged:
        return wire.error_document(
            BAD_VALUE,
            f"{collection.name} has been merged: its change feed cannot be read from a start time "
            "(startAtOperationTime); https://learn.microsoft.com/azure/cosmos-db/merge",
        )
    rid = streams.collection_rid(collection.name)
    position = _start_state(state, database, name, start_at)
    tokens = [streams.StreamToken(rid, *p.feed_range, position).encode() for p in collection.partitions]
    if state.options.shuffle_tokens:
        with state.lock:
            state.random.shuffle(tokens)
    return {"resumeAfterTokens": tokens, "ok": 1.0}


def _start_state(state: StoreState, database: str, name: str, start_at: Any) -> str:
    """Where new tokens start: at `startAtOperationTime`, else where the backend's change stream is now."""
    if isinstance(start_at, Timestamp):
        return f"ts:{start_at.time}:{start_at.inc}"
    # "Defaults to the time the command is run."
    with state.observer[database][name].watch([], max_await_time_ms=1) as probe:
        probe.try_next()
        position = probe.resume_token
    assert position is not None
    return streams.backend_state(position)


def open_stream(
    state: StoreState, connection: relay.Connection, command: Document, database: str
) -> tuple[float, Document]:
    """Open a change stream on the backend, narrowed to its token's partition; its first batch's charge and
    the reply reshaped (or Cosmos DB's refusal of its pipeline or token)."""
    pipeline = list(command["pipeline"])
    stage = dict(pipeline[0]["$changeStream"])
    problem = streams.pipeline_problem(pipeline[1:], stage)
    if problem is not None:
        return 0.0, wire.error_document(BAD_VALUE, problem)
    collection = state.partitions.collection(database, str(command["aggregate"]))
    rid = streams.collection_rid(collection.name)
    given = stage.pop("resumeAfter", None) or stage.pop("startAfter", None)
    resumed = _resumed_range(collection, rid, given, stage) if given is not None else (0, TOP, None)
    if isinstance(resumed, dict):
        return 0.0, resumed
    low, high, partition_id = resumed
    reached = stream_partitions(collection, partition_id)
    rewritten = {**command, "pipeline": [{"$changeStream": stage}, *pipeline[1:]]}
    if state.partitions.throttled_for_ms(reached) is not None:
        state.partitions.refuse(reached)  # a throttled stream starts with an empty page
        rewritten["cursor"] = {**rewritten.get("cursor", {}), "batchSize": 0}
    reply = relay.run_on_backend(connection, rewritten)
    if not reply.get("ok"):
        return 0.0, reply
    stream = StreamCursor(collection, low, high, partition_id, given or {}, rid)
    return reshape(state, stream, reply, "firstBatch"), reply


def _resumed_range(
    collection: Collection, rid: str, given: Any, stage: Document
) -> tuple[int, int, int | None] | Document:
    """The feed range a resume token names and the partition it reads (None: the whole collection), with the
    backend's position put into `stage`; or why the token is refused."""
    try:
        token = streams.decode_token(given)
    except streams.NotOurToken as error:
        return wire.error_document(INVALID_RESUME_TOKEN, str(error), "InvalidResumeToken")
    if token.rid != rid:
        return wire.error_document(
            INVALID_RESUME_TOKEN, f"the resume token belongs to another collection than {collection.name}"
        )
    low, high = parse_bound(token.low), parse_bound(token.high)
    partition_id = None
    if not token.whole:
        found = partition_for(collection, low, high)
        if isinstance(found, str):
            return wire.error_document(CHANGE_STREAM_FATAL, found, "ChangeStreamFatalError")
        partition_id = found.id
    stage.update(token.backend_position())
    return low, high, partition_id


def partition_for(collection: Collection, low: int, high: int) -> Partition | str:
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
        f"PartitionKeyRangeGone: the feed range [{range_bound(low)!r}, {range_bound(high)!r}) of "
        f"{collection.name} is no physical partition now (it split or merged); ask GetChangeStreamTokens again"
    )


def stream_more(
    state: StoreState, connection: relay.Connection, request: wire.Message, command: Document
) -> tuple[float, Document]:
    """A change stream's getMore: refused (280) once its partition is gone, an empty page with its token
    unmoved while throttled (https://learn.microsoft.com/azure/cosmos-db/mongodb/change-streams, Error handling:
    "HTTP error code 16500 - When the change stream is throttled, it returns an empty page."), else the
    backend's batch reshaped."""
    cursor_id = int(command["getMore"])
    stream = state.cursors.stream(cursor_id)
    reached = stream_partitions(stream.collection, stream.partition_id)
    if stream.partition_id is not None and not reached:
        state.cursors.forget_stream(cursor_id)
        relay.run_on_backend(
            connection,
            {"killCursors": command.get("collection"), "cursors": [Int64(cursor_id)], "$db": command.get("$db")},
        )
        gone = partition_for(stream.collection, stream.low, stream.high)
        return 0.0, wire.error_document(CHANGE_STREAM_FATAL, str(gone), "ChangeStreamFatalError")
    if state.partitions.throttled_for_ms(reached) is not None:
        state.partitions.refuse(reached)
        empty = {
            "id": Int64(cursor_id),
            "ns": stream.collection.name,
            "nextBatch": [],
            "postBatchResumeToken": stream.token,
        }
        return 0.0, {"cursor": empty, "ok": 1.0}
    reply = relay.backend_reply(connection, request)
    if not reply.get("ok"):
        state.cursors.forget_stream(cursor_id)
        return 0.0, reply
    charge = reshape(state, stream, reply, "nextBatch")
    if not int(reply["cursor"].get("id", 0)):
        state.cursors.forget([cursor_id])
    return charge, reply


def reshape(state: StoreState, stream: StreamCursor, reply: Document, batch_name: str) -> float:
    """Cosmos DB's batch: only the stream's feed range, every document carrying one token that points after
    the batch; the charge of reading it."""
    cursor = reply["cursor"]
    batch = cursor.get(batch_name, []) or []
    after = cursor.get("postBatchResumeToken") or (batch[-1]["_id"] if batch else None)
    if after is not None:
        bounds = range_bound(stream.low), range_bound(stream.high)
        whole = stream.partition_id is None
        stream.token = streams.StreamToken(stream.rid, *bounds, streams.backend_state(after), whole).encode()
    cursor[batch_name] = [{**change, "_id": stream.token} for change in batch if _in_range(stream, change)]
    cursor["postBatchResumeToken"] = stream.token
    cursor_id = int(cursor.get("id", 0))
    if cursor_id:
        state.cursors.remember_stream(cursor_id, stream)
    reached = stream_partitions(stream.collection, stream.partition_id)
    charge = charges.request_charge("getMore", stream.collection.name, returned=charges.returned_sizes(reply))
    state.spend(stream.collection, reached, charge)
    return charge


def _in_range(stream: StreamCursor, change: Document) -> bool:
    """Whether a change belongs in the stream's batch: its document (looked up) lies in the stream's range."""
    document = change.get("fullDocument")
    if not isinstance(document, Mapping):
        return False  # deleted before its lookup: Cosmos DB has no such change to show
    key_hash = stream.collection.hash_of(dict(document))
    return stream.partition_id is None or stream.low <= key_hash < stream.high
