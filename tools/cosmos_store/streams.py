"""Change-stream resume tokens as Cosmos DB for MongoDB makes them (`StreamToken`), and the pipeline it requires
(`pipeline_problem`). How the store's partition streams use them: docs/cosmos-store.md, "What it models"."""

import base64
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bson.timestamp import Timestamp

RANGE_TYPE = "Effective Partition Key Range"
ALLOWED_OPERATIONS = {"insert", "update", "replace"}
REQUIRED_PROJECTION = ("_id", "fullDocument", "ns", "documentKey")


@dataclass(frozen=True)
class StreamToken:
    """A token: `{"_data": <bytes>, "_kind": 1}` whose bytes are JSON, as in the documented sample of
    `GetChangeStreamTokens` (https://learn.microsoft.com/azure/cosmos-db/mongodb/custom-commands, "Parallelizing
    change streams"), which decodes to

        {"V":2,"Rid":"PxUaALn0SKE=","Continuation":[{"FeedRange":{"type":"Effective Partition Key Range",
         "value":{"min":"","max":"FF"}},"State":{"type":"continuation","value":"\\"1844\\""}}]}

    Ours has the same shape: `Rid` names the collection, the one `Continuation` entry carries the feed range of
    the physical partition the token reads (min inclusive, max exclusive; "" and "FF" the ends of the hash space)
    and, as its state, where the backend's change stream is: the backend's own resume token, or `ts:<t>:<i>` for a
    stream that starts at an operation time. A stream opened without a token reads the whole collection; its
    tokens say so (`"Scope":"Collection"`, ours alone) and stay valid through splits."""

    rid: str
    low: str  # the feed range's min
    high: str  # its max
    state: str  # the backend position: its resume token's `_data`, or "ts:<t>:<i>"
    whole: bool = False  # a stream of the whole collection (opened without a partition's token)

    def encode(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "V": 2,
            "Rid": self.rid,
            "Continuation": [
                {
                    "FeedRange": {"type": RANGE_TYPE, "value": {"min": self.low, "max": self.high}},
                    "State": {"type": "continuation", "value": json.dumps(self.state)},
                }
            ],
        }
        if self.whole:
            document["Scope"] = "Collection"
        return {"_data": json.dumps(document, separators=(",", ":")).encode(), "_kind": 1}

    def backend_position(self) -> dict[str, Any]:
        """What the backend's `$changeStream` stage gets to start where this token points."""
        if self.state.startswith("ts:"):
            _, seconds, increment = self.state.split(":")
            return {"startAtOperationTime": Timestamp(int(seconds), int(increment))}
        return {"resumeAfter": {"_data": self.state}}


class NotOurToken(ValueError):
    """A resume token this store did not make (or one damaged on the way)."""


def decode_token(token: Any) -> StreamToken:
    if not isinstance(token, Mapping) or not isinstance(token.get("_data"), bytes | bytearray):
        raise NotOurToken(f"a resume token is {{_data: <binary JSON>, _kind: 1}} here, not {token!r:.200}")
    try:
        document = json.loads(bytes(token["_data"]))
        entry = document["Continuation"][0]
        value = entry["FeedRange"]["value"]
        state = json.loads(entry["State"]["value"])
        return StreamToken(document["Rid"], value["min"], value["max"], state, document.get("Scope") == "Collection")
    except (ValueError, KeyError, IndexError, TypeError) as error:
        raise NotOurToken(f"a resume token whose JSON is not a feed range and a state: {error}") from error


def collection_rid(full_name: str) -> str:
    """A collection's resource id, as Cosmos DB prints it (8 bytes, base64)."""
    return base64.b64encode(hashlib.md5(full_name.encode()).digest()[:8]).decode()


def backend_state(token: Mapping[str, Any]) -> str:
    """The backend's resume token as a token's state."""
    data = token.get("_data")
    if not isinstance(data, str):
        raise NotOurToken(f"the backend's resume token {token!r:.200} has no string _data")
    return data


def pipeline_problem(pipeline: list[Any], stage: Mapping[str, Any]) -> str | None:
    """Why Cosmos DB would refuse a change stream with this pipeline (after `$changeStream`), or None.

    https://learn.microsoft.com/azure/cosmos-db/mongodb/change-streams: "The $match stage, $project stage, and
    fullDocument option are required to get the change streams. Watching for delete operations using change
    streams is currently not supported." """
    if stage.get("fullDocument") != "updateLookup":
        return "a change stream needs the fullDocument option 'updateLookup'"
    matches = [s["$match"] for s in pipeline if isinstance(s, Mapping) and "$match" in s]
    projects = [s["$project"] for s in pipeline if isinstance(s, Mapping) and "$project" in s]
    if not matches or not projects:
        return "a change stream needs a $match stage on operationType and a $project stage"
    operations = next((ops for m in matches if (ops := _operations(m)) is not None), None)
    if operations is None or not operations or not operations <= ALLOWED_OPERATIONS:
        return (
            "a change stream's $match must limit operationType with $in to insert, update and replace "
            f"(deletes are not supported), not {operations}"
        )
    if any(not all(p.get(name) for name in REQUIRED_PROJECTION) for p in projects):
        return f"a change stream's $project must keep {', '.join(REQUIRED_PROJECTION)}"
    return None


def _operations(match: Mapping[str, Any]) -> set[str] | None:
    condition = match.get("operationType")
    if isinstance(condition, Mapping) and isinstance(condition.get("$in"), list):
        return {str(o) for o in condition["$in"]}
    for part in match.get("$and", []) or []:
        if isinstance(part, Mapping) and (found := _operations(part)) is not None:
            return found
    return None
