"""`./dev archive`: a bottle's dose history over a range of UTC dates, read back from the archive (docs/archive.md)
with the app's own reader of its files: the local folder `./dev simulate` and `./dev serve` write, or a blob
container (Azurite's, or the deployed one with your Azure identity).

    ./dev archive BOTTLE_ID FROM [TO]                 dates YYYY-MM-DD, UTC, both included (TO: FROM)
    ./dev archive bottle-0007 2026-03-28 2026-03-29 --dir .local/archive
    ./dev archive bottle-42 2026-03-01 2026-03-31 --blob-service-uri https://ACCOUNT.blob.core.windows.net

A range whose dates have no file of events yet is an error (exit 1) that says so; a range with events of other
bottles only prints that the bottle has none."""

import argparse
import contextlib
import logging
import os
import re
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from shared.archive.layout import ACTIONS, date_folder
from shared.archive.storage import Archive, ArchiveUnavailable
from shared.store.command_line import CommandFailed, run_command
from tools.arguments import http_url
from tools.local_settings import AZURITE_COMMAND

if TYPE_CHECKING:
    from azure.storage.blob import ContainerClient

DEFAULT_DIR = Path(".local/archive")  # where ./dev simulate and ./dev serve keep their archive by default
MAX_DAYS = 3660
# Each blob call of this command: a connection within 3 s, an answer within 20 s, one retry a second later.
CONNECT_TIMEOUT_SECONDS = 3
READ_TIMEOUT_SECONDS = 20
RETRIES = 1


class NothingArchived(CommandFailed):
    """The range has no file of events in the archive."""


@dataclass(frozen=True)
class History:
    bottle_id: str
    first: datetime
    last: datetime  # the last date, included
    events: list[dict[str, Any]]
    files: int  # files of events read in the range
    others: int  # events of other bottles in them


@contextlib.contextmanager
def archive_setting(chosen: str | None, data_dir: str | None) -> Iterator[None]:
    """ARCHIVE_DIR for a run of ./dev serve or ./dev simulate: the folder chosen, else the environment's, else
    beside a persisted store, else the default."""
    from shared.settings import get_settings  # pydantic: not for --help (nor for ./dev simulate's)
    from tools.local_store import setting_defaults

    if chosen is None:
        default = os.path.join(data_dir, "archive") if data_dir else str(DEFAULT_DIR)
        with setting_defaults(ARCHIVE_DIR=default):
            yield
        return
    before = os.environ.get("ARCHIVE_DIR")
    os.environ["ARCHIVE_DIR"] = chosen
    get_settings.cache_clear()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("ARCHIVE_DIR", None)
        else:
            os.environ["ARCHIVE_DIR"] = before
        get_settings.cache_clear()


def fresh_folder(folder: Path) -> Path:
    """`folder` emptied of the archive's datasets (a simulation replays fixed dates: files of an earlier run would
    mix with its own); other files are left alone."""
    for dataset in ("actions", "heartbeats"):
        shutil.rmtree(folder / dataset, ignore_errors=True)
    return folder


def dates(first: datetime, last: datetime) -> Iterator[datetime]:
    day = first
    while day <= last:
        yield day
        day += timedelta(days=1)


def dose_history(archive: Archive, bottle_id: str, first: datetime, last: datetime) -> History:
    """The bottle's archived opened/closed events with a device date in [first, last], by time; NothingArchived if
    no file of events covers those dates."""
    from shared.archive import parquet  # pyarrow: only where the archive is read

    events: list[dict[str, Any]] = []
    files = others = 0
    for day in dates(first, last):
        for name in archive.names(date_folder(ACTIONS, day)):
            stored = archive.read(name)
            if stored is None:
                continue
            files += 1
            for row in parquet.decode(stored.data):
                if row["bottle_id"] == bottle_id:
                    events.append(row)
                else:
                    others += 1
    if not files:
        span = f"{first:%Y-%m-%d}" if first == last else f"{first:%Y-%m-%d} to {last:%Y-%m-%d}"
        raise NothingArchived(
            f"nothing is archived for {span} in the {archive.where}: no file under {date_folder(ACTIONS, first)}"
            + ("" if first == last else f" to {date_folder(ACTIONS, last)}")
            + " (a receive hour's events are archived within about two hours of its end)"
        )
    events.sort(key=lambda row: (row["time"], row["action"] == "closed", row["received_at"]))
    return History(bottle_id, first, last, events, files, others)


