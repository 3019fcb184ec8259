"""A bad app setting stops the app at start-up, naming the setting (never its value)."""

import json
import os
import re
import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic.fields import FieldInfo

from functions.start_up import check_start_up
from shared.settings import FUNCTION_TIMEOUT, InvalidSettings, Settings, get_settings
from tools import serve
from tools.serve import LocalServer

ROOT = Path(__file__).resolve().parents[2]


# What every deployment sets (local.settings.json.example for `func start`, infra/ in Azure): a database and the
# host's storage.
REQUIRED = {"MONGODB_CONNECTION_STRING": "mongodb://127.0.0.1:1/", "AzureWebJobsStorage": "UseDevelopmentStorage=true"}


def start_app(**settings: str) -> subprocess.CompletedProcess[str]:
    """Import the function app as the Functions host's worker does at start-up, with these app settings (and the
    required ones, unless given)."""
    settings = REQUIRED | settings
    env = {k: v for k, v in os.environ.items() if k.upper() not in {name.upper() for name in settings}} | settings
    return subprocess.run(
        [sys.executable, "-c", "import function_app"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


BAD_SETTINGS = [
    ("CHECK_BATCH_SIZE", "0", "CHECK_BATCH_SIZE: must be a whole number from 1 to 10000"),
    ("CHANGE_SOURCE", "kafka", "CHANGE_SOURCE: Input should be 'change_stream' or 'polling'"),
    ("REQUEST_DEADLINE_SECONDS", "soon", "REQUEST_DEADLINE_SECONDS: must be a number from 0.01 to 200"),
    ("REPORTS_LEASE_SECONDS", "50", "REPORTS_LEASE_SECONDS (50) must be longer than a worker's run"),
    ("MONGODB_DATABASE", "a/b", "MONGODB_DATABASE: cannot contain /"),
    ("REPORTS_SCHEDULE", "0 0 0 31 2 *", "REPORTS_SCHEDULE: NCRONTAB schedule never fires"),
    ("CHECKS_QUEUE", "notifications", "CHECKS_QUEUE and NOTIFICATIONS_QUEUE name the same queue"),
    ("CHECK_PARTITIONS", "4.0", "CHECK_PARTITIONS: must be a whole number from 1 to 1024"),
    ("QUEUE_SEND_TIMEOUT_SECONDS", "1e-300", "QUEUE_SEND_TIMEOUT_SECONDS: must be a number from 0.1 to 60"),
    ("MONGODB_DATABASE", "pillbottle\n", "MONGODB_DATABASE: cannot contain a control character"),
    ("CHECK_LATE_DOSES_SPREAD_MINUTES", "5", "CHECK_LATE_DOSES_SPREAD_MINUTES (5) must be less than the shortest"),
    ("AzureWebJobsStorage", "AccountName=acct;AccountKey=s3cr3t!", "AzureWebJobsStorage: its AccountKey is not"),
]
# The host's start in a process of its own, for a rule of one field and for a value that holds a secret: the rest
# of BAD_SETTINGS go through the same check in this process (a process costs seconds and shows only that
# function_app.py runs the check as the worker imports it, which these two show).
IN_A_PROCESS = {"CHECK_BATCH_SIZE", "AzureWebJobsStorage"}
WITH_A_SECRET = "mongodb://user:s3cr3t@db.example/"


@pytest.mark.parametrize(("name", "value", "message"), [case for case in BAD_SETTINGS if case[0] in IN_A_PROCESS])
def test_a_bad_setting_fails_the_start_up_naming_it(name, value, message):
    started = start_app(**{name: value, "MONGODB_CONNECTION_STRING": WITH_A_SECRET})

    assert started.returncode != 0
    assert message in started.stderr
    assert "s3cr3t" not in started.stderr


@pytest.mark.parametrize(("name", "value", "message"), [case for case in BAD_SETTINGS if case[0] not in IN_A_PROCESS])
def test_each_bad_setting_fails_the_start_up_check_naming_it(name, value, message, monkeypatch):
    """The check function_app.py runs as the worker imports it (functions.start_up.check_start_up), in this
    process, with the settings start_app gives the host's."""
    with monkeypatch.context() as environment:
        for setting, given in (REQUIRED | {"MONGODB_CONNECTION_STRING": WITH_A_SECRET, name: value}).items():
            environment.setenv(setting, given)
        get_settings.cache_clear()
        with pytest.raises(InvalidSettings) as refused:
            check_start_up()
    get_settings.cache_clear()

    assert message in str(refused.value)
    assert "s3cr3t" not in str(refused.value)


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
    # pymongo opens the file as it parses: a missing one was a FileNotFoundError out of the settings, not a refusal
    "a TLS CA file that is not there": f"mongodb://acct:{SECRET}@h/?tls=true&tlsCAFile=/nonexistent/ca.pem",
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


def test_the_host_s_start_fails_on_a_malformed_connection_string():
    """In a process of its own, as the worker imports the app. Every string of MALFORMED is refused by the same
    settings in this process (the test above), so one string shows the process's part (three did, a process each:
    a process costs seconds)."""
    uri = "not-a-uri"
    started = start_app(MONGODB_CONNECTION_STRING=uri)

    assert started.returncode != 0
    assert "MONGODB_CONNECTION_STRING: " in started.stderr
    assert uri not in started.stderr.replace("MONGODB_CONNECTION_STRING", "")


def test_the_host_s_start_never_shows_the_secret_of_a_bad_connection_string():
    started = start_app(MONGODB_CONNECTION_STRING=f"mongodb://acct:{SECRET}@acct.mongo.cosmos.azure.com:99999/")

    assert started.returncode != 0
    assert "MONGODB_CONNECTION_STRING: " in started.stderr
    assert "s3cr3t" not in started.stderr


# --- every other setting: refused at start-up, naming it and what it may be ------------------------------------


def read_settings(monkeypatch: pytest.MonkeyPatch, **environment: str) -> Settings:
    """The settings read from an environment with these app settings (and only while reading them)."""
    with monkeypatch.context() as patched:
        for name, value in environment.items():
            patched.setenv(name, value)
        get_settings.cache_clear()
        try:
            return get_settings()
        finally:
            get_settings.cache_clear()


def refusal(monkeypatch: pytest.MonkeyPatch, **environment: str) -> str:
    with pytest.raises(InvalidSettings) as refused:
        read_settings(monkeypatch, **environment)
    return str(refused.value)


def problems(monkeypatch: pytest.MonkeyPatch, **environment: str) -> str:
    """What reading these settings refuses, or "" if they start."""
    try:
        read_settings(monkeypatch, **environment)
    except InvalidSettings as refused:
        return str(refused)
    return ""


# MongoDB's naming restrictions ("MongoDB Limits and Thresholds",
# https://www.mongodb.com/docs/manual/reference/limits/#naming-restrictions): on Windows none of /\. "$*<>:|?, on
# Unix and Linux none of /\. "$, never the null character, and "fewer than 64" (bytes). Cosmos DB names are URI
# segments, without '#'. Change streams open on "a single database (excluding admin, local, and config database)"
# (https://www.mongodb.com/docs/manual/changeStreams/).
BAD_DATABASE_NAMES = {
    "a slash": ("a/b", "cannot contain /"),
    "a command namespace": ("$cmd", "cannot contain $"),
    "a space": ("has space", "cannot contain a space"),
    "a dot": ("pill.bottle", "cannot contain ."),
    "a backslash": ("pill\\bottle", "cannot contain \\"),
    "a quote": ('pill"bottle', 'cannot contain "'),
    "Windows' characters": ("pill*bottle?", "cannot contain * ?"),
    "a hash (a Cosmos DB URI segment)": ("pill#bottle", "cannot contain #"),
    "empty": ("", "is empty"),
    "64 bytes": ("p" * 64, "must be shorter than 64 bytes"),
    "32 two-byte letters": ("é" * 32, "must be shorter than 64 bytes"),
    "MongoDB's admin": ("admin", "names one of MongoDB's own databases"),
    "MongoDB's local, in capitals": ("LOCAL", "names one of MongoDB's own databases"),
    "MongoDB's config": ("config", "names one of MongoDB's own databases"),
    # A name pasted with a tab or a newline names another database than the one set up (and passed start-up).
    "a trailing newline": ("pillbottle\n", "cannot contain a control character or other whitespace (a newline)"),
    "a tab": ("pill\tbottle", "cannot contain a control character or other whitespace (a tab)"),
    "a carriage return and a newline": ("pillbottle\r\n", "(a newline a carriage return)"),
    "DEL": ("pill\x7fbottle", "cannot contain a control character or other whitespace (U+007F)"),
    "a no-break space": ("pill\u00a0bottle", "cannot contain a control character or other whitespace (U+00A0)"),
    "a line separator": ("pill\u2028bottle", "cannot contain a control character or other whitespace (U+2028)"),
}


@pytest.mark.parametrize(("name", "words"), BAD_DATABASE_NAMES.values(), ids=BAD_DATABASE_NAMES.keys())
def test_a_database_name_mongodb_or_cosmos_db_would_refuse_stops_the_start_up(monkeypatch, name, words):
    message = refusal(monkeypatch, MONGODB_DATABASE=name)

    assert message.startswith("invalid app settings: MONGODB_DATABASE: ")
    assert words in message


@pytest.mark.parametrize("name", ["pillbottle", "pill_bottle", "PillBottle-2", "test_12", "p" * 63])
def test_database_names_both_take_start(monkeypatch, name):
    assert read_settings(monkeypatch, MONGODB_DATABASE=name).mongodb_database == name


SCHEDULES = [
    "REPORTS_SCHEDULE",
    "CHECK_OPEN_BOTTLES_SCHEDULE",
    "CHECK_SILENT_BOTTLES_SCHEDULE",
    "CHECK_LATE_DOSES_SCHEDULE",
]


@pytest.mark.parametrize("setting", SCHEDULES)
@pytest.mark.parametrize(
    ("schedule", "words"),
    [
        ("0 0 0 31 2 *", "NCRONTAB schedule never fires"),  # the timer would never run: checks or reports stop
        ("0 0 0 31 4,6,9,11 *", "NCRONTAB schedule never fires"),
        ("", "NCRONTAB needs 6 fields"),
        ("   ", "NCRONTAB needs 6 fields"),
        ("*/5 * * * *", "NCRONTAB needs 6 fields"),  # five-field cron: Azure Functions' has seconds first
        ("0 */5 * * * 7", "NCRONTAB day-of-week field '7'"),
    ],
)
def test_a_schedule_the_host_would_not_run_stops_the_start_up(monkeypatch, setting, schedule, words):
    message = refusal(monkeypatch, **{setting: schedule})

    assert message.startswith(f"invalid app settings: {setting}: {words}")


@pytest.mark.parametrize("schedule", ["0 */10 * * * *", "0 30 9 * * Mon-Fri", "0 0 0 29 Feb *", "*/30 * * * * *"])
def test_schedules_azure_functions_runs_start(monkeypatch, schedule):
    # Not the late-dose check's: its spread must also fit in its schedule's interval (below).
    assert read_settings(monkeypatch, CHECK_OPEN_BOTTLES_SCHEDULE=schedule).check_open_bottles_schedule == schedule


@pytest.mark.parametrize(
    ("environment", "interval"),
    [
        ({"CHECK_LATE_DOSES_SPREAD_MINUTES": "5"}, "5 minutes"),  # the default schedule: every 5 minutes
        ({"CHECK_LATE_DOSES_SPREAD_MINUTES": "8"}, "5 minutes"),
        ({"CHECK_LATE_DOSES_SCHEDULE": "0 */2 * * * *", "CHECK_LATE_DOSES_SPREAD_MINUTES": "2"}, "2 minutes"),
        ({"CHECK_LATE_DOSES_SCHEDULE": "*/30 * * * * *"}, "30 seconds"),  # the default spread: 4 minutes
        # 00:00 and 23:57 each day: 3 minutes from the last run of a day to the first of the next
        ({"CHECK_LATE_DOSES_SCHEDULE": "0 0,57 0,23 * * *", "CHECK_LATE_DOSES_SPREAD_MINUTES": "3"}, "3 minutes"),
    ],
)
def test_a_late_dose_spread_at_or_past_its_schedule_s_interval_stops_the_start_up(monkeypatch, environment, interval):
    """A paced run spreads its batches over the spread: as long as the interval, or longer, it is still sweeping
    when the next run starts (and its sends with it)."""
    message = refusal(monkeypatch, **environment)

    spread = environment.get("CHECK_LATE_DOSES_SPREAD_MINUTES", "4")
    assert message == (
        f"invalid app settings: CHECK_LATE_DOSES_SPREAD_MINUTES ({spread}) must be less than the shortest interval "
        f"between two runs of CHECK_LATE_DOSES_SCHEDULE ({interval}), or 0: a paced run would still be sweeping when "
        "the next one starts"
    )


@pytest.mark.parametrize(
    "environment",
    [
        {"CHECK_LATE_DOSES_SPREAD_MINUTES": "4"},
        {"CHECK_LATE_DOSES_SCHEDULE": "0 */2 * * * *", "CHECK_LATE_DOSES_SPREAD_MINUTES": "1"},
        {"CHECK_LATE_DOSES_SCHEDULE": "*/30 * * * * *", "CHECK_LATE_DOSES_SPREAD_MINUTES": "0"},
        {"CHECK_LATE_DOSES_SCHEDULE": "0 0 9 * * Mon-Fri", "CHECK_LATE_DOSES_SPREAD_MINUTES": "8"},
    ],
)
def test_a_late_dose_spread_shorter_than_its_schedule_s_interval_starts(monkeypatch, environment):
    assert problems(monkeypatch, **environment) == ""


@pytest.mark.parametrize(
    ("environment", "words"),
    [
        (
            {
                "CHECK_LATE_DOSES_SCHEDULE": "0 */10 * * * *",
                "CHECK_LATE_DOSES_SPREAD_MINUTES": "8",
                "CHECKS_TIME_BUDGET_SECONDS": "120",
            },
            "CHECKS_TIME_BUDGET_SECONDS plus CHECK_LATE_DOSES_SPREAD_MINUTES plus REQUEST_DEADLINE_SECONDS (608 s) "
            "must be less than the host's function timeout (600 s, host.json)",
        ),
        (
            {"REPORTS_TIME_BUDGET_SECONDS": "540", "REQUEST_DEADLINE_SECONDS": "60", "REPORTS_LEASE_SECONDS": "900"},
            "REPORTS_TIME_BUDGET_SECONDS plus REQUEST_DEADLINE_SECONDS (600 s) must be less than the host's function "
            "timeout (600 s, host.json)",
        ),
    ],
)
def test_a_run_the_settings_let_outlast_the_function_timeout_stops_the_start_up(monkeypatch, environment, words):
    """The host stops a function at host.json's functionTimeout, mid-run: each bound alone fits it, but a check
    run's budget, its paced waits and its last sends, or a report run's budget and its checkpoint, add up."""
    assert refusal(monkeypatch, **environment).startswith(f"invalid app settings: {words}")


def test_the_function_timeout_the_settings_check_runs_against_is_host_json_s():
    hours, minutes, seconds = (
        int(part) for part in json.loads((ROOT / "host.json").read_text())["functionTimeout"].split(":")
    )
    assert timedelta(hours=hours, minutes=minutes, seconds=seconds) == FUNCTION_TIMEOUT


# --- the host's storage: a connection string the Storage SDK reads, endpoints, an identity ----------------------

ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="  # Azurite's own
)
BAD_STORAGE_STRINGS = {
    "not a connection string": ("garbage", "not a Storage connection string as the Storage SDK reads it"),
    "a key without an account": (f"AccountKey={ACCOUNT_KEY}", "missing required connection details"),
    "the emulator turned off": ("UseDevelopmentStorage=false", "missing required connection details"),
    "a key that is not base64": ("AccountName=acct;AccountKey=s3cr3t-Key!", "its AccountKey is not base64"),
    "a queue endpoint that is not a URL": (
        f"AccountName=acct;AccountKey={ACCOUNT_KEY};QueueEndpoint=queue.example",
        "its queue endpoint is not an absolute http(s) URL",
    ),
    "a queue endpoint and its SAS only (no blob service, where the archive is)": (
        "QueueEndpoint=https://acct.queue.core.windows.net;SharedAccessSignature=sv=2024&sig=s3cr3t",
        "(blob service)",
    ),
}
GOOD_STORAGE_STRINGS = {
    "the emulator": "UseDevelopmentStorage=true",
    "Azurite's": f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={ACCOUNT_KEY};"
    "QueueEndpoint=http://127.0.0.1:10001/devstoreaccount1;BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;",
    "an account's": f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={ACCOUNT_KEY};"
    "EndpointSuffix=core.windows.net",
}


@pytest.mark.parametrize(("value", "words"), BAD_STORAGE_STRINGS.values(), ids=BAD_STORAGE_STRINGS.keys())
def test_a_storage_connection_string_the_sdk_would_fail_on_stops_the_start_up_never_quoting_it(
    monkeypatch, value, words
):
    """The checks send every notification, and the archive writes, with it: a string the SDK cannot read, or an
    account key it cannot sign with (decoded only for the first request), passed start-up and failed every send."""
    message = refusal(monkeypatch, AzureWebJobsStorage=value)

    assert message.startswith("invalid app settings: AzureWebJobsStorage: ")
    assert words in message
    assert "s3cr3t" not in message
    assert ACCOUNT_KEY not in message


@pytest.mark.parametrize("value", GOOD_STORAGE_STRINGS.values(), ids=GOOD_STORAGE_STRINGS.keys())
def test_storage_connection_strings_the_sdk_reads_start(monkeypatch, value):
    assert read_settings(monkeypatch, AzureWebJobsStorage=value).storage_connection_string == value


@pytest.mark.parametrize("setting", ["AzureWebJobsStorage__queueServiceUri", "AzureWebJobsStorage__blobServiceUri"])
@pytest.mark.parametrize(
    "value",
    [
        "acct.queue.core.windows.net",
        "ftp://acct.queue.core.windows.net",
        "https://",
        "https://a b.net",
        "https://h:99999",
    ],
)
def test_a_service_endpoint_that_is_not_an_absolute_url_stops_the_start_up(monkeypatch, setting, value):
    message = refusal(monkeypatch, **{setting: value})

    assert (
        message
        == f"invalid app settings: {setting}: must be an absolute http(s) URL, like https://account.queue.core.windows.net"
    )


@pytest.mark.parametrize(
    "value", ["my-identity", "00000000-0000-0000-0000-00000000000", "{00000000-0000-0000-0000-000000000000}"]
)
def test_a_client_id_that_is_not_a_guid_stops_the_start_up(monkeypatch, value):
    """ManagedIdentityCredential takes any string, and fails the first token request with it: every send."""
    message = refusal(monkeypatch, AzureWebJobsStorage__clientId=value)

    assert message.startswith("invalid app settings: AzureWebJobsStorage__clientId: must be the client id (a GUID")


def test_service_endpoints_and_a_client_id_as_infra_sets_them_start(monkeypatch):
    settings = read_settings(
        monkeypatch,
        AzureWebJobsStorage__queueServiceUri="https://acct.queue.core.windows.net",
        AzureWebJobsStorage__blobServiceUri="https://acct.blob.core.windows.net/",
        AzureWebJobsStorage__clientId="8f3c2a10-5b7e-4d2c-9a61-0c4e2f7b9d13",
    )
    assert settings.storage_client_id == "8f3c2a10-5b7e-4d2c-9a61-0c4e2f7b9d13"


QUEUES = ["NOTIFICATIONS_QUEUE", "REPORTS_QUEUE", "CHECKS_QUEUE"]

# Azure Storage, "Naming Queues and Metadata" (https://learn.microsoft.com/rest/api/storageservices/naming-queues-
# and-metadata): "A queue name must start with a letter or number, and can only contain letters, numbers, and the
# dash (-) character. The first and last letters in the queue name must be alphanumeric. [...] Consecutive dash
# characters are not permitted in the queue name. All letters in a queue name must be lowercase. A queue name must
# be from 3 through 63 characters long." The poison queue of a queue trigger is the name followed by -poison.
BAD_QUEUE_NAMES = {
    "two characters": ("ab", "must be 3 to 56 characters long"),
    "57 characters (its poison queue would be 64)": ("q" * 57, "must be 3 to 56 characters long"),
    "a capital": ("Checks", "must be lowercase letters, digits and single hyphens"),
    "two hyphens": ("check--partitions", "must be lowercase letters, digits and single hyphens"),
    "a leading hyphen": ("-checks", "must be lowercase letters, digits and single hyphens"),
    "a trailing hyphen": ("checks-", "must be lowercase letters, digits and single hyphens"),
    "an underscore": ("check_partitions", "must be lowercase letters, digits and single hyphens"),
}


@pytest.mark.parametrize("setting", QUEUES)
@pytest.mark.parametrize(("name", "words"), BAD_QUEUE_NAMES.values(), ids=BAD_QUEUE_NAMES.keys())
def test_a_queue_name_azure_storage_would_refuse_stops_the_start_up(monkeypatch, setting, name, words):
    message = refusal(monkeypatch, **{setting: name})

    assert message.startswith(f"invalid app settings: {setting}: {words}")


@pytest.mark.parametrize(
    ("environment", "words"),
    [
        ({"CHECKS_QUEUE": "notifications"}, "CHECKS_QUEUE and NOTIFICATIONS_QUEUE name the same queue"),
        ({"REPORTS_QUEUE": "check-partitions"}, "CHECKS_QUEUE and REPORTS_QUEUE name the same queue"),
        ({"NOTIFICATIONS_QUEUE": "work", "REPORTS_QUEUE": "work"}, "NOTIFICATIONS_QUEUE and REPORTS_QUEUE name"),
        ({"CHECKS_QUEUE": "report-partitions-poison"}, "CHECKS_QUEUE names REPORTS_QUEUE's poison queue"),
        ({"NOTIFICATIONS_QUEUE": "check-partitions-poison"}, "NOTIFICATIONS_QUEUE names CHECKS_QUEUE's poison"),
    ],
)
def test_one_queue_for_two_kinds_of_message_stops_the_start_up(monkeypatch, environment, words):
    """Check work on the users' notification queue would be delivered to the users as notifications."""
    message = refusal(monkeypatch, **environment)

    assert message.startswith(f"invalid app settings: {words}")


def test_distinct_valid_queue_names_start(monkeypatch):
    names = {"NOTIFICATIONS_QUEUE": "n0tify", "REPORTS_QUEUE": "r" * 56, "CHECKS_QUEUE": "checks-2-work"}
    settings = read_settings(monkeypatch, **names)

    assert (settings.notifications_queue, settings.reports_queue, settings.checks_queue) == tuple(names.values())


NUMERIC = {name: field for name, field in Settings.model_fields.items() if field.annotation in (int, float)}


def bounds(field: FieldInfo) -> tuple[float, float]:
    """The lowest and highest value a numeric setting takes; each has both."""
    low = [item.ge for item in field.metadata if hasattr(item, "ge")]
    high = [item.le for item in field.metadata if hasattr(item, "le")]
    assert len(low) == len(high) == 1, "every numeric setting has a lowest and a highest value"
    return low[0], high[0]


def rule(name: str) -> str:
    field = NUMERIC[name]
    low, high = bounds(field)
    kind = "a whole number" if field.annotation is int else "a number"
    return f"invalid app settings: {name.upper()}: must be {kind} from {low:g} to {high:g}, written "


@pytest.mark.parametrize("name", NUMERIC)
def test_every_numeric_setting_is_refused_outside_its_bounds_saying_what_it_may_be(monkeypatch, name):
    low, high = bounds(NUMERIC[name])
    step = 1 if NUMERIC[name].annotation is int else 0.001
    for value in (low - step, high + step):
        assert refusal(monkeypatch, **{name.upper(): f"{value:g}"}).startswith(rule(name)), value
    for value in (low, high):  # the bounds themselves are allowed (a check across settings may still refuse)
        assert not problems(monkeypatch, **{name.upper(): f"{value:g}"}).startswith(rule(name)), value


@pytest.mark.parametrize("name", [name for name, field in NUMERIC.items() if field.annotation is int])
def test_a_whole_number_setting_takes_plain_digits_only(monkeypatch, name):
    """pydantic alone reads `4.0`, `+4`, ` 4`, `4_0` and `true` as whole numbers: a typo then runs silently."""
    default = NUMERIC[name].default
    for written in (f"{default}.0", f"+{default}", f" {default}", f"{default}_0", "true", f"{default}e0", ""):
        assert refusal(monkeypatch, **{name.upper(): written}).startswith(rule(name)), written
    assert getattr(read_settings(monkeypatch, **{name.upper(): str(default)}), name) == default


@pytest.mark.parametrize("name", [name for name, field in NUMERIC.items() if field.annotation is float])
def test_a_number_setting_takes_plain_decimals_only(monkeypatch, name):
    for written in ("1e-300", "1e1", "nan", "inf", "-inf", "0x1", "1_0", ".5", " 5", "five", ""):
        assert refusal(monkeypatch, **{name.upper(): written}).startswith(rule(name)), written
    assert getattr(read_settings(monkeypatch, **{name.upper(): "1.5"}), name) == 1.5


def test_check_partitions_of_4_0_and_a_send_timeout_of_1e_300_are_refused(monkeypatch):
    message = refusal(monkeypatch, CHECK_PARTITIONS="4.0", QUEUE_SEND_TIMEOUT_SECONDS="1e-300")

    assert message == (
        "invalid app settings: CHECK_PARTITIONS: must be a whole number from 1 to 1024, written in digits only "
        "(the default is 4); QUEUE_SEND_TIMEOUT_SECONDS: must be a number from 0.1 to 60, written in digits with "
        "at most a decimal point, like 0.5 (the default is 5)"
    )


def test_the_configuration_doc_gives_each_numeric_setting_s_bounds_as_the_code_has_them():
    table = re.findall(
        r"^\| `([A-Z_]+)` \| `[^`]+` \| ([^|]+) \|", (ROOT / "docs" / "configuration.md").read_text(), re.M
    )
    allowed = {name: cell.strip() for name, cell in table}
    for name, field in NUMERIC.items():
        low, high = bounds(field)
        assert allowed[name.upper()].startswith(f"{low:g}–{high:g}"), f"docs/configuration.md: {name.upper()}"


def test_the_defaults_start(monkeypatch):
    for name, field in Settings.model_fields.items():
        monkeypatch.delenv(name.upper(), raising=False)
        monkeypatch.delenv(str(field.validation_alias), raising=False)
    assert read_settings(monkeypatch) == Settings.model_construct()


# --- ./dev serve: a bad setting is one line and exit 2, never a traceback nor a server without its timers ---------


def test_dev_serve_with_a_bad_setting_says_which_in_one_line_and_exits_2():
    """As ./dev serve runs, in a process of its own: what the process prints and its exit code."""
    name, value = "MONGODB_DATABASE", "a/b"
    env = {k: v for k, v in os.environ.items() if k.upper() != name} | {name: value}
    try:
        served = subprocess.run(
            [sys.executable, "-m", "tools.command", "./dev serve", "tools.serve", "--port", "0"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
    except subprocess.TimeoutExpired as still_serving:
        pytest.fail(f"./dev serve kept serving with {name}={value!r}: {still_serving.stderr!r}")

    assert served.returncode == 2, served.stderr
    assert "Traceback" not in served.stderr
    assert (
        served.stderr.strip()
        .splitlines()[-1]
        .startswith("./dev serve: error: invalid app settings: MONGODB_DATABASE: cannot contain /")
    )


UNREACHED = "mongodb://127.0.0.1:1/"  # the settings are read before the store is connected to


def never_serve(server: Any) -> None:
    raise AssertionError(f"./dev serve started serving on {server.base_url}")


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("MONGODB_DATABASE", "$cmd", "MONGODB_DATABASE: cannot contain $"),
        ("REPORTS_SCHEDULE", "0 0 0 31 2 *", "REPORTS_SCHEDULE: NCRONTAB schedule never fires"),
        ("CHECK_OPEN_BOTTLES_SCHEDULE", " ", "CHECK_OPEN_BOTTLES_SCHEDULE: NCRONTAB needs 6 fields"),
    ],
)
def test_dev_serve_refuses_each_bad_setting_in_one_line_with_exit_2(name, value, words, monkeypatch, capsys):
    """More bad settings, through ./dev serve's own call (tools.serve.main) in this process, on a store it never
    reaches: a process of its own and the embedded store cost seconds to start, and show nothing the test above
    does not (the exit code, no traceback at import, the embedded store's path). A server that would start anyway
    fails the test rather than serve."""
    monkeypatch.setattr(LocalServer, "start", never_serve)
    with monkeypatch.context() as bad:  # gone before the teardown's own Settings()
        bad.setenv(name, value)
        get_settings.cache_clear()
        with pytest.raises(SystemExit) as exited:
            serve.main(["--port", "0", "--mongodb-uri", UNREACHED])
    get_settings.cache_clear()

    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(f"./dev serve: error: invalid app settings: {words}")
