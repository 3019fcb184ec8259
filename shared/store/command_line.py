"""How the commands (setup, rebuild, and the developer tools) open the database they are pointed at, and how
they fail: a cause the user can fix (a malformed connection string, a store nobody answers for, a port in use)
is one line on stderr naming what was wrong, exit 2, never a traceback; Ctrl-C is one line, exit 130. The
connection string itself is never printed: it holds a secret.

Importing it imports neither pymongo nor the settings (pydantic): a command's `--help` and its usage errors, which
need only this module and argparse, come at once; the functions that open a store import them when called."""

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from shared.store.interrupts import interrupts_reach_main_thread

if TYPE_CHECKING:
    from pymongo import MongoClient
    from pymongo.database import Database

    from shared.store.client import Document

EXIT_ERROR = 2  # argparse's, for a usage error
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command Ctrl-C stopped
_AUTHENTICATION_FAILED = 18


class CommandFailed(Exception):
    """A command cannot go on for a reason its user can fix; the message says what and where, in one line."""


def run_command(prog: str, body: Callable[[], None]) -> None:
    """Run a command's body: CommandFailed, invalid app settings, a store that cannot be used (store_errors
    names where its URI came from; here it cannot) and a file that cannot be read or written are
    `prog: error: ...` and exit 2; Ctrl-C is `prog: interrupted` and exit 130, at once whichever thread it
    reaches (interrupts_reach_main_thread). Anything else is a bug, and
    keeps its traceback."""
    try:
        with interrupts_reach_main_thread():
            body()
    except KeyboardInterrupt:
        _exit(prog, "interrupted", EXIT_INTERRUPTED)
    except Exception as error:
        problem = user_problem(error)
        if problem is None:
            raise
        _exit(prog, f"error: {problem}", EXIT_ERROR)


def user_problem(error: BaseException) -> str | None:
    """What run_command says of `error` in its one line, if it is a cause the user can fix (CommandFailed, invalid
    app settings, a store that cannot be used, a file that cannot be read or written); None for a bug."""
    if isinstance(error, (CommandFailed, *_loaded("shared.settings", "InvalidSettings"))):
        return str(error)  # InvalidSettings names each setting, never its value
    if isinstance(error, _store_failures()):  # a store opened without store_errors
        return _store_problem(error, None)
    if isinstance(error, OSError) and error.filename is not None:
        return f"{error.filename}: {error.strerror}"
    return None


def _loaded(module: str, *names: str) -> tuple[type[BaseException], ...]:
    """The exception classes `names` of `module` if it has been imported, else none: an error cannot be an instance
    of a class whose module never ran, so telling a user's problem from a bug imports nothing (pymongo and the
    settings take a second or more) and cannot fail for want of a library."""
    imported = sys.modules.get(module)
    return tuple(getattr(imported, name) for name in names) if imported is not None else ()


def _store_failures() -> tuple[type[BaseException], ...]:
    """A store that cannot be used: retries given up (StoreUnavailable), nobody answering, a connection string the
    driver cannot use."""
    return _loaded("shared.store.retries", "StoreUnavailable") + _loaded(
        "pymongo.errors", "ConnectionFailure", "ConfigurationError"
    )


def _exit(prog: str, message: str, code: int) -> NoReturn:
    sys.stdout.flush()
    print(f"\n{prog}: {message}" if _mid_line() else f"{prog}: {message}", file=sys.stderr)
    raise SystemExit(code)


def _mid_line() -> bool:
    """A progress bar on a terminal leaves the cursor after it: start the message on a line of its own."""
    return sys.stderr.isatty()


def open_client(uri: str, source: str, *, event_listeners: Sequence[Any] = ()) -> "MongoClient[Document]":
    """The client for `uri` (create_client), or CommandFailed naming `source` (the option or setting the URI
    came from) when it is not a connection string pymongo takes (settings.connection_string_problem, the
    check the app's settings make: without it pymongo would take `notauri` for a host name, and fail to reach
    it only 3 s later)."""
    from pymongo.errors import ConfigurationError  # noqa: PLC0415 - pymongo and the settings only when opening a store

    from shared.settings import connection_string_problem, get_settings  # noqa: PLC0415
    from shared.store.client import create_client  # noqa: PLC0415

    problem = connection_string_problem(uri)
    if problem is not None:
        raise CommandFailed(f"{source}: {problem}")
    get_settings()  # invalid settings (a ValueError too) say so themselves, not as a bad connection string
    try:
        return create_client(uri, event_listeners=event_listeners)
    except (ConfigurationError, ValueError, TypeError) as error:  # what the check above may have missed
        raise CommandFailed(f"{source}: not a MongoDB connection string as pymongo reads it: {error}") from None


@contextlib.contextmanager
def store_errors(source: str) -> Iterator[None]:
    """Within the block, a store that cannot be used (nobody answers, DNS finds no host, the credentials are
    refused) ends the command with CommandFailed naming `source` and what the driver said, in one line."""
    from pymongo.errors import OperationFailure  # noqa: PLC0415 - pymongo only where a store is used

    try:
        yield
    except _store_failures() as error:
        raise CommandFailed(_store_problem(error, source)) from None
    except OperationFailure as error:
        if error.code != _AUTHENTICATION_FAILED:
            raise
        raise CommandFailed(f"the database refused the credentials of {source}") from None


def _store_problem(error: BaseException, source: str | None) -> str:
    """One line for a store that cannot be used, naming `source` (the option or setting of its URI) if known."""
    of = f" of {source}" if source else ""
    if isinstance(error, _loaded("shared.store.retries", "StoreUnavailable")):
        return f"the database{of} is unavailable: {_reason(error.__cause__ or error)}"
    if isinstance(error, _loaded("pymongo.errors", "ConnectionFailure")):
        return f"cannot reach the database{of}: {_reason(error)}"
    return f"the connection string{of} cannot be used: {_reason(error)}"  # e.g. mongodb+srv:// without DNS records


def _reason(error: BaseException) -> str:
    """The driver's message without its topology description and timeouts: `host:port: [Errno 111] ...`."""
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    for tail in (" (configured timeouts", ", Timeout:", ", Topology Description:"):
        text = text.split(tail, 1)[0]
    return text


def add_store_arguments(parser: argparse.ArgumentParser) -> None:
    """`--uri` and `--database` for the operations commands (setup, rebuild)."""
    parser.add_argument("--uri", help="connection string (default: MONGODB_CONNECTION_STRING)")
    parser.add_argument("--database", help="database name (default: MONGODB_DATABASE)")


@contextlib.contextmanager
def command_line_database(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> Iterator[tuple["Database[Document]", str]]:
    """The database an operations command names (or the settings do) and its URI; a usage error without
    one. The client is closed when the block ends, and a store that cannot be used is a CommandFailed."""
    from pymongo.errors import InvalidName  # noqa: PLC0415 - pymongo and the settings only when opening a store

    from shared.settings import get_settings  # noqa: PLC0415

    settings = get_settings()
    uri = args.uri or settings.mongodb_connection_string
    if not uri:
        parser.error("no connection string: pass --uri or set MONGODB_CONNECTION_STRING")
    source = "--uri" if args.uri else "MONGODB_CONNECTION_STRING"
    client = open_client(uri, source)
    try:
        name = args.database or settings.mongodb_database
        try:
            db = client[name]
        except InvalidName as error:
            raise CommandFailed(f"{'--database' if args.database else 'MONGODB_DATABASE'} {name!r}: {error}") from None
        with store_errors(source):
            yield db, uri
    finally:
        client.close()
