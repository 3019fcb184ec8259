"""A key rotated on one worker is refused on every other, for every event kind, from the moment the rotation
answered. Workers are processes: the other worker here is a second Python process on the same SecantusDB server,
so nothing this process holds (a cached registry entry) can learn of the rotation except from the database."""

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from shared.instants import format_instant, utc_now
from shared.store import schema
from tests.api import SPEC, ago, closed, heartbeat, opened, post_events, provisioned, put_bottle

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]

# The other worker: a call of the app's HTTP functions per line of stdin, at the clock the line gives; prints each
# response as a line.
_WORKER = """
import json, sys
from shared import instants
from tests.api import put_bottle, post_events
for line in sys.stdin:
    call = json.loads(line)
    now = instants.parse_instant(call["now"])
    instants.set_clock(lambda: now)
    if call["kind"] == "rotate":
        response = put_bottle(call["bottle_id"], rotate_key=True)
    else:
        response = post_events(call["bottle_id"], call["key"], call["payload"])
    print(json.dumps({"status": response.status, "body": response.body}), flush=True)
"""


class OtherWorker:
    """The second process: `call` sends it one call, at this process's clock, and returns its response."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process

    def call(self, call: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write(json.dumps({**call, "now": format_instant(utc_now())}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, self.process.stderr.read() if self.process.stderr is not None else "the other worker ended"
        answer: dict[str, Any] = json.loads(line)
        return answer


@contextmanager
def other_worker(uri: str, db: Any) -> Iterator[OtherWorker]:
    env = {
        **os.environ,
        "MONGODB_CONNECTION_STRING": uri,
        "MONGODB_DATABASE": db.name,
        "STORE_RETRY_BASE_MS": "1",
    }
    process = subprocess.Popen(
        [sys.executable, "-c", _WORKER],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield OtherWorker(process)
    finally:
        assert process.stdin is not None
        process.stdin.close()
        try:
            assert process.wait(timeout=120) == 0, process.stderr.read() if process.stderr is not None else ""
        finally:
            process.kill()
            for stream in (process.stdout, process.stderr):
                if stream is not None:
                    stream.close()


def stored(db: Any) -> tuple[int, dict[str, Any]]:
    """What a refused request must not change: the actions stored, and the bottle's status."""
    bottle = db[schema.BOTTLES].find_one({"_id": "bottle-1"}, {"last_action": 1, "last_action_time": 1, "_id": 0})
    return db[schema.BOTTLE_ACTIONS].count_documents({}), bottle


def test_a_key_rotated_on_another_worker_is_refused_here_at_once(real_db, secantus_uri):
    """Every kind sent with the old key is refused and changes nothing: an opened event, a closed one without a
    dose (each read the registry), a heartbeat (checked inside its own write). One other worker serves both of
    its calls, the rotation and a later event: a process costs seconds to start, and what it holds between the
    two calls is what a worker would."""
    old_key = provisioned("bottle-1")
    # This worker has just served the old key: whatever it keeps of the bottle, it keeps it now.
    assert post_events("bottle-1", old_key, opened(ago(minutes=10), event_id="primed")).status == 202
    assert post_events("bottle-1", old_key, closed(ago(minutes=9), taken=0, event_id="primed-2")).status == 202

    with other_worker(secantus_uri, real_db) as other:
        rotated = other.call({"kind": "rotate", "bottle_id": "bottle-1"})
        assert rotated["status"] == 200
        new_key = rotated["body"]["device_key"]

        before = stored(real_db)
        for event in (opened(ago(minutes=5)), closed(ago(minutes=5), taken=0), heartbeat(ago(minutes=5))):
            response = post_events("bottle-1", old_key, event)
            assert response.status == 401, (event, response.body)
            assert response.body["error"] == "unknown bottle or wrong device key"
            assert stored(real_db) == before  # nothing stored, the status untouched

        # The new key works on both workers, for every kind; a plain PUT here afterwards keeps it working.
        assert post_events("bottle-1", new_key, opened(ago(minutes=4))).status == 202
        payload = closed(ago(minutes=3), taken=0)
        assert (
            other.call({"kind": "post", "bottle_id": "bottle-1", "key": new_key, "payload": payload})["status"] == 202
        )
    assert put_bottle("bottle-1", {**SPEC, "medication": "Hydrocodone"}).status == 200
    assert post_events("bottle-1", new_key, heartbeat(ago(minutes=2))).status == 202
    assert post_events("bottle-1", new_key, opened(ago(minutes=1))).status == 202
    assert stored(real_db)[0] == before[0] + 3
