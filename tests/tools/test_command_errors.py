"""`./dev store` and `./dev archive` where a newcomer meets them failing: a busy port or data folder, a storage
account that does not answer, an Azurite that refuses the SDK's API version, a connection string the SDK cannot
read. Each is one line on stderr that says what to do, exit 2, within seconds, and never prints a connection
string (it holds the account's key)."""

import argparse
import errno
import random
import re
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from secantus import SecantusDBServer

from shared.store.command_line import run_command
from tests import azurite
from tools import archive_history, simulate, store_server
from tools.fleet import make_fleet
from tools.local_settings import AZURITE_COMMAND

KEY = azurite.ACCOUNT_KEY


def one_line_error(command: Callable[[], Any], capfd: pytest.CaptureFixture[str]) -> str:
    """Run a command expecting exit 2 and a single line on stderr (file descriptor 2 included: a library's C code
    writes there past sys.stderr); that line."""
    with pytest.raises(SystemExit) as exit_:
        command()
    err = capfd.readouterr().err
    assert exit_.value.code == 2, err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A loopback port bound but not listening: a connection to it is refused for as long as the test runs."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


# --- ./dev store --------------------------------------------------------------------------------------------


def store(*argv: str) -> Callable[[], None]:
    return lambda: run_command("./dev store", lambda: store_server.main(list(argv)))


def test_a_busy_port_is_one_line_saying_what_to_do(tmp_path, capfd):
    """It was a 24-line traceback ending in `OSError: [Errno 98] Address already in use`, exit 1."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        line = one_line_error(store("--port", str(port), "--data-dir", str(tmp_path / "store")), capfd)

    assert line == (
        f"./dev store: error: cannot listen on 127.0.0.1:{port}: Address already in use "
        "(another server has it: stop it, or pick another --port, 0 for any free one)"
    )


def test_the_default_port_taken_says_how_to_point_the_settings_elsewhere():
    """27017 is where a MongoDB of one's own listens, and where ./dev local-settings points by default."""
    failed = store_server.cannot_listen(store_server.DEFAULT_PORT, OSError(errno.EADDRINUSE, "in use"))

    assert str(failed) == (
        "cannot listen on 127.0.0.1:27017: Address already in use (another server has it: stop it, or "
        "./dev store --port N and ./dev local-settings --mongodb-uri mongodb://127.0.0.1:N/)"
    )


def test_a_data_folder_another_store_holds_is_one_line(tmp_path, capfd):
    """A second ./dev store on the same folder (the editor's task and a terminal) was a traceback ending in
    WiredTiger's `Device or resource busy`, after WiredTiger's own line."""
    folder = tmp_path / "store"
    with SecantusDBServer(port=0, storage_path=str(folder)):
        line = one_line_error(store("--port", "0", "--data-dir", str(folder)), capfd)

    assert line == (
        f"./dev store: error: --data-dir {folder} is in use by another running store: stop it, or pick another "
        "--data-dir"
    )


# --- ./dev archive ------------------------------------------------------------------------------------------


def archive(*argv: str) -> Callable[[], int]:
    return lambda: archive_history.main(["bottle-0007", "2026-03-28", *argv])


def connection_string(port: int, key: str = KEY) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={azurite.ACCOUNT};AccountKey={key};"
        f"BlobEndpoint=http://127.0.0.1:{port}/{azurite.ACCOUNT};"
    )


def test_a_storage_account_nobody_answers_for_is_one_line_within_seconds(refused_port, capfd):
    """No Azurite listening was a 101-line traceback after 26 s: the app's 20-second timeouts and three growing
    back-offs, for a command someone waits on."""
    started = time.monotonic()
    line = one_line_error(archive("--connection-string", connection_string(refused_port)), capfd)
    waited = time.monotonic() - started

    assert line == (
        f"./dev archive: error: cannot reach the blob service at http://127.0.0.1:{refused_port}/devstoreaccount1 "
        "(Failed to establish a new connection: [Errno 111] Connection refused): is Azurite running? In the "
        f"repository: {AZURITE_COMMAND}"
    )
    assert KEY not in line
    assert waited < 10  # it was 26 s


