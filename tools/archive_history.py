"""`./dev archive`: a bottle's dose history over a range of UTC dates, read back from the archive (docs/archive.md)
with the app's own reader of its files: the local folder `./dev simulate` and `./dev serve` write, or a blob
container (Azurite's, or the deployed one with your Azure identity).

    ./dev archive BOTTLE_ID FROM [TO]                 dates YYYY-MM-DD, UTC, both included (TO: FROM)
    ./dev archive bottle-007 2026-03-28 2026-03-29 --dir .local/archive
    ./dev archive bottle-42 2026-03-01 2026-03-31 --blob-service-uri https://ACCOUNT.blob.core.windows.net

A range whose dates have no file of events yet is an error (exit 1) that says so; a range with events of other
bottles only prints that the bottle has none."""

import argparse
import contextlib
import os
import re
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from shared.archive import parquet
from shared.archive.current import archive_of
from shared.archive.layout import ACTIONS, date_folder
from shared.archive.storage import Archive
from shared.settings import Settings, get_settings
from shared.store.command_line import CommandFailed, run_command

DEFAULT_DIR = Path(".local/archive")  # where ./dev simulate and ./dev serve keep their archive by default
MAX_DAYS = 3660


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
    where.add_argument("--blob-service-uri", help="a storage account's blob endpoint, read with your Azure identity")
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
    if args.connection_string or args.blob_service_uri:
        settings = Settings(
            ARCHIVE_CONTAINER=args.container,
            AzureWebJobsStorage=args.connection_string or "",
            AzureWebJobsStorage__blobServiceUri=args.blob_service_uri or "",
        )
    else:
        folder = args.dir or Path(os.environ.get("ARCHIVE_DIR") or DEFAULT_DIR)
        if not folder.is_dir():
            raise NothingArchived(f"no archive folder {folder}: run ./dev simulate or ./dev serve first, or name one")
        settings = Settings(ARCHIVE_DIR=str(folder))
    found = archive_of(settings)
    assert found is not None, "a folder or a storage account is always named here"
    return found


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

    run_command("./dev archive", body)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
