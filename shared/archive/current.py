"""The process's archive: the folder ARCHIVE_DIR names, else the container on the host's storage account, else
none; made on first use and kept, like the queue client (shared/notifications/queue.py)."""

import threading
from pathlib import Path

from shared.archive.storage import Archive, FolderArchive
from shared.settings import Settings


def archive_of(settings: Settings) -> Archive | None:
    """The archive these settings name: the folder if ARCHIVE_DIR is set, else the container if the app has a
    storage account (a connection string, or a blob endpoint), else None (nothing is archived)."""
    if settings.archive_dir:
        return FolderArchive(Path(settings.archive_dir))
    if settings.storage_connection_string or settings.storage_blob_service_uri:
        from shared.archive.blob import BlobArchive, container_client  # noqa: PLC0415 - the SDK, only when used

        return BlobArchive(container_client(settings))
    return None


_lock = threading.Lock()
_installed: Archive | None = None
_made: tuple[Settings, Archive | None] | None = None


def get_archive(settings: Settings) -> Archive | None:
    """The process's archive: the one installed (tests, local tools), else the one these settings name, made on
    first use and kept (made again only if the settings differ, as in tests)."""
    global _made  # noqa: PLW0603 - the process-wide client is the point
    if _installed is not None:
        return _installed
    with _lock:
        if _made is None or _made[0] != settings:
            _made = (settings, archive_of(settings))
        return _made[1]


def use_archive(archive: Archive | None) -> None:
    """Install an archive for every run of this process (tests, the simulator); None removes it."""
    global _installed  # noqa: PLW0603
    with _lock:
        _installed = archive