@pytest.mark.parametrize(
    "text", ["notastring", "", "AccountKey=s3cret", "DefaultEndpointsProtocol=http;AccountKey=s3cret;EndpointSuffix=x"]
)
def test_a_connection_string_the_sdk_cannot_read_is_one_line_never_printing_it(text, capfd):
    """It was a 36-line traceback ending in `ValueError: Connection string is either blank or malformed.`; an
    empty one read the local folder instead."""
    line = one_line_error(archive("--connection-string", text), capfd)

    assert re.fullmatch(
        r"\./dev archive: error: --connection-string: not a storage connection string the SDK reads \(Connection "
        r"string (is either blank or malformed|missing required connection details)\.\); Azurite's is "
        r"UseDevelopmentStorage=true",
        line,
    ), line
    assert "s3cret" not in line


def test_an_identity_over_http_is_one_line(capfd):
    line = one_line_error(archive("--blob-service-uri", "http://127.0.0.1:1/devstoreaccount1"), capfd)

    assert line == (
        "./dev archive: error: --blob-service-uri http://127.0.0.1:1/devstoreaccount1: Token credential is only "
        "supported with HTTPS."
    )


@pytest.fixture
def version_checking_azurite(tmp_path: Path) -> Iterator[int]:
    """Azurite's blob service as the docs and the editor's task started it before: without
    --skipApiVersionCheck. Its port."""
    reason = azurite.missing()
    if reason:
        pytest.skip(reason)
    port = azurite.free_port()
    command = [str(azurite.BLOB_EXECUTABLE), "--silent", "--disableTelemetry", "--inMemoryPersistence"]
    process = subprocess.Popen(
        [*command, "--blobHost", "127.0.0.1", "--blobPort", str(port)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + azurite.STARTUP_SECONDS
        while not accepts(port):
            assert process.poll() is None, f"Azurite exited with {process.returncode}"
            assert time.monotonic() < deadline, f"Azurite did not listen within {azurite.STARTUP_SECONDS} s"
            time.sleep(0.1)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=10)


def accepts(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.azurite
def test_an_azurite_refusing_the_sdk_s_api_version_is_one_line_naming_the_option(version_checking_azurite, capfd):
    line = one_line_error(archive("--connection-string", connection_string(version_checking_azurite)), capfd)

    assert line == (
        f"./dev archive: error: Azurite at http://127.0.0.1:{version_checking_azurite}/devstoreaccount1 refuses the "
        f"Storage SDK's API version: start it with --skipApiVersionCheck, as in {AZURITE_COMMAND}"
    )


@pytest.mark.azurite
def test_azurite_with_a_wrong_key_is_one_line_and_without_the_archive_says_nothing_is_archived(
    azurite_blob_port, capfd
):
    wrong = "A" + KEY[1:]
    line = one_line_error(archive("--connection-string", connection_string(azurite_blob_port, wrong)), capfd)

    assert line.startswith(
        f"./dev archive: error: the blob service at http://127.0.0.1:{azurite_blob_port}/devstoreaccount1 answered "
        "403 AuthorizationFailure: "
    )
    assert wrong not in line
    assert archive("--connection-string", connection_string(azurite_blob_port))() == 1
    assert capfd.readouterr().err.startswith("./dev archive: nothing is archived for 2026-03-28 in the container")


class ParsedArguments(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


def parser_of(command: Callable[[list[str] | None], Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    """The ArgumentParser a command builds, caught as it starts parsing (so nothing runs)."""

    def catch(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        raise ParsedArguments(self)

    with monkeypatch.context() as patched:
        patched.setattr(argparse.ArgumentParser, "parse_args", catch)
        with pytest.raises(ParsedArguments) as caught:
            command([])
    return caught.value.parser


def test_the_help_s_examples_of_the_local_archive_name_bottles_the_simulation_makes(monkeypatch):
    """`./dev archive --help` showed `bottle-007`: the simulated fleet's ids are `bottle-0007`."""
    defaults = parser_of(simulate.main, monkeypatch).parse_args([])
    simulated = {bottle.bottle_id for bottle in make_fleet(random.Random(0), defaults.bottles, defaults.users)}
    shown = parser_of(archive_history.main, monkeypatch).format_help()

    local = [
        line.split()[2]
        for line in shown.splitlines()
        if line.strip().startswith("./dev archive bottle-") and "--blob-service-uri" not in line
    ]
    assert local
    assert [bottle for bottle in local if bottle not in simulated] == []
