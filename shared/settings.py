"""All configuration, read from the environment (Azure app settings, or local.settings.json under func)."""

import base64
import binascii
import math
import re
import unicodedata
from datetime import timedelta
from functools import lru_cache
from typing import Annotated, Literal
from urllib.parse import unquote_plus, urlsplit

from pydantic import BeforeValidator, Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, SettingsConfigDict
from pymongo import uri_parser
from pymongo.errors import PyMongoError

from shared.ncrontab import Schedule

_DIGITS = re.compile(r"-?[0-9]+")
_DECIMAL = re.compile(r"-?[0-9]+(\.[0-9]+)?")


def _whole_number(value: object) -> object:
    """An int, or a string of plain digits: not `4.0`, `+4`, `1_000`, ` 4` or `true`, which pydantic would
    read as 4 (or 1): a setting written so is a mistake to point out, not to guess at."""
    if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, str) and _DIGITS.fullmatch(value))):
        raise ValueError("not a whole number in plain digits")
    return value


def _decimal_number(value: object) -> object:
    """A finite int or float, or a string of plain decimal digits (`8`, `0.5`): not `1e-300`, `nan`, `inf`."""
    if isinstance(value, bool):
        raise ValueError("not a number")
    if isinstance(value, int | float) and math.isfinite(value):
        return value
    if isinstance(value, str) and _DECIMAL.fullmatch(value):
        return value
    raise ValueError("not a number in plain decimal digits")


# Every numeric setting has both bounds (ge, le); a value outside them, or not written plainly, is refused at
# start-up naming the setting and its bounds (numeric_rule).
WholeNumber = Annotated[int, BeforeValidator(_whole_number)]
Number = Annotated[float, BeforeValidator(_decimal_number)]

QUEUE_SETTINGS = ("notifications_queue", "reports_queue", "checks_queue")
SCHEDULE_SETTINGS = (
    "reports_schedule",
    "check_open_bottles_schedule",
    "check_silent_bottles_schedule",
    "check_late_doses_schedule",
)
# host.json's functionTimeout (tests/functions/test_settings.py keeps them equal): the host stops a run that takes
# longer, so no run the settings allow may.
FUNCTION_TIMEOUT = timedelta(minutes=10)


