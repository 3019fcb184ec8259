"""The README's local-server session and the API reference's examples work as written, on any date: each bash block
runs in bash, its curl commands against the local server (tools/serve.py, the app's registered functions on a store
of the test's own), with the shell's clock (`date`, `python3`'s `datetime.now`) placed at the app's clock; every
answer is compared with the one written beside it. The late-dose check and the report consumer run when the README
says they do. The sample documents in docs/checks.md and docs/reports.md are the ones the app stores for the story
they tell."""

import base64
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from shared import instants
from shared.store import schema
from tests.api import closed, opened, post_events, put_bottle
from tests.checking import World
from tests.report_client import aggregate, get_reports, use_change_source_of
from tools.local_host import LocalHost
from tools.serve import LocalServer

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
API = (ROOT / "docs" / "api.md").read_text()
CHECKS = (ROOT / "docs" / "checks.md").read_text()
REPORTS = (ROOT / "docs" / "reports.md").read_text()
ISODATE = re.compile(r'ISODate\("([^"]+)"\)')
README_BASE = "http://127.0.0.1:7071"
NOTIFICATIONS = "notifications"  # the queue NOTIFICATIONS_QUEUE names by default
STATUS_LINE = re.compile(r"#\s(\d{3})\s(.*)$")


# --- reading the docs ---------------------------------------------------------------------------------------


def section(text: str, heading: str) -> str:
    """The text under `heading`, up to the next heading (a `#` line inside a code block is not one)."""
    lines = text.splitlines()
    start = lines.index(heading)
    fenced = False
    for end in range(start + 1, len(lines)):
        fenced ^= lines[end].startswith("```")
        if not fenced and re.match(r"#{1,4} ", lines[end]):
            break
    else:
        end = len(lines)
    return "\n".join(lines[start:end])


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.DOTALL)


def annotations(block: str) -> list[tuple[int, str]]:
    """The answers a block is annotated with, in order: `# 202 {...}` after a command or on lines of its own,
    continued on the comment lines that follow."""
    found: list[tuple[int, str]] = []
    continuing = False
    for line in block.splitlines():
        match = STATUS_LINE.search(line)
        if match:
            found.append((int(match.group(1)), match.group(2)))
            continuing = line.lstrip().startswith("#")
        elif continuing and line.lstrip().startswith("#"):
            status, body = found[-1]
            found[-1] = (status, body + " " + line.lstrip()[1:].strip())
        else:
            continuing = False
    return found


def leading_object(text: str) -> str:
    """The `{...}` a sample answer starts with, without the words that may follow it."""
    depth, quoted = 0, False
    for i, char in enumerate(text):
        if char == '"' and text[i - 1] != "\\":
            quoted = not quoted
        elif not quoted and char in "{[":
            depth += 1
        elif not quoted and char in "}]":
            depth -= 1
            if depth == 0:
                return text[: i + 1]
    raise AssertionError(f"no whole object in the sample answer {text!r}")


def nested(value: Any) -> Iterator[dict[str, Any]]:
    """Every object in a JSON value, itself included."""
    if isinstance(value, dict):
        yield value
        for item in value.values():
            yield from nested(item)
    elif isinstance(value, list):
        for item in value:
            yield from nested(item)


LITERAL = r'"(\w+)"\s*:\s*("[^"<]*"|-?\d+(?:\.\d+)?|null|true|false)(?=\s*[,}])'


def assert_matches(sample: str, body: Any) -> None:
    """A sample answer is the body exactly when it is JSON; otherwise every field it names is in the body, and
    every field it gives a value (not "...") has that value."""
    text = leading_object(sample)
    try:
        expected = json.loads(text)
    except json.JSONDecodeError:
        pass
    else:
        assert body == expected
        return
    objects = list(nested(body))
    named = set(re.findall(r'"(\w+)"\s*:', text)) | set(re.findall(r'[{,]\s*"(\w+)"\s*(?=[,}])', text))
    assert named, f"the sample {text!r} names no field"
    missing = [name for name in named if not any(name in o for o in objects)]
    assert not missing, f"{missing} not in {body}"
    for name, literal in re.findall(LITERAL, text):
        if "..." in literal:
            continue
        value = json.loads(literal)
        assert any(o.get(name, object()) == value for o in objects), f'"{name}": {literal} not in {body}'


# --- the shell --------------------------------------------------------------------------------------------------

