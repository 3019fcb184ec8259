"""The archive's files as Parquet: the only module that imports pyarrow, imported only by the code that writes or
reads the archive (never at an HTTP cold start: tests/archive/test_storage.py holds it to that).

The schemas are the columns of shared/archive/layout.py with their types: times as UTC timestamps in milliseconds
(what BSON keeps), `pills_taken` nullable (null for `opened`), `slots` a list of the minutes each 5-minute slot
starts at. Files are Snappy-compressed (every reader named in docs/archive.md takes it) and written with fixed
options, so the same rows in the same order make the same file."""

import io
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from shared.archive.layout import ACTION_COLUMNS, HEARTBEAT_COLUMNS

_TIME = pa.timestamp("ms", tz="UTC")
ACTION_SCHEMA = pa.schema(
    [
        pa.field("bottle_id", pa.string(), nullable=False),
        pa.field("user_id", pa.string(), nullable=False),
        pa.field("medication", pa.string(), nullable=False),
        pa.field("time", _TIME, nullable=False),
        pa.field("action", pa.string(), nullable=False),
        pa.field("mass_of_contents", pa.float64(), nullable=False),
        pa.field("number_of_pills", pa.int64(), nullable=False),
        pa.field("pills_taken", pa.int64(), nullable=True),
        pa.field("received_at", _TIME, nullable=False),
    ]
)
HEARTBEAT_SCHEMA = pa.schema(
    [
        pa.field("bottle_id", pa.string(), nullable=False),
        pa.field("user_id", pa.string(), nullable=False),
        pa.field("hour", _TIME, nullable=False),
        pa.field("slots", pa.list_(pa.field("minute", pa.int8(), nullable=False)), nullable=False),
    ]
)
assert tuple(ACTION_SCHEMA.names) == ACTION_COLUMNS
assert tuple(HEARTBEAT_SCHEMA.names) == HEARTBEAT_COLUMNS


def encode(schema: pa.Schema, rows: Iterable[Mapping[str, Any]]) -> bytes:
    """A Parquet file of `rows` (mappings with the schema's columns), in the order given."""
    table = pa.Table.from_pylist([{name: row.get(name) for name in schema.names} for row in rows], schema=schema)
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="snappy", write_statistics=True, store_schema=False)
    return sink.getvalue()


def encode_actions(rows: Iterable[Mapping[str, Any]]) -> bytes:
    return encode(ACTION_SCHEMA, rows)


def encode_heartbeats(rows: Iterable[Mapping[str, Any]]) -> bytes:
    return encode(HEARTBEAT_SCHEMA, rows)


def decode(data: bytes) -> list[dict[str, Any]]:
    """The rows of a Parquet file, as dicts (times as aware UTC datetimes)."""
    rows: list[dict[str, Any]] = pq.read_table(io.BytesIO(data)).to_pylist()
    return rows
