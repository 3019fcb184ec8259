"""`./dev bench` on a loaded machine: the benchmarks' own store calls wait as long as the app's settings allow
(a quick run died after 5.5 minutes on `cannot reach the database: ... timed out`), and a part that fails leaves
the parts that finished printed, and names itself in the one line of the failure (that run printed nothing)."""

import socket
from collections.abc import Iterator

import pytest
from pymongo import MongoClient

from benchmarks import suite
from benchmarks.harness import installed_store, print_table, secantus_server
from shared.settings import get_settings
from tools import command

BATCH_HEADER = ["approach", "events/s", "vs one insert", "vs insert_many", "commands/event", "fewer commands",
                "CPU ms/event"]  # fmt: skip


def a_finished_part() -> suite.Part:
    """A part whose table (the ingestion batch table's shape) is printed as a measured one is."""
    rows = [
        ["seeds: one insert per event, one event per request", "906", "1.00x", "0.19x", "1.000", "0.0x", "0.869"],
        ["seeds: insert_many of each request's 100 events", "4,682", "5.17x", "1.00x", "0.010", "1.0x", "0.158"],
        ["app: batches of 100", "4,257", "4.70x", "0.91x", "0.050", "0.2x", "0.178"],
    ]
    return suite.Part(
        "ingestion", "Ingestion", lambda: print_table("Ingestion, batches of 100 (4000 events)", rows, BATCH_HEADER)
    )


@pytest.fixture
def refused_port() -> Iterator[int]:
    with socket.socket() as held:  # bound, not listening: connections are refused
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


def unreachable_store_part(port: int) -> suite.Part:
    """A part whose store call finds nobody answering (pymongo's own error, in 0.2 s)."""

    def run() -> str:
        client: MongoClient[dict[str, object]] = MongoClient(
            f"mongodb://127.0.0.1:{port}/", serverSelectionTimeoutMS=200
        )
        with client:
            client.admin.command("ping")
        return "unreachable"

    return suite.Part("report consumer", "Report consumer", run)


def never_run(ran: list[str]) -> suite.Part:
    def run() -> str:
        ran.append("request units")
        return ""

    return suite.Part("request units", "Cost on Cosmos DB", run)


def dev_bench(argv: list[str]) -> None:
    """As `./dev bench ARGV` runs it (the `dev` script's `python -m tools.command`)."""
    command.main(["./dev bench", "benchmarks.suite_command", *argv])


def test_a_failing_part_leaves_the_finished_ones_printed_and_names_itself(monkeypatch, capsys, refused_port):
    ran: list[str] = []
    todo = [a_finished_part(), unreachable_store_part(refused_port), never_run(ran)]
    monkeypatch.setattr(suite, "parts", lambda quick: todo)

    with pytest.raises(SystemExit) as exit_:
        dev_bench(["--quick"])

    out, err = capsys.readouterr()
    assert exit_.value.code == 2
    assert "app: batches of 100" in out.split("finished before")[0]  # the part's table, as it was measured
    assert "finished before report consumer (2 of 3) stopped: Ingestion (their tables above)" in out
    summary = out.split("Summary of the parts that finished")[1]
    assert "events/s, batches of 100" in summary
    assert "4,257" in summary
    assert ran == []
    assert "bench: report consumer (2 of 3): stopped after" in err
    assert err.splitlines()[-1] == (
        "./dev bench: error: report consumer (2 of 3) failed: cannot reach the database: "
        f"127.0.0.1:{refused_port}: [Errno 111] Connection refused"
    )
    assert "Traceback" not in err


def test_a_bug_in_a_part_keeps_its_traceback_naming_the_part_after_the_finished_ones(monkeypatch, capsys):
    def bug() -> str:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(suite, "parts", lambda quick: [a_finished_part(), suite.Part("checks", "Checks", bug)])

    with pytest.raises(ZeroDivisionError) as raised:
        dev_bench(["--quick"])

    assert raised.value.__notes__ == ["in ./dev bench: checks (2 of 2)"]
    assert "finished before checks (2 of 2) stopped: Ingestion" in capsys.readouterr().out


def test_a_failure_in_the_first_part_says_none_finished(monkeypatch, capsys, refused_port):
    monkeypatch.setattr(suite, "parts", lambda quick: [unreachable_store_part(refused_port)])

    with pytest.raises(SystemExit):
        dev_bench(["--quick"])

    out, err = capsys.readouterr()
    assert "no part finished before report consumer (1 of 1) stopped" in out
    assert err.splitlines()[-1].startswith("./dev bench: error: report consumer (1 of 1) failed: cannot reach")


@pytest.mark.integration
def test_the_benchmarks_store_waits_longer_for_a_reply_than_the_apps_settings_would(monkeypatch):
    """With the app's timeouts at 100 ms, a command the store takes longer over (one insert of 5,000 documents,
    about a second) still succeeds through the benchmarks' client: a slow machine is not an unreachable store."""
    for name in ("STORE_SERVER_SELECTION_TIMEOUT_MS", "STORE_CONNECT_TIMEOUT_MS", "STORE_SOCKET_TIMEOUT_MS"):
        monkeypatch.setenv(name, "100")
    get_settings.cache_clear()
    documents = [{"_id": i, "padding": "x" * 200} for i in range(5_000)]

    with secantus_server() as uri, installed_store(uri, "bench_timeouts") as db:
        db["slow"].insert_many(documents)
        stored = db["slow"].count_documents({})

    assert stored == 5_000
    assert get_settings().store_socket_timeout_ms == 100  # the app's own settings are as they were
