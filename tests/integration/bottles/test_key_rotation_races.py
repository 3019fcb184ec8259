"""Key rotation racing other PUTs of the same bottle, on a real server (SecantusDB): a bottle's key lives in the
registry (opened/closed events check it there) and in its heartbeat document (heartbeats check it inside their own
write). Whatever the interleaving of rotations, plain updates and reassignments, afterwards exactly one key works,
for every event kind, and it is the last one a rotation returned; a rotated-out key is refused from the moment
its rotation answered.

Each trial starts its PUTs on threads that meet at a barrier, so they overlap; PILLBOTTLE_KEY_RACE_TRIALS sets the
number of trials (default 25; the rule was checked at 100)."""

import os
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from shared.bottles import provisioning
from tests.api import SPEC, Response, ago, closed, heartbeat, opened, post_events, provisioned, put_bottle
from tests.fake_time import QUIET_HOUR
from tests.threads import at_once
from tools.local_host import invoking_thread_name

# Races of requests a few minutes apart at most: no hour, day or block ending can matter to them, so their clock
# runs from a fixed quiet hour (the clock matrix covers the same requests in tests/bottles and tests/ingestion).
pytestmark = [pytest.mark.integration, pytest.mark.own_clock(QUIET_HOUR)]

TRIALS = int(os.environ.get("PILLBOTTLE_KEY_RACE_TRIALS", "25"))


def statuses(bottle_id: str, key: str, minute: int) -> dict[str, int]:
    """What a device holding `key` gets for each kind of event, sent one kind a request."""
    events = {
        "heartbeat": heartbeat(ago(minutes=minute)),
        "opened": opened(ago(minutes=minute), event_id=f"o-{key[:8]}-{minute}"),
        "closed": closed(ago(minutes=minute), event_id=f"c-{key[:8]}-{minute}"),
    }
    return {kind: post_events(bottle_id, key, event).status for kind, event in events.items()}


ACCEPTED = {"heartbeat": 202, "opened": 202, "closed": 202}
REFUSED = {"heartbeat": 401, "opened": 401, "closed": 401}


def rotation(bottle_id: str, spec: dict[str, Any], revoked: str) -> Callable[[], tuple[str, int]]:
    """A rotation, then at once a heartbeat under the key it replaced: (the new key, that heartbeat's status)."""

    def rotate() -> tuple[str, int]:
        response = put_bottle(bottle_id, spec, rotate_key=True)
        assert response.status == 200, response.body
        return str(response.body["device_key"]), post_events(bottle_id, revoked, heartbeat(ago(minutes=30))).status

    return rotate


def update(bottle_id: str, spec: dict[str, Any]) -> Callable[[], Response]:
    return lambda: put_bottle(bottle_id, spec)


def test_a_rotation_racing_updates_and_a_reassignment_leaves_only_its_key(real_db):
    failures = []
    for trial in range(TRIALS):
        bottle_id = f"bottle-{trial}"
        first = provisioned(bottle_id)
        (new, revoked_heartbeat), *others = at_once(
            rotation(bottle_id, SPEC, first),
            update(bottle_id, {**SPEC, "medication": "Hyronalin"}),
            update(bottle_id, {**SPEC, "user_id": "someone-else"}),
        )
        assert all(r.status == 200 for r in others), [r.body for r in others]
        found = {"first": statuses(bottle_id, first, 2), "rotated": statuses(bottle_id, new, 1)}
        if (found, revoked_heartbeat) != ({"first": REFUSED, "rotated": ACCEPTED}, 401):
            failures.append((trial, found, revoked_heartbeat))
    assert failures == [], f"{len(failures)} of {TRIALS} trials left the wrong key working: {failures[:3]}"


def test_two_rotations_racing_an_update_leave_one_key_for_every_kind(real_db):
    failures = []
    for trial in range(TRIALS):
        bottle_id = f"bottle-{trial}"
        first = provisioned(bottle_id)
        (key_a, _), (key_b, _), plain = at_once(
            rotation(bottle_id, SPEC, first),
            rotation(bottle_id, SPEC, first),
            update(bottle_id, {**SPEC, "medication": "Hyronalin"}),
        )
        assert plain.status == 200
        found = {
            name: statuses(bottle_id, key, 3 - i)
            for i, (name, key) in enumerate([("first", first), ("a", key_a), ("b", key_b)])
        }
        working = [name for name, answers in found.items() if answers == ACCEPTED]
        refused = [name for name, answers in found.items() if answers == REFUSED]
        if len(working) != 1 or len(refused) != 2 or working == ["first"]:
            failures.append((trial, found))
    assert failures == [], f"{len(failures)} of {TRIALS} trials left keys out of step: {failures[:3]}"


def test_a_plain_put_that_read_the_bottle_before_a_rotation_cannot_put_the_old_key_back(real_db, monkeypatch):
    """The race forced: a plain PUT updates the registry, then pauses before it writes the heartbeat document; a
    rotation runs and answers meanwhile; then the plain PUT goes on. The rotation's key is the one that works."""
    first = provisioned("bottle-1")
    paused, resume = threading.Event(), threading.Event()
    real_sync = provisioning._sync_heartbeat_document

    def sync(*args: Any, **kwargs: Any) -> Any:
        if invoking_thread_name() == "plain":
            paused.set()
            assert resume.wait(timeout=30)
        return real_sync(*args, **kwargs)

    monkeypatch.setattr(provisioning, "_sync_heartbeat_document", sync)
    answers: list[Response] = []
    plain = threading.Thread(
        target=lambda: answers.append(put_bottle("bottle-1", {**SPEC, "medication": "Hyronalin"})), name="plain"
    )
    plain.start()
    assert paused.wait(timeout=30)

    new, revoked_heartbeat = rotation("bottle-1", SPEC, first)()
    resume.set()
    plain.join(timeout=30)

    assert [a.status for a in answers] == [200]
    assert revoked_heartbeat == 401
    assert statuses("bottle-1", first, 2) == REFUSED
    assert statuses("bottle-1", new, 1) == ACCEPTED


def test_creates_racing_a_rotation_of_a_new_bottle_leave_only_the_rotations_key(real_db):
    """Two creates and a rotation of a bottle that does not exist yet: one of them inserts it; whichever it was,
    the rotation's key is the one that works afterwards, and a key the create answered is refused."""
    failures = []
    for trial in range(TRIALS):
        bottle_id = f"bottle-{trial}"
        answers = at_once(
            partial(put_bottle, bottle_id, rotate_key=True),
            partial(put_bottle, bottle_id),
            partial(put_bottle, bottle_id, {**SPEC, "medication": "Hyronalin"}),
        )
        assert sorted(a.status for a in answers) == [200, 200, 201], [a.body for a in answers]
        rotated = str(answers[0].body["device_key"])
        created = [str(a.body["device_key"]) for a in answers[1:] if a.status == 201]
        found = {"rotated": statuses(bottle_id, rotated, 2)}
        if created:  # a plain create won the insert: its key was the bottle's until the rotation
            found["created"] = statuses(bottle_id, created[0], 1)
        if found["rotated"] != ACCEPTED or found.get("created", REFUSED) != REFUSED:
            failures.append((trial, found))
    assert failures == [], f"{len(failures)} of {TRIALS} trials left the wrong key working: {failures[:3]}"
