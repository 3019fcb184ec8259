"""A reassignment (PUT /api/bottles/{bottle_id} with another user_id) whose guarded write of the heartbeat document
finds it changed since it was read (shared/bottles/provisioning.py, `_reassign`): it reads the document again and
records the new owner on what is there now."""

from typing import Any

from shared.bottles import provisioning
from shared.devices.heartbeat_document import RING_TIME
from shared.store import schema
from tests.api import SPEC, ago, provisioned, put_bottle


def test_a_heartbeat_written_between_a_reassignments_read_and_its_write_still_leaves_the_new_owner_recorded(
    db: Any, monkeypatch: Any
) -> None:
    """A ring write (here its `r` moved on) lands after the PUT read the document: the first guarded write
    matches nothing, the second round reads again, and the new owner and the earlier one are both recorded."""
    provisioned("bottle-0")  # another bottle's document: the read again is of this bottle's
    provisioned()
    real = provisioning._reassign

    def ring_write_first(collection: Any, *args: Any, **kwargs: Any) -> None:
        collection.update_one({"_id": "bottle-1"}, {"$set": {RING_TIME: ago(seconds=1)}})
        real(collection, *args, **kwargs)

    monkeypatch.setattr(provisioning, "_reassign", ring_write_first)

    assert put_bottle("bottle-1", {**SPEC, "user_id": "newowner"}).status == 200
    document = db[schema.BOTTLE_HEARTBEATS].find_one({"_id": "bottle-1"})
    assert document["user_id"] == "newowner"
    assert [owner["user_id"] for owner in document["owners"]] == [SPEC["user_id"]]