class Settings(BaseSettings):
    """Every setting the app reads. Names are the upper-cased field names."""

    model_config = SettingsConfigDict(case_sensitive=False, extra="ignore", frozen=True)

    mongodb_connection_string: str = Field(
        default="",
        description="MongoDB or Cosmos DB for MongoDB connection string (required outside tests); checked at "
        "start-up as pymongo parses it, without connecting.",
    )
    mongodb_database: str = Field(
        default="pillbottle",
        description="Database name, checked at start-up against MongoDB's and Cosmos DB's naming rules "
        "(database_name_problem).",
    )

    max_event_age_days: WholeNumber = Field(
        default=30, ge=1, le=365, description="Oldest device event accepted (offline buffering), in days."
    )
    heartbeat_window_hours: WholeNumber = Field(
        default=24,
        # The heartbeat tally counts an hour from the ring some minutes after the hour closed (SETTLE, then its
        # pass), and a ring keeps an hour H only until server hour H + window - 1 ends: with 1, an hour that ends
        # a 4-hour ring field is cleared by the bottle's first heartbeat of the next hour, before it is counted.
        ge=2,
        le=48,
        description="Hours of heartbeats each bottle's heartbeat document counts, the current hour included: "
        "a heartbeat buffered for longer is accepted but not counted in the reports. At least 2: the heartbeat "
        "tally counts an hour after it has closed, and must find it in the ring then.",
    )
    store_max_retries: WholeNumber = Field(
        default=3, ge=0, le=10, description="Retries of a throttled or failed database call before a 503."
    )
    store_retry_base_ms: WholeNumber = Field(
        default=100, ge=1, le=2000, description="First back-off delay; doubles per retry (capped at 2 s)."
    )
    store_server_selection_timeout_ms: WholeNumber = Field(
        default=3000, ge=100, le=60_000, description="Longest wait for a reachable database server per attempt."
    )
    store_connect_timeout_ms: WholeNumber = Field(
        default=3000, ge=100, le=60_000, description="Longest wait to open a connection to the database."
    )
    store_socket_timeout_ms: WholeNumber = Field(
        default=8000, ge=100, le=300_000, description="Longest wait for a database reply on an open connection."
    )
    request_deadline_seconds: Number = Field(
        default=8.0,
        ge=0.01,  # 10 ms: less is a typo, not a deadline
        le=200,  # below the 230 s an HTTP trigger may take in Azure
        description="Longest an HTTP invocation spends on the database, retries included, before it answers 503.",
    )
    outage_retry_after_seconds: WholeNumber = Field(
        default=30,
        ge=1,
        le=3600,
        description="Retry-After of a 503 when the database is unreachable: this plus up to as much again, "
        "at random, so a fleet does not come back at once. Also the widest spread of a throttled 503's "
        "Retry-After (the server's hint plus 0-2 s, widening towards this under sustained throttling).",
    )

    # Retention: how long each growing collection keeps a document after its last write (Cosmos DB's `_ts`
    # TTL in infra/, a TTL index on the document's own time elsewhere: shared/store/schema.py). Late events must
    # still find their hour and their day.
    actions_retention_days: WholeNumber = Field(
        default=60,
        ge=2,
        le=36_500,
        description="Days an opened/closed event is kept (the reports keep their counts); longer than "
        "MAX_EVENT_AGE_DAYS, so an event buffered that long is counted with the rest of its hour.",
    )
    hourly_reports_retention_days: WholeNumber = Field(
        default=60,
        ge=2,
        le=36_500,
        description="Days an hourly report is kept after its last change (the daily reports keep the totals); "
        "longer than MAX_EVENT_AGE_DAYS, so a late event's day is rolled up from all of its hours.",
    )
    notifications_retention_days: WholeNumber = Field(
        default=90, ge=1, le=36_500, description="Days a notification is kept after its last change."
    )
    daily_reports_retention_days: WholeNumber = Field(
        default=400,
        ge=2,
        le=36_500,
        description="Days a daily report is kept after its last change (a year and a month: this month beside "
        "last year's); more than MAX_EVENT_AGE_DAYS + 1, so a late event's day is still there to be rolled up.",
    )

    # Reports (the dispatcher `aggregate_reports` and the workers `aggregate_report_partition`).
    reports_schedule: str = Field(
        default="0 */1 * * * *", description="NCRONTAB schedule of the report feeds' dispatcher."
    )
    reports_partitions: WholeNumber = Field(
        default=4,
        ge=1,
        le=1024,
        description="Partitions of the heartbeat tally, and of the actions' feed outside Cosmos DB (which has one "
        "per physical partition); each is read by one worker at a time.",
    )
    reports_queue: str = Field(
        default="report-partitions",
        description="Azure Storage queue of the report workers' work messages, one per feed partition.",
    )
    reports_lease_seconds: WholeNumber = Field(
        default=120,
        ge=10,
        le=3600,
        description="How long a worker holds a feed partition's lease without renewing it; a dead worker's "
        "partition is dispatched again once it expires. Longer than the time budget.",
    )
    change_source: Literal["change_stream", "polling"] = Field(
        default="change_stream",
        description="How the consumer reads changes: MongoDB change streams, or polling by server receive time "
        "(stores without change streams: mongomock, an account with them disabled).",
    )
    reports_time_budget_seconds: Number = Field(
        default=45.0,
        ge=0.01,
        le=540,  # below host.json's functionTimeout (10 minutes)
        description="Longest a report worker reads and aggregates its partition before it stops.",
    )
    reports_page_size: WholeNumber = Field(
        default=500, ge=1, le=10_000, description="Changes per page; a page is aggregated, then checkpointed."
    )
    reports_tally_spread_minutes: WholeNumber = Field(
        default=60,
        ge=0,
        le=60,
        description="Minutes over which the heartbeat tally spreads each partition's hourly pass (roll-ups "
        "included), paced by the last pass's pages, instead of reading as fast as it can: autoscale bills each "
        "hour at its peak, and standard throughput must be set for the busiest minute. 0 turns pacing off. At most "
        "60: a pass ends by the time the next hour is due, whenever it began.",
    )
    reports_poll_overlap_seconds: WholeNumber = Field(
        default=300,
        ge=0,
        le=86_400,
        description="How far before its checkpoint the polling source (and a recovery) reads again, for writes "
        "that commit after later ones and for clock skew between instances; a polling partition quiet for longer "
        "than this reads nothing again.",
    )
    daily_rollup_hours: WholeNumber = Field(
        default=6,
        ge=1,
        le=24,
        description="Hours between the roll-ups of a day's daily reports (a divisor of 24, counted from midnight "
        "UTC): the heartbeat tally rolls each user's day up when it counts the hour that ends a block of them, "
        "so a day's report lags its hours by up to this plus an hour; a closed day's is complete.",
    )

    daily_rollup_staggered: bool = Field(
        default=True,
        description="Spread the daily roll-ups over each block's hours, each user at its own hour (by its bucket), "
        "instead of every user's at the block's end: each pass rolls up a block's share of the users, so no hour "
        "bills a burst. A day's report still lags its hours by up to DAILY_ROLLUP_HOURS plus an hour; a closed "
        "day's is complete within DAILY_ROLLUP_HOURS of midnight UTC (at once when off).",
    )

    # Notification checks: the dispatcher timers and the partition workers `run_check_partition`
    # (shared/notifications/checks/, functions/checks.py).
    check_open_bottles_schedule: str = Field(
        default="0 */1 * * * *", description="NCRONTAB schedule of check_open_bottles."
    )
    check_silent_bottles_schedule: str = Field(
        default="0 */5 * * * *", description="NCRONTAB schedule of check_silent_bottles."
    )
    check_late_doses_schedule: str = Field(
        default="0 */5 * * * *", description="NCRONTAB schedule of check_late_doses."
    )
    check_late_doses_spread_minutes: WholeNumber = Field(
        default=4,
        ge=0,
        le=8,  # with the run's budget and its sends, below host.json's functionTimeout (10 minutes)
        description="Minutes over which each partition's late-dose sweep spreads its batches (and sends the "
        "notifications of each as it goes) when it has at least one a minute, instead of writing as fast as it "
        "can: autoscale bills each hour at its peak, and the morning peak lands in one sweep. 0 turns pacing off. "
        "Keep it below the check's interval (CHECK_LATE_DOSES_SCHEDULE, 5 minutes).",
    )
    check_partitions: WholeNumber = Field(
        default=4,
        ge=1,
        le=1024,
        description="Partitions (bucket ranges) each check's sweep is split into: each timer run sends one work "
        "message per partition, and a queue-triggered worker sweeps it with its own time budget and message cap.",
    )
    checks_queue: str = Field(
        default="check-partitions",
        description="Azure Storage queue of the checks' work messages, one per (check, partition).",
    )
    left_open_minutes: WholeNumber = Field(
        default=5, ge=1, le=1440, description="A bottle open longer than this is left open (one notification)."
    )
    silent_minutes: WholeNumber = Field(
        default=60, ge=1, le=10_080, description="A bottle without a heartbeat for longer than this is silent."
    )
    dose_history: WholeNumber = Field(
        default=32, ge=1, le=500, description="Dose times kept on each bottle for the late-dose check to re-play."
    )
    notifications_queue: str = Field(
        default="notifications",
        description="Azure Storage queue the checks send a message to per new notification (delivery service).",
    )
    # The queue's storage account is the host's own (AzureWebJobsStorage), read under the host's setting names:
    # a connection string locally; identity-based in Azure (shared/notifications/queue.py).
    storage_connection_string: str = Field(
        default="",
        validation_alias="AzureWebJobsStorage",
        description="Storage connection string for local runs (UseDevelopmentStorage=true, Azurite); unset in Azure.",
    )
    storage_queue_service_uri: str = Field(
        default="",
        validation_alias="AzureWebJobsStorage__queueServiceUri",
        description="Queue endpoint of the host's storage account, reached with a managed identity (Azure).",
    )
    storage_client_id: str = Field(
        default="",
        validation_alias="AzureWebJobsStorage__clientId",
        description="Client id of the user-assigned identity for that endpoint (empty: DefaultAzureCredential).",
    )
    storage_blob_service_uri: str = Field(
        default="",
        validation_alias="AzureWebJobsStorage__blobServiceUri",
        description="Blob endpoint of the host's storage account, reached with a managed identity (Azure): the "
        "archive's container is there.",
    )
    # The archive (shared/archive/): Parquet files of every opened/closed event, kept for good, and of every
    # bottle-hour's heartbeats, kept HEARTBEAT_ARCHIVE_DAYS (docs/archive.md). On the host's storage account (the
    # connection string locally, the blob endpoint and identity in Azure), or in a local folder.
    archive_container: str = Field(
        default="archive",
        # Azure's container names: 3-63 lower-case letters, digits and single hyphens (_one_container_name).
        pattern=r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$",
        description="Blob container of the archive, on the host's storage account (infra/ creates it, with its "
        "lifecycle management policy).",
    )
    heartbeat_archive_days: WholeNumber = Field(
        default=14,
        ge=1,
        le=36_500,
        description="Days the archive keeps a bottle-hour's heartbeats after its file was last written: the "
        "storage account's lifecycle management policy deletes them (infra/ deploys it from the same parameter); "
        "the archive's checks look no further back. Opened/closed events are kept for good.",
    )
    archive_page_size: WholeNumber = Field(
        default=5000,
        ge=1,
        le=10_000,
        description="Events the archive's sweep of the actions reads per query: on Cosmos DB each query reaches "
        "every physical partition of `bottle_actions`, so fewer, larger pages cost fewer request units.",
    )
    archive_dir: str = Field(
        default="",
        description="A local folder that holds the archive, in the container's layout, instead of the storage "
        "account (./dev simulate and ./dev serve set one); empty: the container.",
    )
    queue_send_timeout_seconds: Number = Field(
        default=5.0, ge=0.1, le=60, description="Connect and read timeout of each queue send."
    )
    queue_send_retries: WholeNumber = Field(
        default=2,
        ge=0,
        le=5,
        description="Retries of a failed queue send (1 s apart) before the run leaves it and the rest pending.",
    )
    check_batch_size: WholeNumber = Field(
        default=500, ge=1, le=10_000, description="Bottles a check reads and writes per batch (bounds its memory)."
    )
    queue_messages_per_partition: WholeNumber = Field(
        default=5000,
        ge=1,
        le=100_000,
        description="Most queue messages one partition's check run sends (its own pending notifications); the "
        "rest stay pending for that partition's next run.",
    )
    queue_send_concurrency: WholeNumber = Field(
        default=8,
        ge=1,
        le=64,
        description="Queue sends one check run makes at once (a bounded thread pool): at the late-dose peak a "
        "partition sends thousands of notifications. At most 10 keeps within the HTTP connection pool the queue "
        "client keeps per host.",
    )
    checks_time_budget_seconds: Number = Field(
        default=50.0,
        ge=0.01,
        le=540,  # below host.json's functionTimeout (10 minutes)
        description="Longest one partition's check run sweeps before it stops; its next run carries on.",
    )

    @field_validator("mongodb_connection_string")
    @classmethod
    def _a_connection_string(cls, value: str) -> str:
        """Empty is allowed (tests; a request then answers 503 "not configured"); anything else must be a
        connection string pymongo takes, or every request would fail on it. The message never quotes it."""
        if value:
            problem = connection_string_problem(value)
            if problem is not None:
                raise ValueError(problem)
        return value

    @field_validator("mongodb_database")
    @classmethod
    def _a_database_name(cls, value: str) -> str:
        """A name the driver or the server would refuse fails every request with an anonymous 500; say so now."""
        problem = database_name_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator(*SCHEDULE_SETTINGS)
    @classmethod
    def _a_schedule_that_fires(cls, value: str) -> str:
        """The host would not run a timer whose schedule it cannot read (or that never fires): the checks or the
        reports would stop without a word. Schedule.parse says what is wrong."""
        Schedule.parse(value)
        return value

    @field_validator(*QUEUE_SETTINGS)
    @classmethod
    def _a_queue_name(cls, value: str) -> str:
        problem = queue_name_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _one_queue_per_kind_of_message(self) -> "Settings":
        """Each queue carries one kind of message to one reader: check work on the users' notification queue
        would be delivered to the users, and a queue named as another's poison queue (`<queue>-poison`, where
        the host moves a message that failed too often) would be read as what it is not."""
        names = {name.upper(): getattr(self, name) for name in QUEUE_SETTINGS}
        for setting, queue in names.items():
            for other, other_queue in names.items():
                if setting < other and queue == other_queue:
                    raise ValueError(f"{setting} and {other} name the same queue: each carries one kind of message")
                if queue == f"{other_queue}-poison":
                    raise ValueError(
                        f"{setting} names {other}'s poison queue ({other} followed by -poison), where the host "
                        "moves the messages that failed too often: each queue carries one kind of message"
                    )
        return self

    @field_validator("storage_connection_string")
    @classmethod
    def _a_storage_connection_string(cls, value: str) -> str:
        """Empty is allowed (Azure reaches the storage with an identity); anything else must be a connection string
        the Storage SDK reads, or every notification's send and every archive write would fail on it. The message
        never quotes it (it may hold the account key)."""
        if value:
            problem = storage_connection_string_problem(value)
            if problem is not None:
                raise ValueError(problem)
        return value

    @field_validator("storage_queue_service_uri", "storage_blob_service_uri")
    @classmethod
    def _a_service_endpoint(cls, value: str) -> str:
        if value:
            problem = endpoint_problem(value)
            if problem is not None:
                raise ValueError(problem)
        return value

    @field_validator("storage_client_id")
    @classmethod
    def _a_client_id(cls, value: str) -> str:
        """A managed identity's client id is a GUID: anything else fails the first token request, and with it
        every send and archive write."""
        if value and not _GUID.fullmatch(value):
            raise ValueError(
                "must be the client id (a GUID, like 00000000-0000-0000-0000-000000000000) of the user-assigned "
                "managed identity, or empty"
            )
        return value

    @model_validator(mode="after")
    def _paced_late_dose_runs_end_before_the_next(self) -> "Settings":
        """A paced late-dose run spreads its batches over CHECK_LATE_DOSES_SPREAD_MINUTES: at or past the
        schedule's shortest interval, each run would still be sweeping when the next one starts."""
        spread = timedelta(minutes=self.check_late_doses_spread_minutes)
        interval = Schedule.parse(self.check_late_doses_schedule).shortest_interval()
        if spread and spread >= interval:
            raise ValueError(
                f"CHECK_LATE_DOSES_SPREAD_MINUTES ({self.check_late_doses_spread_minutes}) must be less than the "
                f"shortest interval between two runs of CHECK_LATE_DOSES_SCHEDULE ({_duration(interval)}), or 0: a "
                "paced run would still be sweeping when the next one starts"
            )
        return self

    @model_validator(mode="after")
    def _runs_end_within_the_function_timeout(self) -> "Settings":
        """The host stops a function that runs longer than host.json's functionTimeout, mid-run: a check run takes
        up to its budget, the paced waits and its last sends (one request deadline); a report worker's its budget
        and its checkpoint (one request deadline)."""
        limit = FUNCTION_TIMEOUT.total_seconds()
        check_run = (
            self.checks_time_budget_seconds + 60 * self.check_late_doses_spread_minutes + self.request_deadline_seconds
        )
        if check_run >= limit:
            raise ValueError(
                "CHECKS_TIME_BUDGET_SECONDS plus CHECK_LATE_DOSES_SPREAD_MINUTES plus REQUEST_DEADLINE_SECONDS "
                f"({check_run:g} s) must be less than the host's function timeout ({limit:g} s, host.json): a longer "
                "check run is stopped by the host"
            )
        report_run = self.reports_time_budget_seconds + self.request_deadline_seconds
        if report_run >= limit:
            raise ValueError(
                f"REPORTS_TIME_BUDGET_SECONDS plus REQUEST_DEADLINE_SECONDS ({report_run:g} s) must be less than "
                f"the host's function timeout ({limit:g} s, host.json): a longer report run is stopped by the host"
            )
        return self

    @field_validator("archive_container")
    @classmethod
    def _one_container_name(cls, value: str) -> str:
        if "--" in value:
            raise ValueError("a container name has no two hyphens in a row")
        return value

    @model_validator(mode="after")
    def _leases_outlive_their_runs(self) -> "Settings":
        """A lease that expired while its worker still runs would be taken over mid-run (harmless, but wasted)."""
        longest_run = self.reports_time_budget_seconds + self.request_deadline_seconds
        if self.reports_lease_seconds <= longest_run:
            raise ValueError(
                f"REPORTS_LEASE_SECONDS ({self.reports_lease_seconds}) must be longer than a worker's run: "
                f"REPORTS_TIME_BUDGET_SECONDS plus REQUEST_DEADLINE_SECONDS ({longest_run:g})"
            )
        return self

    @model_validator(mode="after")
    def _rollups_divide_the_day(self) -> "Settings":
        if 24 % self.daily_rollup_hours:
            raise ValueError("DAILY_ROLLUP_HOURS must divide 24 (1, 2, 3, 4, 6, 8, 12 or 24)")
        return self

    @model_validator(mode="after")
    def _retention_outlasts_late_events(self) -> "Settings":
        """A late event recomputes its hour from the hour's actions and its day from the day's hourly reports:
        both must still be there."""
        for name in ("actions_retention_days", "hourly_reports_retention_days", "daily_reports_retention_days"):
            if getattr(self, name) <= self.max_event_age_days + 1:
                raise ValueError(f"{name.upper()} must be more than MAX_EVENT_AGE_DAYS + 1")
        return self