def describe(history: History) -> str:
    """The history as printed: a line per event, then the doses and pills taken."""
    span = f"{history.first:%Y-%m-%d} to {history.last:%Y-%m-%d} (UTC)"
    if not history.events:
        return (
            f"{history.bottle_id}: no opened/closed event archived from {span} "
            f"({history.others} events of other bottles are)"
        )
    lines = [f"{history.bottle_id}: dose history from {span}, {len(history.events)} events", ""]
    lines.append(
        f"{'time (UTC)':<24} {'action':<7} {'pills taken':>11} {'pills left':>10} {'mass':>8}  user, medication"
    )
    for row in history.events:
        taken = "" if row["pills_taken"] is None else str(row["pills_taken"])
        lines.append(
            f"{row['time']:%Y-%m-%d %H:%M:%S}{'':<5} {row['action']:<7} {taken:>11} {row['number_of_pills']:>10} "
            f"{row['mass_of_contents']:>8.2f}  {row['user_id']}, {row['medication']}"
        )
    doses = [row for row in history.events if row["action"] == "closed" and (row["pills_taken"] or 0) > 0]
    pills = sum(row["pills_taken"] for row in doses)
    lines += ["", f"doses: {len(doses)}, pills taken: {pills}"]
    return "\n".join(lines)


def utc_date(text: str) -> datetime:
    try:
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text, re.ASCII):
            raise ValueError(text)
        return datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date YYYY-MM-DD") from None


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="./dev archive", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("bottle_id", help="the bottle")
    parser.add_argument("first", metavar="FROM", type=utc_date, help="first UTC date, YYYY-MM-DD")
    parser.add_argument("last", metavar="TO", type=utc_date, nargs="?", help="last UTC date, included (default FROM)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--dir", type=Path, help=f"the archive's local folder (default: ARCHIVE_DIR, else {DEFAULT_DIR})"
    )
    where.add_argument(
        "--connection-string", help="a storage connection string (Azurite's: UseDevelopmentStorage=true)"
    )
    where.add_argument(
        "--blob-service-uri", type=http_url, help="a storage account's blob endpoint, read with your Azure identity"
    )
    parser.add_argument("--container", default="archive", help="the archive's container (default %(default)s)")
    args = parser.parse_args(argv)
    args.last = args.last or args.first
    if args.last < args.first:
        parser.error(f"TO ({args.last:%Y-%m-%d}) is before FROM ({args.first:%Y-%m-%d})")
    if (args.last - args.first).days >= MAX_DAYS:
        parser.error(f"a range of at most {MAX_DAYS} days")
    return args


def archive_named(args: argparse.Namespace) -> Archive:
    """The archive the arguments name (a folder by default)."""
    from shared.archive.current import archive_of  # the settings (pydantic): not for --help
    from shared.settings import Settings

    if args.connection_string is not None or args.blob_service_uri is not None:
        from shared.archive.blob import BlobArchive  # the Storage SDK: only for a blob archive

        return BlobArchive(container_named(args))
    folder = args.dir or Path(os.environ.get("ARCHIVE_DIR") or DEFAULT_DIR)
    if not folder.is_dir():
        raise NothingArchived(f"no archive folder {folder}: run ./dev simulate or ./dev serve first, or name one")
    found = archive_of(Settings(ARCHIVE_DIR=str(folder)))
    assert found is not None, "a folder is always named here"
    return found


def container_named(args: argparse.Namespace) -> "ContainerClient":
    """The client of the container the arguments name, as the app's (shared/archive/blob.py) but bounded for a
    command someone waits on: a connection that cannot be made fails after CONNECT_TIMEOUT_SECONDS and one
    retry, not after the app's 20-second timeouts and three growing back-offs (20 s for a refused connection).
    CommandFailed for a connection string the SDK cannot read (never printed: it holds the account's key)."""
    from azure.identity import DefaultAzureCredential  # the SDKs: only for a blob archive
    from azure.storage.blob import BlobServiceClient, LinearRetry

    options: dict[str, Any] = {
        "http_logging_level": logging.DEBUG,  # the SDK logs every request at INFO
        "connection_timeout": CONNECT_TIMEOUT_SECONDS,
        "read_timeout": READ_TIMEOUT_SECONDS,
        "retry_policy": LinearRetry(backoff=1, random_jitter_range=0, retry_total=RETRIES),
    }
    if args.connection_string is not None:
        try:
            service = BlobServiceClient.from_connection_string(args.connection_string, **options)
        except ValueError as error:
            raise CommandFailed(
                f"--connection-string: not a storage connection string the SDK reads ({error}); Azurite's is "
                "UseDevelopmentStorage=true"
            ) from None
    else:
        try:
            service = BlobServiceClient(args.blob_service_uri, DefaultAzureCredential(), **options)
        except ValueError as error:  # an identity's token only over https
            raise CommandFailed(f"--blob-service-uri {args.blob_service_uri}: {error}") from None
    try:
        return service.get_container_client(args.container)
    except ValueError as error:
        raise CommandFailed(f"--container {args.container!r}: {error}") from None


