"""A bad app setting stops the app at start-up, naming the setting (never its value)."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from shared.settings import InvalidSettings, Settings, get_settings

ROOT = Path(__file__).resolve().parent.parent


def start_app(**settings: str) -> subprocess.CompletedProcess[str]:
    """Import the function app as the Functions host's worker does at start-up, with these app settings."""
    env = {k: v for k, v in os.environ.items() if k.upper() not in settings} | settings
    return subprocess.run(
        [sys.executable, "-c", "import function_app"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("CHECK_BATCH_SIZE", "0", "CHECK_BATCH_SIZE: Input should be greater than or equal to 1"),
        ("CHANGE_SOURCE", "kafka", "CHANGE_SOURCE: Input should be 'change_stream' or 'polling'"),
        ("REQUEST_DEADLINE_SECONDS", "soon", "REQUEST_DEADLINE_SECONDS: Input should be a valid number"),
        ("REPORTS_LEASE_SECONDS", "50", "REPORTS_LEASE_SECONDS (50) must be longer than a worker's run"),
    ],
)
def test_a_bad_setting_fails_the_start_up_naming_it(name, value, message):
    started = start_app(**{name: value, "MONGODB_CONNECTION_STRING": "mongodb://user:s3cr3t@db.example/"})

    assert started.returncode != 0
    assert message in started.stderr
    assert "s3cr3t" not in started.stderr


def test_good_settings_start_without_touching_the_network():
    started = start_app(MONGODB_CONNECTION_STRING="mongodb://127.0.0.1:1/", CHECK_BATCH_SIZE="200")
    assert started.returncode == 0, started.stderr


# --- the connection string: checked at start-up, never quoted -------------------------------------------------

SECRET = "s3cr3t-Key%3D%3D"
MALFORMED = {
    "no host": "mongodb://",
    "a port out of range": "mongodb://h:99999/",
    "not a uri": "not-a-uri",
    "a secret and a bad port": f"mongodb://acct:{SECRET}@acct.mongo.cosmos.azure.com:99999/?ssl=true",
    "a secret and no host": f"mongodb://acct:{SECRET}@/?ssl=true",
    "an unknown option": f"mongodb://acct:{SECRET}@h/?sslx=true",
    "an option's bad value": f"mongodb://acct:{SECRET}@h/?ssl=maybe",
    "a password not escaped": "mongodb://acct:s3cr3t/key==@h:10255/",
    "srv with a port": f"mongodb+srv://acct:{SECRET}@cluster0.example.net:27017/",
    "srv with two hosts": f"mongodb+srv://acct:{SECRET}@a.example.net,b.example.net/",
    "an unresolved Key Vault reference": "@Microsoft.KeyVault(SecretUri=https://kv-x.vault.azure.net/secrets/mongo/1)",
}
VALID = {
    "Cosmos DB's own": f"mongodb://acct:{SECRET}@acct.mongo.cosmos.azure.com:10255/?ssl=true&replicaSet=globaldb"
    "&retrywrites=false&maxIdleTimeMS=120000&appName=@acct@",
    "local": "mongodb://127.0.0.1:27017/",
    "a replica set": f"mongodb://app:{SECRET}@h1:27017,h2:27018/pillbottle?replicaSet=rs0&authSource=admin",
    "srv": f"mongodb+srv://app:{SECRET}@cluster0.example.net/?retryWrites=false&w=majority",
}


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any DNS lookup or socket fails the test: a connection string is checked without the network."""

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("the check reached for the network")

    monkeypatch.setattr(socket, "getaddrinfo", refused)
    monkeypatch.setattr(socket, "socket", refused)


def settings_with(monkeypatch: pytest.MonkeyPatch, uri: str) -> Settings:
    """The settings read from an environment with this connection string (and only while reading them)."""
    with monkeypatch.context() as environment:
        environment.setenv("MONGODB_CONNECTION_STRING", uri)
        get_settings.cache_clear()
        try:
            return get_settings()
        finally:
            get_settings.cache_clear()


@pytest.mark.parametrize("uri", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_connection_string_is_refused_naming_the_setting_never_its_value(monkeypatch, no_network, uri):
    with pytest.raises(InvalidSettings) as refused:
        settings_with(monkeypatch, uri)

    message = str(refused.value)
    assert message.startswith("invalid app settings: MONGODB_CONNECTION_STRING: ")
    assert uri not in message
    assert "s3cr3t" not in message
    assert "acct.mongo" not in message


@pytest.mark.parametrize("uri", VALID.values(), ids=VALID.keys())
def test_valid_connection_strings_pass_without_a_dns_lookup(monkeypatch, no_network, uri):
    assert settings_with(monkeypatch, uri).mongodb_connection_string == uri


def test_no_connection_string_still_starts_and_answers_503_not_configured(monkeypatch):
    assert settings_with(monkeypatch, "").mongodb_connection_string == ""


@pytest.mark.parametrize("uri", ["mongodb://", "mongodb://h:99999/", "not-a-uri"])
def test_the_host_s_start_fails_on_a_malformed_connection_string(uri):
    started = start_app(MONGODB_CONNECTION_STRING=uri)

    assert started.returncode != 0
    assert "MONGODB_CONNECTION_STRING: " in started.stderr
    assert uri not in started.stderr.replace("MONGODB_CONNECTION_STRING", "")


def test_the_host_s_start_never_shows_the_secret_of_a_bad_connection_string():
    started = start_app(MONGODB_CONNECTION_STRING=f"mongodb://acct:{SECRET}@acct.mongo.cosmos.azure.com:99999/")

    assert started.returncode != 0
    assert "MONGODB_CONNECTION_STRING: " in started.stderr
    assert "s3cr3t" not in started.stderr