_KEY_VAULT_REFERENCE = "@microsoft.keyvault("
_SRV_SCHEME, _SCHEME = "mongodb+srv://", "mongodb://"


def connection_string_problem(uri: str) -> str | None:
    """What is wrong with a MongoDB connection string, or None if pymongo takes it: parsed (hosts, port, user
    and password escaping, every option and its value), never connected. A `mongodb+srv://` string is checked
    as the `mongodb://` one its DNS records would complete, its one host name without a port, so the check
    makes no DNS lookup. The answer never quotes the string, nor its user name or password: it holds a secret."""
    if uri.strip().lower().startswith(_KEY_VAULT_REFERENCE):
        # In Azure the platform replaces a Key Vault reference with the secret; left as it is, it was not resolved.
        return (
            "is a Key Vault reference that was not resolved: the Function App's identity (keyVaultReferenceIdentity) "
            "cannot read the secret, or the secret does not exist"
        )
    parsed = uri
    if uri.lower().startswith(_SRV_SCHEME):
        hosts = uri[len(_SRV_SCHEME) :].split("/", 1)[0].rsplit("@", 1)[-1]
        if not hosts or "," in hosts or ":" in hosts.rsplit("]", 1)[-1]:
            return "a mongodb+srv:// connection string names exactly one host name, without a port"
        if "directconnection=true" in uri.lower():
            return "a mongodb+srv:// connection string cannot ask for directConnection=true"
        parsed = _SCHEME + uri[len(_SRV_SCHEME) :]
    try:
        uri_parser.parse_uri(parsed, validate=True, warn=False)
    except (PyMongoError, ValueError, OSError) as error:  # OSError: a TLS file it names cannot be read
        return "not a MongoDB connection string as pymongo reads it: " + without_secrets(str(error), uri)
    return None


