"""What a PUT /api/bottles/{bottle_id} sends to a real server (SecantusDB): a PUT of what is stored already (a
retry) reads and writes nothing else, and leaves both of the bottle's documents byte for byte as they were."""

from typing import Any

import pytest
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument

from shared.store import schema
from tests.api import SPEC, ago, heartbeat, opened, post_events, provisioned, put_bottle

pytestmark = pytest.mark.integration


def stored_bytes(db: Any) -> tuple[bytes, bytes]:
    """The bottle's and its heartbeat document's BSON, as the server holds them."""
    raw = CodecOptions(document_class=RawBSONDocument)
    bottle, heartbeats = (
        db.get_collection(name, codec_options=raw).find_one({"_id": "bottle-1"}).raw
        for name in (schema.BOTTLES, schema.BOTTLE_HEARTBEATS)
    )
    return bottle, heartbeats


def test_a_put_of_what_is_stored_already_issues_no_write_and_leaves_both_documents_byte_identical(counted):
    db, counter = counted
    key = provisioned()
    assert post_events("bottle-1", key, {"events": [heartbeat(ago(minutes=3)), opened(ago(minutes=2))]}).status == 202
    changed = put_bottle("bottle-1", {**SPEC, "medication": "Tri-ox"})
    assert changed.status == 200
    before = stored_bytes(db)
    counter.reset()

    retried = put_bottle("bottle-1", {**SPEC, "medication": "Tri-ox"})

    assert (retried.status, retried.body) == (200, changed.body)
    assert counter.writes == []
    assert counter.reads == [("find", schema.BOTTLES), ("find", schema.BOTTLE_HEARTBEATS)]
    assert stored_bytes(db) == before
