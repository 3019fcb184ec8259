"""The archive in a blob container of the host's storage account, through azure-storage-blob (imported only when
the app has an archive there: shared/archive/storage.py `archive_of`).

Reached the way the notifications queue is (shared/notifications/queue.py): the connection string
`AzureWebJobsStorage` locally (Azurite, or `UseDevelopmentStorage=true`), identity-based in Azure
(`AzureWebJobsStorage__blobServiceUri` with the app's user-assigned identity, `AzureWebJobsStorage__clientId`). The
container is created on first use when missing (Azurite starts empty; in Azure, infra/ creates it with its
lifecycle management policy)."""

import logging
from contextlib import suppress
from typing import Any

from azure.core import MatchConditions
from azure.core.credentials import TokenCredential
from azure.core.exceptions import AzureError, ResourceExistsError, ResourceModifiedError, ResourceNotFoundError
from azure.identity import DefaultAzureCredential, ManagedIdentityCredential
from azure.storage.blob import BlobServiceClient, ContainerClient, ExponentialRetry

from shared.archive.storage import ArchiveUnavailable, Stored
from shared.settings import Settings

TIMEOUT_SECONDS = 20  # connect and read timeout of each blob call
RETRIES = 3  # the SDK's own retries of a failed call, before ArchiveUnavailable


class BlobArchive:
    """The archive in a blob container. A guarded write is a Put Blob with If-Match (the ETag read) or
    If-None-Match: * (none yet); the service refuses it (412, 409) when another writer got there first. A missing
    container is created once, by the first write that finds it missing."""

    def __init__(self, container: ContainerClient) -> None:
        self._container = container

    @property
    def where(self) -> str:
        return f"container {self._container.container_name}"

    def read(self, name: str) -> Stored | None:
        try:
            download = self._container.download_blob(name)
            return Stored(download.readall(), str(download.properties.etag))
        except ResourceNotFoundError:  # no such blob, or no container yet
            return None
        except AzureError as error:
            raise self._unavailable("read", name, error) from error

    def write(self, name: str, data: bytes) -> None:
        self._upload(name, data, overwrite=True)

    def write_guarded(self, name: str, data: bytes, version: str | None) -> str | None:
        try:
            if version is None:
                return self._upload(name, data, overwrite=False)
            return self._upload(name, data, overwrite=True, etag=version, match_condition=MatchConditions.IfNotModified)
        except (ResourceExistsError, ResourceModifiedError):
            return None

    def names(self, prefix: str) -> list[str]:
        try:
            return sorted(self._container.list_blob_names(name_starts_with=prefix))
        except ResourceNotFoundError:
            return []
        except AzureError as error:
            raise self._unavailable("list", prefix, error) from error

    def _upload(self, name: str, data: bytes, **conditions: Any) -> str:
        """Upload, creating the container once if it is missing; the blob's new ETag. A refused condition is raised
        as it is."""
        for attempt in (1, 2):
            try:
                reply = self._container.get_blob_client(name).upload_blob(data, **conditions)
                return str(reply["etag"])
            except (ResourceExistsError, ResourceModifiedError):
                raise
            except ResourceNotFoundError as error:
                if attempt == 2 or getattr(error, "error_code", None) != "ContainerNotFound":
                    raise self._unavailable("write", name, error) from error
                self._create_container()
            except AzureError as error:
                raise self._unavailable("write", name, error) from error
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _create_container(self) -> None:
        try:
            with suppress(ResourceExistsError):  # another instance created it first
                self._container.create_container()
        except AzureError as error:
            raise self._unavailable("create", self._container.container_name, error) from error

    def _unavailable(self, what: str, name: str, error: Exception) -> ArchiveUnavailable:
        return ArchiveUnavailable(f"{self.where}: cannot {what} {name}: {type(error).__name__}: {error}")


def container_client(settings: Settings) -> ContainerClient:
    """A client of the archive's container on the host's storage account. Connects on its first call, not here."""
    options: dict[str, Any] = {
        # The SDK logs every request at INFO; failures are raised (ArchiveUnavailable) and logged by the run.
        "http_logging_level": logging.DEBUG,
        "connection_timeout": TIMEOUT_SECONDS,
        "read_timeout": TIMEOUT_SECONDS,
        "retry_policy": ExponentialRetry(initial_backoff=1, increment_base=2, retry_total=RETRIES),
    }
    if settings.storage_connection_string:
        service = BlobServiceClient.from_connection_string(settings.storage_connection_string, **options)
    else:
        credential: TokenCredential = (
            ManagedIdentityCredential(client_id=settings.storage_client_id)
            if settings.storage_client_id
            else DefaultAzureCredential()
        )
        service = BlobServiceClient(settings.storage_blob_service_uri, credential, **options)
    return service.get_container_client(settings.archive_container)