def without_secrets(reason: str, uri: str) -> str:
    """pymongo's reason, unless it quotes the string's user name or password (then only that it was refused)."""
    userinfo = uri.partition("://")[2].split("/", 1)[0].rpartition("@")[0]
    pieces = {userinfo, *userinfo.split(":")}
    pieces |= {unquote_plus(piece) for piece in pieces}
    if any(len(piece) >= 4 and piece in reason for piece in pieces) or uri in reason:
        return "pymongo refused it (its reason quotes the user name or password)"
    return reason[:300]


# MongoDB's rules for database names on every platform ("MongoDB Limits and Thresholds", Naming Restrictions:
# https://www.mongodb.com/docs/manual/reference/limits/#naming-restrictions): none of /\. "$*<>:|? nor the null
# character, and fewer than 64 bytes. Cosmos DB adds '#' (a name is a segment of its resource URIs). Its change
# streams watch no database of MongoDB's own ("Change Streams": "excluding admin, local, and config").
_DATABASE_NAME_FORBIDDEN = '/\\. "$*<>:|?#\0'
_MONGODB_OWN_DATABASES = ("admin", "local", "config")


def database_name_problem(name: str) -> str | None:
    """What is wrong with a database name, or None if MongoDB and Cosmos DB for MongoDB both take it and the
    report feeds can watch it."""
    if not name:
        return "is empty: name the database the app uses (the default is pillbottle)"
    if len(name.encode()) >= 64:
        return "must be shorter than 64 bytes (MongoDB's limit for a database name)"
    forbidden = sorted(set(name) & set(_DATABASE_NAME_FORBIDDEN))
    if forbidden:
        shown = " ".join("the null character" if c == "\0" else "a space" if c == " " else c for c in forbidden)
        return (
            f'cannot contain {shown}: a database name takes none of / \\ . space " $ * < > : | ? # '
            "nor the null character (MongoDB's and Cosmos DB's naming rules)"
        )
    unseen = sorted({c for c in name if c != " " and (c.isspace() or unicodedata.category(c) == "Cc")} - {"\0"})
    if unseen:
        shown = " ".join(_UNSEEN_NAMES.get(c, f"U+{ord(c):04X}") for c in unseen)
        return (
            f"cannot contain a control character or other whitespace ({shown}): a setting pasted with a tab or a "
            "newline names another database than the one set up, which the app would then write to"
        )
    if name.lower() in _MONGODB_OWN_DATABASES:
        return "names one of MongoDB's own databases (admin, local, config), which change streams cannot watch"
    return None