PYTHON_SHIM = """#!{python}
# python3 with datetime.now() at the instant in $PLACED_NOW_FILE: the app's clock, not the wall clock.
import datetime, os, sys
_real = datetime.datetime
class _Placed(_real):
    @classmethod
    def now(cls, tz=None):
        placed = _real.fromisoformat(open(os.environ["PLACED_NOW_FILE"]).read().strip())
        return placed if tz is None else placed.astimezone(tz)
datetime.datetime = _Placed
assert sys.argv[1] == "-c", sys.argv
code, sys.argv = sys.argv[2], ["-c", *sys.argv[3:]]
exec(compile(code, "<string>", "exec"), {{"__name__": "__main__"}})
"""
DATE_SHIM = """#!/bin/sh
# date at the instant in $PLACED_NOW_FILE.
exec {date} -d "$(cat "$PLACED_NOW_FILE")" "$@"
"""
CURL_SHIM = """#!/bin/bash
# curl, recording each answer's status and body in $CURL_LOG.
body=$(mktemp)
status=$({curl} -o "$body" -w '%{{http_code}}' "$@") || exit $?
cat "$body"
printf '%s %s\\n' "$status" "$(base64 -w0 < "$body")" >> "$CURL_LOG"
rm -f "$body"
"""


class Shell:
    """Bash sessions whose variables and functions carry from one block to the next, as in one terminal."""

    def __init__(self, directory: Path, base_url: str) -> None:
        self.directory = directory
        self.base_url = base_url
        for tool in ("bash", "curl", "date"):
            assert shutil.which(tool), f"the README's examples need {tool}, which is not on PATH"
        shims = directory / "bin"
        shims.mkdir()
        for name, text in {
            "python3": PYTHON_SHIM.format(python=sys.executable),
            "date": DATE_SHIM.format(date=shutil.which("date")),
            "curl": CURL_SHIM.format(curl=shutil.which("curl")),
        }.items():
            (shims / name).write_text(text)
            (shims / name).chmod(0o755)
        self.state = directory / "state.sh"
        self.state.write_text("")
        self.log = directory / "curl.log"
        self.clock = directory / "now"
        self.env = {
            **os.environ,
            "PATH": f"{shims}:{os.environ['PATH']}",
            "PLACED_NOW_FILE": str(self.clock),
            "CURL_LOG": str(self.log),
        }

    def run(self, block: str, now: datetime) -> list[tuple[int, Any]]:
        """Run a block at `now` (the shell's clock); each curl's answer, in order."""
        self.clock.write_text(now.isoformat())
        self.log.write_text("")
        script = (
            f"set -eo pipefail\nset -a\nsource {self.state}\n"
            + block.replace(README_BASE, self.base_url)
            + f"\n{{ export -p; declare -f; }} > {self.state}.new\n"
        )
        done = subprocess.run(
            ["bash", "-c", script], check=False, env=self.env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, f"{block}\nfailed: {done.stderr}"
        (self.directory / "state.sh.new").replace(self.state)
        answers = []
        for line in self.log.read_text().splitlines():
            status, _, body = line.partition(" ")
            answers.append((int(status), json.loads(base64.b64decode(body)) if body else None))
        return answers

    def variable(self, name: str) -> str:
        found = re.search(rf'^declare -x {name}="([^"]*)"$', self.state.read_text(), re.MULTILINE)
        assert found, f"the session set no {name}"
        return found.group(1)


def assert_answers(block: str, answers: list[tuple[int, Any]]) -> None:
    samples = annotations(block)
    assert len(samples) == len(answers), f"{len(answers)} answers, {len(samples)} written in\n{block}"
    for (status, sample), (got, body) in zip(samples, answers, strict=True):
        assert got == status, (sample, body)
        assert_matches(sample, body)


# --- the README's session, at instants that cross a minute, an hour and a day ----------------------------------


def five_minute_mark_at_or_after(moment: datetime) -> datetime:
    mark = moment.replace(minute=moment.minute - moment.minute % 5, second=0, microsecond=0)
    return mark if mark >= moment else mark + timedelta(minutes=5)


@pytest.fixture
def server(mock_db, registered_functions, monkeypatch) -> Iterator[LocalServer]:
    use_change_source_of(mock_db, monkeypatch)
    running = LocalServer(LocalHost.load(), ("127.0.0.1", 0), timers=False, queue_workers=0)
    running.start()
    yield running
    running.stop()


@pytest.mark.parametrize(
    "start",
    [
        None,  # the app's clock as the suite placed it (PILLBOTTLE_TEST_CLOCK_START), or the real one
        datetime(2026, 11, 21, 7, 58, 20, tzinfo=UTC),
        datetime(2026, 12, 31, 23, 58, 50, tzinfo=UTC),  # the doses fall in the next day, and year
        datetime(2027, 3, 28, 0, 59, 30, tzinfo=UTC),  # the next hour; Europe's DST change
    ],
    ids=["now", "morning", "year-end", "hour-end"],
)
def test_the_readme_session_runs_as_written_and_tells_its_story(mock_db, server, tmp_path, start):
    begin = start or instants.utc_now()
    world = World(mock_db, begin)
    try:
        shell = Shell(tmp_path, server.base_url)
        session, later = (b for b in blocks(section(README, "## The local server"), "bash") if "curl" in b)

        assert_answers(session, shell.run(session, world.now))

        missed = datetime.fromisoformat(shell.variable("MISSED") + ":00+00:00")
        world.at(five_minute_mark_at_or_after(missed + timedelta(minutes=1)))  # its grace; the check's next run
        assert world.now - begin <= timedelta(minutes=10), "the README says: within about 10 minutes"
        messages = run_timer(server, "check_late_doses", NOTIFICATIONS)
        run_timer(server, "aggregate_reports")
        assert [(m["notification_id"], m["kind"]) for m in messages] == [
            (f"bottle-42|late_dose|{instants.format_instant(missed)}", "late_dose")
        ]
        assert_answers(later, shell.run(later, world.now))
        hour = datetime.fromisoformat(shell.variable("TAKEN") + ":00+00:00").replace(minute=0)
        assert heartbeats_reported(hour) == 0, "the README says: 0 until the hour has closed"

        now_hour = datetime.fromisoformat(shell.variable("NOW") + ":00+00:00").replace(minute=0)
        world.at(now_hour + timedelta(hours=1, minutes=10))  # about 10 minutes after the heartbeat's hour
        run_timer(server, "aggregate_reports")
        assert heartbeats_reported(now_hour) == 1

        for block in blocks(API, "bash"):
            assert_answers(block, shell.run(block, world.now))
    finally:
        world.stop()


def run_timer(server: LocalServer, name: str, queue: str | None = None) -> list[dict[str, Any]]:
    """A timer's run as `./dev serve` makes it, its work messages delivered; what it sent on `queue`, parsed."""
    before = len(server.host.service.sent().get(queue or "", []))
    server.host.run_timer(name)
    server.host.deliver()
    return [json.loads(body) for body in server.host.service.sent().get(queue or "", [])[before:]]


def heartbeats_reported(hour: datetime) -> int:
    period = {"from": instants.format_instant(hour), "to": instants.format_instant(hour + timedelta(hours=1))}
    response = get_reports("willcross1024", **period)
    assert response.status == 200, response.body
    return sum(report["heartbeats"] for report in response.body["reports"])


# --- the stored samples ---------------------------------------------------------------------------------------


def stored_as_in_docs(document: dict[str, Any]) -> dict[str, Any]:
    """A stored document with its dates as the docs write them, `ISODate("...Z")`, read back as instants."""
    return {
        k: v.replace(tzinfo=UTC) if isinstance(v, datetime) and v.tzinfo is None else v for k, v in document.items()
    }


def docs_document(text: str) -> dict[str, Any]:
    dates = set(ISODATE.findall(text))
    document = json.loads(ISODATE.sub(r'"\1"', text))
    return {k: instant(v) if isinstance(v, str) and v in dates else v for k, v in document.items()}


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.fixture
def story(mock_db, monkeypatch):
    """docs/checks.md's bottle: provisioned before the day's first dose with the schedule the page gives, the
    08:00 dose taken in Rome (07:02 UTC), the 20:00 one missed, the late-dose check when its grace ran out."""
    use_change_source_of(mock_db, monkeypatch)
    text = section(CHECKS, "## The notification document")
    schedule = json.loads(re.search(r"scheduled `(\{.*?\})`", text, re.DOTALL).group(1).replace("\n", " "))  # type: ignore[union-attr]
    world = World(mock_db, datetime(2026, 11, 21, 6, 0, tzinfo=UTC))
    created = put_bottle("bottle-42", {"user_id": "willcross1024", "medication": "Cordrazine", "schedule": schedule})
    assert created.status == 201, created.body
    world.at(datetime(2026, 11, 21, 7, 5, tzinfo=UTC))
    taken = datetime(2026, 11, 21, 7, 2, 40, tzinfo=UTC)
    posted = post_events(
        "bottle-42", created.body["device_key"], {"events": [opened(taken - timedelta(seconds=30)), closed(taken)]}
    )
    assert posted.status == 202, posted.body
    world.at(datetime(2026, 11, 21, 20, 0, tzinfo=UTC))
    messages = world.check("late_dose")
    world.after(minutes=5)
    aggregate()
    yield {"db": mock_db, "messages": messages}
    world.stop()


def test_the_notification_document_is_the_one_the_late_dose_check_stores(story):
    sample = docs_document(blocks(section(CHECKS, "## The notification document"), "json")[0])

    stored = story["db"][schema.NOTIFICATIONS].find_one({"_id": sample["_id"]})

    assert stored is not None, [n["_id"] for n in story["db"][schema.NOTIFICATIONS].find()]
    assert stored_as_in_docs(stored) == sample


def test_the_queue_message_is_the_one_the_check_sends(story):
    sample = json.loads(blocks(section(CHECKS, "## The queue message"), "json")[0])

    assert story["messages"] == [sample]


def test_the_sample_hourly_report_id_is_the_sample_dose_hour(story):
    ids = [doc["_id"] for doc in story["db"][schema.USER_HOURLY_REPORTS].find()]
    table = section(REPORTS, "## `user_hourly_reports`: one document per user per UTC hour")
    sample = re.search(r"e\.g\. `([^`]+)`", table).group(1)  # type: ignore[union-attr]

    assert [sample.replace("\\|", "|")] == ids