def unavailable(error: ArchiveUnavailable, args: argparse.Namespace) -> CommandFailed:
    """The one line for a blob archive that could not be read: what failed, where, and what to do. Where is the
    account's endpoint, never the connection string."""
    from azure.core.exceptions import (
        ClientAuthenticationError,
        HttpResponseError,
        ServiceRequestError,
        ServiceResponseError,
    )

    cause = error.__cause__
    source = "--connection-string" if args.connection_string is not None else "--blob-service-uri"
    endpoint = endpoint_of(args)
    local = urlsplit(endpoint).hostname in ("127.0.0.1", "localhost", "::1")
    if isinstance(cause, ServiceRequestError):  # no connection: refused, no such host, timed out
        hint = f": is Azurite running? In the repository: {AZURITE_COMMAND}" if local else f": check {source}"
        return CommandFailed(f"cannot reach the blob service at {endpoint} ({_reason(cause)}){hint}")
    if isinstance(cause, ServiceResponseError):  # connected, then no answer in time, or the connection dropped
        return CommandFailed(f"no answer from the blob service at {endpoint} ({_reason(cause)})")
    if isinstance(cause, ClientAuthenticationError) and cause.response is None:  # no token for the identity
        return CommandFailed(
            f"{source}: no Azure identity to read {endpoint} with ({_first_line(cause)}): sign in to Azure first "
            "(az login)"
        )
    if isinstance(cause, HttpResponseError):
        if "not supported by Azurite" in str(cause):
            return CommandFailed(
                f"Azurite at {endpoint} refuses the Storage SDK's API version: start it with --skipApiVersionCheck, "
                f"as in {AZURITE_COMMAND}"
            )
        error_code = getattr(cause, "error_code", None)  # the storage SDK's StorageErrorCode, on its errors
        code = f" {getattr(error_code, 'value', error_code)}" if error_code else ""
        return CommandFailed(f"the blob service at {endpoint} answered {cause.status_code}{code}: {_first_line(cause)}")
    return CommandFailed(f"the archive at {endpoint}: {_first_line(error)}")


def endpoint_of(args: argparse.Namespace) -> str:
    """The blob endpoint the arguments name, as scheme://host[:port][/account]: no query (a SAS) and no key."""
    from azure.storage.blob import BlobServiceClient

    if args.connection_string is not None:
        service = BlobServiceClient.from_connection_string(args.connection_string)
    else:
        service = BlobServiceClient(args.blob_service_uri)
    return f"{service.scheme}://{service.primary_hostname}"


@contextlib.contextmanager
def identity_logs_quiet() -> Iterator[None]:
    """azure-identity logs a failed sign-in at WARNING, some twenty lines on stderr; the command says it in one
    (unavailable), so within the block that logger says nothing."""
    logger = logging.getLogger("azure.identity")
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(level)


def _reason(error: Exception) -> str:
    """The transport's reason without urllib3's object names: `Failed to establish a new connection: [Errno 111]
    Connection refused`."""
    return re.sub(r"^\w+\(host=[^)]*\): ", "", _first_line(error))


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    status = 0

    def body() -> None:
        nonlocal status
        try:
            print(describe(dose_history(archive_named(args), args.bottle_id, args.first, args.last)))
        except NothingArchived as nothing:
            print(f"./dev archive: {nothing}", file=sys.stderr)
            status = 1
        except ArchiveUnavailable as error:
            raise unavailable(error, args) from None

    with identity_logs_quiet():
        run_command("./dev archive", body)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
