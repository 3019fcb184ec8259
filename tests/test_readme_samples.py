"""The README's samples are what the app does: its bottle-42 story (provisioned, the morning dose taken, the
evening dose missed) played through the real functions, and every sample body compared with what they return."""

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from functions import notifications as notification_functions
from shared.store import schema
from tests.api import _call, post_events, put_bottle
from tests.checking import World
from tests.report_client import aggregate, get_reports, use_change_source_of

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()
_get_notifications = notification_functions.get_user_notifications.build().get_user_function()
ISODATE = re.compile(r'ISODate\("([^"]+)"\)')


def section(heading: str) -> str:
    """The README's text under `heading`, up to the next heading (a `#` line inside a code block is not one)."""
    lines = README.splitlines()
    start = lines.index(heading)
    fenced = False
    for end in range(start + 1, len(lines)):
        fenced ^= lines[end].startswith("```")
        if not fenced and re.match(r"#{1,4} ", lines[end]):
            break
    else:
        end = len(lines)
    return "\n".join(lines[start:end])


def block(heading: str, language: str) -> str:
    found = re.search(rf"```{language}\n(.*?)```", section(heading), re.DOTALL)
    assert found, f"no {language} block under {heading}"
    return found.group(1)


def first(pattern: str, text: str) -> str:
    """The first group of `pattern`'s first match in `text` (which must have one)."""
    found = re.search(pattern, text, re.DOTALL | re.MULTILINE)
    assert found, (pattern, text)
    return found.group(1)


def request_body(command: str) -> Any:
    """The JSON a sample curl command sends (`-d '...'`)."""
    return json.loads(first(r"-d '(.*?)'", command))


def query(command: str) -> dict[str, str]:
    url = first(r'"\$BASE(/api/[^"]+)"', command)
    return {k: v for k, v in parse_qsl(urlsplit(url).query) if k != "code"}


def answer(command: str) -> tuple[int, str]:
    """The sample answer a curl command is annotated with, `# 202 {...}`, over one or more comment lines."""
    text = first(r"^(# \d{3} .*?)$(?!\n#\s)", command)
    status, _, body = re.sub(r"\n#\s+", " ", text).removeprefix("# ").partition(" ")
    return int(status), body


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def stored_as_in_readme(document: dict[str, Any]) -> dict[str, Any]:
    """A stored document with its dates as the README writes them, `ISODate("...Z")`, read back as instants."""
    return {
        k: v.replace(tzinfo=UTC) if isinstance(v, datetime) and v.tzinfo is None else v for k, v in document.items()
    }


def readme_document(text: str) -> dict[str, Any]:
    dates = set(ISODATE.findall(text))
    document = json.loads(ISODATE.sub(r'"\1"', text))
    return {k: instant(v) if isinstance(v, str) and v in dates else v for k, v in document.items()}


@pytest.fixture
def story(mock_db, monkeypatch):
    """The README's bottle: provisioned before the day's first dose, the sample events posted just after
    08:00 in Rome, then the late-dose check at the end of the evening dose's grace."""
    use_change_source_of(mock_db, monkeypatch)
    world = World(mock_db, datetime(2026, 11, 21, 6, 0, tzinfo=UTC))
    provision = block("### Provision or update a bottle: `PUT /api/bottles/{bottle_id}`", "bash")
    bottle_id = first(r"/api/bottles/([\w-]+)", provision)
    created = put_bottle(bottle_id, request_body(provision))
    assert created.status == 201, created.body
    events = block("### Report events: `POST /api/bottles/{bottle_id}/events`", "bash")
    world.at(datetime(2026, 11, 21, 7, 5, tzinfo=UTC))
    posted = post_events(bottle_id, created.body["device_key"], request_body(events))
    world.at(datetime(2026, 11, 21, 20, 0, tzinfo=UTC))
    messages = world.check("late_dose")
    world.after(minutes=5)
    aggregate()
    yield {"db": mock_db, "bottle_id": bottle_id, "events": events, "posted": posted, "messages": messages}
    world.stop()


def test_the_sample_events_are_answered_as_the_readme_says(story):
    status, body = answer(story["events"])

    assert (story["posted"].status, story["posted"].body) == (status, json.loads(body))


def test_the_notification_document_is_the_one_the_late_dose_check_stores(story):
    sample = readme_document(block("### The notification document", "json"))

    stored = story["db"][schema.NOTIFICATIONS].find_one({"_id": sample["_id"]})

    assert stored is not None, [n["_id"] for n in story["db"][schema.NOTIFICATIONS].find()]
    assert stored_as_in_readme(stored) == sample


def test_the_queue_message_is_the_one_the_check_sends(story):
    sample = json.loads(block("### The queue message", "json"))

    assert story["messages"] == [sample]


def test_the_notifications_read_back_have_the_fields_the_readme_lists(story):
    command = block("### Reading notifications: `GET /api/users/{user_id}/notifications`", "bash")
    user_id = first(r"/api/users/([\w-]+)/", command)
    status, shape = answer(command)
    listed = first(r"\[\{(.*?)\}", shape)

    response = _call(_get_notifications, "GET", "/", {"user_id": user_id}, params=query(command))

    assert response.status == status
    assert set(response.body) == set(re.findall(r'"(\w+)":', shape.replace(listed, "")))
    assert [set(n) for n in response.body["notifications"]] == [set(re.findall(r'"(\w+)"', listed))]


def test_the_sample_hourly_report_is_the_one_the_consumer_makes_of_the_sample_events(story):
    command = block("### Reading reports: `GET /api/users/{user_id}/reports`", "bash")
    user_id = first(r"/api/users/([\w-]+)/", command)
    status, sample = answer(command)
    top, _, first_report = sample.partition('"reports"')
    pairs = r'"(\w+)": ("[^"]*"|\d+)'

    response = get_reports(user_id, **query(command))

    assert response.status == status
    assert {k: json.loads(v) for k, v in re.findall(pairs, top)} == {
        k: response.body[k] for k, _ in re.findall(pairs, top)
    }
    report = response.body["reports"][0]
    assert {k: json.loads(v) for k, v in re.findall(pairs, first_report)} == {
        k: report[k] for k, _ in re.findall(pairs, first_report)
    }


def test_the_sample_hourly_report_id_is_the_sample_events_hour(story):
    ids = [doc["_id"] for doc in story["db"][schema.USER_HOURLY_REPORTS].find()]
    table = section("### `user_hourly_reports`: one document per user per UTC hour in which anything happened")
    sample = first(r"e\.g\. `([^`]+)`", table)

    assert [sample.replace("\\|", "|")] == ids