_UNSEEN_NAMES = {"\t": "a tab", "\n": "a newline", "\r": "a carriage return"}


_GUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def storage_connection_string_problem(value: str) -> str | None:
    """What is wrong with a Storage connection string, or None if the Storage SDK takes it for the queue and blob
    services the app uses and it signs with what it holds: read by the SDK's own parser (what
    `QueueClient.from_connection_string` calls), each endpoint an absolute http(s) URL, an account key base64 (the
    SDK decodes it only when it signs the first request). Nothing connects. Never quotes the string."""
    from azure.storage.queue._shared.base_client import parse_connection_str  # noqa: PLC0415 - the SDK's own parser, only when set

    for service in ("queue", "blob"):
        try:
            endpoint, _, credential = parse_connection_str(value, None, service)
        except ValueError as error:
            return f"not a Storage connection string as the Storage SDK reads it ({service} service): {error}"
        if endpoint_problem(endpoint) is not None:
            return f"its {service} endpoint is not an absolute http(s) URL"
        key = credential.get("account_key") if isinstance(credential, dict) else None
        if key is not None:
            try:
                base64.b64decode(key, validate=True)
            except (binascii.Error, ValueError):
                return "its AccountKey is not base64, as a storage account's key is"
    return None


def endpoint_problem(value: str) -> str | None:
    """What is wrong with a storage service endpoint (`https://account.queue.core.windows.net`), or None."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        return "must be an absolute http(s) URL, like https://account.queue.core.windows.net"
    if parts.scheme not in ("https", "http") or not parts.hostname or any(c.isspace() for c in value):
        return "must be an absolute http(s) URL, like https://account.queue.core.windows.net"
    return None


def _duration(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    return f"{seconds // 60} minutes" if seconds % 60 == 0 else f"{seconds} seconds"


# Azure Storage's rules for queue names ("Naming Queues and Metadata",
# https://learn.microsoft.com/rest/api/storageservices/naming-queues-and-metadata): "A queue name must start with a
# letter or number, and can only contain letters, numbers, and the dash (-) character. [...] Consecutive dash
# characters are not permitted [...] All letters in a queue name must be lowercase. A queue name must be from 3
# through 63 characters long." A queue trigger's poison queue is `<queue>-poison`, itself a queue name: 56 at most.
_QUEUE_NAME = re.compile(r"(?!.*--)[a-z0-9][a-z0-9-]*[a-z0-9]")
QUEUE_NAME_MAX = 63 - len("-poison")


def queue_name_problem(name: str) -> str | None:
    """What is wrong with a Storage queue name, or None if Azure takes it and its poison queue."""
    if not 3 <= len(name) <= QUEUE_NAME_MAX:
        return (
            f"must be 3 to {QUEUE_NAME_MAX} characters long (Azure Storage allows 63, and the poison queue, "
            "the name followed by -poison, must fit too)"
        )
    if not _QUEUE_NAME.fullmatch(name):
        return (
            "must be lowercase letters, digits and single hyphens, starting and ending with a letter or digit "
            "(Azure Storage's rule for queue names)"
        )
    return None


class InvalidSettings(ValueError):
    """An app setting has a value the app cannot run with; the message names each such setting."""


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once from the environment. InvalidSettings names every bad setting
    (never its value: it may be a connection string)."""
    try:
        return Settings()
    except ValidationError as error:
        problems = [_problem(e) for e in error.errors()]
        raise InvalidSettings("invalid app settings: " + "; ".join(problems)) from None


def _problem(error: ErrorDetails) -> str:
    """One refusal: the setting, then what is wrong with it (for a numeric one, what it may be)."""
    message = error["msg"].removeprefix("Value error, ")
    if not error["loc"]:
        return message
    field = str(error["loc"][0])
    name = field.upper() if field in Settings.model_fields else field  # an alias is the host's own spelling
    return f"{name}: {numeric_rule(field) or message}"


def numeric_rule(field: str) -> str | None:
    """What a numeric setting may be ("must be a whole number from 1 to 1024, written in digits only (the
    default is 4)"), or None for a setting that is not a number."""
    info = Settings.model_fields.get(field)
    if info is None or info.annotation not in (int, float):
        return None
    low = next(bound.ge for bound in info.metadata if hasattr(bound, "ge"))
    high = next(bound.le for bound in info.metadata if hasattr(bound, "le"))
    if info.annotation is int:
        kind, written = "a whole number", "in digits only"
    else:
        kind, written = "a number", "in digits with at most a decimal point, like 0.5"
    return f"must be {kind} from {low:g} to {high:g}, written {written} (the default is {info.default:g})"
