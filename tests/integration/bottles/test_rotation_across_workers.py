"""A key rotated on one worker is refused on every other, for every event kind, from the moment the rotation
answered. Workers are processes: the other worker here is a second Python process on the same SecantusDB server,
so nothing this process holds (a cached registry entry) can learn of the rotation except from the database."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from shared.instants import format_instant, utc_now
from shared.store import schema
from tests.api import SPEC, ago, closed, heartbeat, opened, post_events, provisioned, put_bottle

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]

# The other worker: one call of the app's HTTP functions, at this process's clock; prints the response.
_WORKER = """
import json, sys
from shared import instants
from tests.api import put_bottle, post_events
now = instants.parse_instant(sys.argv[1])
instants.set_clock(lambda: now)
call = json.loads(sys.argv[2])
if call["kind"] == "rotate":
    response = put_bottle(call["bottle_id"], rotate_key=True)
else:
    response = post_events(call["bottle_id"], call["key"], call["payload"])
print(json.dumps({"status": response.status, "body": response.body}))
"""


def on_other_worker(uri: str, db: Any, call: dict[str, Any]) -> dict[str, Any]:
    env = {
        **os.environ,
        "MONGODB_CONNECTION_STRING": uri,
        "MONGODB_DATABASE": db.name,
        "STORE_RETRY_BASE_MS": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", _WORKER, format_instant(utc_now()), json.dumps(call)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def stored(db: Any) -> tuple[int, dict[str, Any]]:
    """What a refused request must not change: the actions stored, and the bottle's status."""
    bottle = db[schema.BOTTLES].find_one({"_id": "bottle-1"}, {"last_action": 1, "last_action_time": 1, "_id": 0})
    return db[schema.BOTTLE_ACTIONS].count_documents({}), bottle


@pytest.mark.parametrize("kind", ["opened", "closed without a dose"])
def test_a_key_rotated_on_another_worker_is_refused_here_at_once(real_db, secantus_uri, kind):
    old_key = provisioned("bottle-1")
    # This worker has just served the old key: whatever it keeps of the bottle, it keeps it now.
    assert post_events("bottle-1", old_key, opened(ago(minutes=10), event_id="primed")).status == 202
    assert post_events("bottle-1", old_key, closed(ago(minutes=9), taken=0, event_id="primed-2")).status == 202

    rotated = on_other_worker(secantus_uri, real_db, {"kind": "rotate", "bottle_id": "bottle-1"})
    assert rotated["status"] == 200
    new_key = rotated["body"]["device_key"]

    before = stored(real_db)
    event = opened(ago(minutes=5)) if kind == "opened" else closed(ago(minutes=5), taken=0)
    response = post_events("bottle-1", old_key, event)
    assert response.status == 401, response.body
    assert response.body["error"] == "unknown bottle or wrong device key"
    assert stored(real_db) == before  # nothing stored, the status untouched
    assert post_events("bottle-1", old_key, heartbeat(ago(minutes=5))).status == 401

    # The new key works on both workers, for every kind; a plain PUT here afterwards keeps it working.
    assert post_events("bottle-1", new_key, opened(ago(minutes=4))).status == 202
    other = {"kind": "post", "bottle_id": "bottle-1", "key": new_key, "payload": closed(ago(minutes=3), taken=0)}
    assert on_other_worker(secantus_uri, real_db, other)["status"] == 202
    assert put_bottle("bottle-1", {**SPEC, "medication": "Hydrocodone"}).status == 200
    assert post_events("bottle-1", new_key, heartbeat(ago(minutes=2))).status == 202
    assert post_events("bottle-1", new_key, opened(ago(minutes=1))).status == 202
    assert stored(real_db)[0] == before[0] + 3
