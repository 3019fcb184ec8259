"""Where the archive's files are: one seam, two stores with the same layout and the same versioned writes.

- `BlobArchive` (shared/archive/blob.py): a container on the host's storage account through azure-storage-blob,
  reached the way the notifications queue is: the connection string locally, identity-based in Azure;
- `FolderArchive`: a local folder (ARCHIVE_DIR), for ./dev simulate and ./dev serve without a storage emulator.

A write either replaces a file whatever it holds (`write`: the file's content is fixed by its name) or only if it
is still the version that was read (`write_guarded`, a blob's ETag: a merge of rows into a file another writer may
be merging into too). Nothing here imports pyarrow, and the SDK is imported only when a blob store is made, so an
HTTP cold start pays for neither. Which one the app uses: shared/archive/current.py."""

import fcntl
import hashlib
import os
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


class ArchiveUnavailable(Exception):
    """The archive's storage could not be reached or refused a call: the run fails (its message is retried)."""


@dataclass(frozen=True)
class Stored:
    """A file as read: its bytes and its version (a blob's ETag), which a guarded write names."""

    data: bytes
    version: str


class Archive(Protocol):
    @property
    def where(self) -> str:
        """The container or folder, for messages."""

    def read(self, name: str) -> Stored | None:
        """The file, or None if there is none."""

    def write(self, name: str, data: bytes) -> None:
        """Create or replace the file."""

    def write_guarded(self, name: str, data: bytes, version: str | None) -> str | None:
        """Write the file only if it is still at `version` (None: only if there is none): its new version, or None
        if it was not (another writer got there first)."""

    def names(self, prefix: str) -> list[str]:
        """The names of the files under `prefix`, sorted."""


# --- a local folder -------------------------------------------------------------------------------------------


class FolderArchive:
    """The archive in a folder: a file per name (`/` separates folders), written whole through a temporary file
    and a rename, so a reader never sees half a file. A file's version is its SHA-256. Guarded writes hold a
    lock (this process's, and a lock file's for other processes) across the check and the rename."""

    _LOCK_FILE = ".lock"

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()

    @property
    def where(self) -> str:
        return f"folder {self.root}"

    def read(self, name: str) -> Stored | None:
        try:
            data = self._path(name).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as error:
            raise ArchiveUnavailable(f"{self.where}: cannot read {name}: {error}") from error
        return Stored(data, _digest(data))

    def write(self, name: str, data: bytes) -> None:
        with self._locked():
            self._replace(name, data)

    def write_guarded(self, name: str, data: bytes, version: str | None) -> str | None:
        with self._locked():
            found = self.read(name)
            if (None if found is None else found.version) != version:
                return None
            self._replace(name, data)
            return _digest(data)

    def names(self, prefix: str) -> list[str]:
        if not self.root.exists():
            return []
        found = []
        for path in self.root.rglob("*"):
            name = path.relative_to(self.root).as_posix()
            if path.is_file() and not path.name.startswith(".") and name.startswith(prefix):
                found.append(name)
        return sorted(found)

    def _path(self, name: str) -> Path:
        parts = name.split("/")
        if not name or any(part in ("", ".", "..") or part.startswith(".") for part in parts):
            raise ValueError(f"not an archive file name: {name!r}")
        return self.root.joinpath(*parts)

    def _replace(self, name: str, data: bytes) -> None:
        path = self._path(name)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
            temporary.write_bytes(data)
            os.replace(temporary, path)
        except OSError as error:
            raise ArchiveUnavailable(f"{self.where}: cannot write {name}: {error}") from error

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock:
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                handle = (self.root / self._LOCK_FILE).open("a")
            except OSError as error:
                raise ArchiveUnavailable(f"{self.where}: {error}") from error
            with handle:
                fcntl.flock(handle, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(handle, fcntl.LOCK_UN)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
