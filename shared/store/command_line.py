"""How the operations commands (setup, rebuild) open the database they are pointed at."""

import argparse
import contextlib
from collections.abc import Iterator

from pymongo.database import Database

from shared.settings import get_settings
from shared.store.client import Document, create_client


def add_store_arguments(parser: argparse.ArgumentParser) -> None:
    """`--uri` and `--database` for the operations commands (setup, rebuild)."""
    parser.add_argument("--uri", help="connection string (default: MONGODB_CONNECTION_STRING)")
    parser.add_argument("--database", help="database name (default: MONGODB_DATABASE)")


@contextlib.contextmanager
def command_line_database(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> Iterator[tuple[Database[Document], str]]:
    """The database an operations command names (or the settings do) and its URI; a usage error without
    one. The client is closed when the block ends."""
    settings = get_settings()
    uri = args.uri or settings.mongodb_connection_string
    if not uri:
        parser.error("no connection string: pass --uri or set MONGODB_CONNECTION_STRING")
    client = create_client(uri)
    try:
        yield client[args.database or settings.mongodb_database], uri
    finally:
        client.close()
