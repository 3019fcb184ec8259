"""The app's start-up check (function_app.py calls it as the Functions host's worker imports the app): every rule
of the settings class (shared/settings.py), then what a process that serves the app needs beyond a setting's
value, so that a setting that would break the first request, the first timer run or the first archive write
stops the start-up instead, naming the setting:

- a database: MONGODB_CONNECTION_STRING set, and a client pymongo makes of it (without connecting: options it
  checks only then, a mechanism's credentials, the TLS files it names);
- the host's storage for the notifications queue and the archive (`AzureWebJobsStorage`, or in Azure the queue
  and blob endpoints), unless ARCHIVE_DIR holds the archive;
- ARCHIVE_DIR, when set: a folder the app can write in (made if missing, as the archive's first write would).

The local host (tools/host/: the tests, ./dev serve, the simulator, the lifecycle run) installs the store, the
queues and the archive its runs use itself (`use_client`, `use_sender`, `use_archive`), so there the first two
are not required (`served_by_the_local_host`); what is set is checked all the same. Nothing here reaches the
network; only ARCHIVE_DIR is looked at on disk."""

import os
import tempfile

from pymongo.errors import PyMongoError

from shared.settings import InvalidSettings, Settings, get_settings, without_secrets

_local_host = False


def served_by_the_local_host() -> None:
    """Declare that this process's host installs the store, the queues and the archive of every run itself (the
    local host does, tools/host/worker.py), as the Functions host does not."""
    global _local_host  # noqa: PLW0603 - one host per process
    _local_host = True


def check_start_up() -> Settings:
    """The process-wide settings, checked for serving the app; InvalidSettings naming every setting that would
    break it (never a secret)."""
    settings = get_settings()
    problems = start_up_problems(settings, local_host=_local_host, keep_client=not _local_host)
    if problems:
        raise InvalidSettings("invalid app settings: " + "; ".join(problems))
    return settings


def start_up_problems(settings: Settings, *, local_host: bool, keep_client: bool = False) -> list[str]:
    """What would break the app served with these settings, one line a setting (empty: nothing). `keep_client`:
    these are the process's settings, and the client made of the connection string is kept as the process's."""
    problems = []
    if settings.mongodb_connection_string:
        problem = client_problem(settings, keep=keep_client)
        if problem is not None:
            problems.append(f"MONGODB_CONNECTION_STRING: {problem}")
    elif not local_host:
        problems.append(
            "MONGODB_CONNECTION_STRING: is empty: set the connection string of the MongoDB or Cosmos DB for MongoDB "
            "account (without it every request would answer 503 and no check could run)"
        )
    if not local_host:
        problems += storage_problems(settings)
    if settings.archive_dir:
        problem = archive_dir_problem(settings.archive_dir)
        if problem is not None:
            problems.append(f"ARCHIVE_DIR: {problem}")
    return problems


def client_problem(settings: Settings, *, keep: bool = False) -> str | None:
    """What pymongo refuses when it makes the app's client of the connection string (shared/store/client.py, with
    connect=False: nothing is reached, a mongodb+srv:// host is not even looked up), or None. Parsing it
    (Settings) leaves some options unchecked until then: a mechanism's credentials (GSSAPI needs a user name,
    MONGODB-OIDC takes no password), the TLS certificate and key it names. `keep`: the client is the process's
    own (`get_client`), made now instead of at the first request: the same work, done once (with TLS, loading the
    CA certificates takes about 0.3 s)."""
    from shared.store.client import create_client, get_client  # noqa: PLC0415 - the store imports the settings

    uri = settings.mongodb_connection_string
    try:
        if keep:
            get_client()
        else:
            create_client(uri, settings=settings).close()
    except (PyMongoError, ValueError, TypeError, OSError) as error:  # OSError: ssl's, a file's
        return "pymongo cannot make a client of it: " + without_secrets(f"{type(error).__name__}: {error}", uri)
    return None


def storage_problems(settings: Settings) -> list[str]:
    """The host's storage the app needs and has no way to: the notifications queue (every notification of the
    checks is sent there) and the archive (opened/closed events are kept for good only there: the database keeps
    them ACTIONS_RETENTION_DAYS)."""
    if settings.storage_connection_string:
        return []
    problems = []
    if not settings.storage_queue_service_uri:
        problems.append(
            "AzureWebJobsStorage: neither it nor AzureWebJobsStorage__queueServiceUri is set: the checks would send "
            "no notification (set the storage connection string, or the queue endpoint in Azure)"
        )
    if not settings.storage_blob_service_uri and not settings.archive_dir:
        problems.append(
            "AzureWebJobsStorage__blobServiceUri: not set, nor AzureWebJobsStorage or ARCHIVE_DIR: nothing would be "
            "archived, and opened/closed events would be gone after ACTIONS_RETENTION_DAYS"
        )
    return problems


def archive_dir_problem(folder: str) -> str | None:
    """What keeps the app from writing the archive in this folder, or None: it is made if missing (as the
    archive's first write would make it), and a file is made and removed in it. The folder is named (a path, no
    secret)."""
    if os.path.exists(folder) and not os.path.isdir(folder):
        return f"{folder} is a file, not a folder"
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as error:
        return f"cannot make the folder {folder}: {error.strerror or error}"
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        return f"cannot write in the folder {folder}: {error.strerror or error}"
    return None
