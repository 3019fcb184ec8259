"""The notifications queue through the Storage Queue SDK: one client per process, made on first use (nothing
connects at import), behind `delivery.Send`, so the checks send inside their invocation and the domain code is
tested with a fake.

The queue is on the host's storage account, reached the way the host reaches it (shared/settings.py):
- locally, the connection string `AzureWebJobsStorage` (`UseDevelopmentStorage=true`, or Azurite's string);
- in Azure, identity-based: `AzureWebJobsStorage__queueServiceUri` with the app's user-assigned managed identity
  (`AzureWebJobsStorage__clientId`), or DefaultAzureCredential when no client id is set.

Messages are base64-encoded, as a Functions queue trigger expects by default. Each send has short timeouts and a
few quick retries (QUEUE_SEND_TIMEOUT_SECONDS, QUEUE_SEND_RETRIES), so a dead queue cannot hold a run; a missing
queue is created on first use, as the host's queue output binding does (Azurite starts empty)."""

import logging
import threading
from contextlib import suppress
from typing import Any

from azure.core.credentials import TokenCredential
from azure.core.exceptions import AzureError, ResourceExistsError, ResourceNotFoundError
from azure.identity import DefaultAzureCredential, ManagedIdentityCredential
from azure.storage.queue import LinearRetry, QueueClient, StorageErrorCode, TextBase64EncodePolicy

from shared.notifications.delivery import Send, SendFailed
from shared.settings import Settings

RETRY_BACKOFF_SECONDS = 1


class QueueSender:
    """Sends one message per call to the notifications queue; SendFailed when the queue does not take it."""

    def __init__(self, client: QueueClient) -> None:
        self._client = client

    @classmethod
    def from_settings(cls, settings: Settings) -> "QueueSender":
        return cls(queue_client(settings))

    def __call__(self, message: str) -> None:
        try:
            try:
                self._client.send_message(message)
            except ResourceNotFoundError as error:
                if getattr(error, "error_code", None) != StorageErrorCode.QUEUE_NOT_FOUND:
                    raise
                self._create_queue()
                self._client.send_message(message)
        except AzureError as error:
            raise SendFailed(f"queue {self._client.queue_name}: {type(error).__name__}: {error}") from error

    def _create_queue(self) -> None:
        with suppress(ResourceExistsError):  # another instance created it first
            self._client.create_queue()

    def close(self) -> None:
        self._client.close()


class NoQueue:
    """No storage connection is configured: every send fails, so notifications stay pending (and it is logged)."""

    def __call__(self, message: str) -> None:
        raise SendFailed("no queue storage: set AzureWebJobsStorage, or AzureWebJobsStorage__queueServiceUri")

    def close(self) -> None:
        pass


def queue_client(settings: Settings) -> QueueClient:
    """A client of the notifications queue. Connects on its first call, not here."""
    options: dict[str, Any] = {
        "message_encode_policy": TextBase64EncodePolicy(),
        # The SDK logs every request and response at INFO: thousands of lines a run. Failures are logged by the
        # caller (shared/notifications/delivery.py); the request log stays available at DEBUG.
        "http_logging_level": logging.DEBUG,
        "connection_timeout": settings.queue_send_timeout_seconds,
        "read_timeout": settings.queue_send_timeout_seconds,
        "retry_policy": LinearRetry(
            backoff=RETRY_BACKOFF_SECONDS, random_jitter_range=0, retry_total=settings.queue_send_retries
        ),
    }
    if settings.storage_connection_string:
        return QueueClient.from_connection_string(
            settings.storage_connection_string, settings.notifications_queue, **options
        )
    credential: TokenCredential = (
        ManagedIdentityCredential(client_id=settings.storage_client_id)
        if settings.storage_client_id
        else DefaultAzureCredential()
    )
    return QueueClient(settings.storage_queue_service_uri, settings.notifications_queue, credential, **options)


_lock = threading.Lock()
_installed: Send | None = None
_made: tuple[Settings, QueueSender | NoQueue] | None = None


def get_sender(settings: Settings) -> Send:
    """The process's sender: the one installed (tests, local tools), else the queue client for these settings,
    made on first use and kept (made again only if the settings differ, as in tests)."""
    global _made  # noqa: PLW0603 - the process-wide client is the point
    if _installed is not None:
        return _installed
    with _lock:
        if _made is None or _made[0] != settings:
            if _made is not None:
                _made[1].close()
            configured = settings.storage_connection_string or settings.storage_queue_service_uri
            _made = (settings, QueueSender.from_settings(settings) if configured else NoQueue())
        return _made[1]


def use_sender(send: Send | None) -> None:
    """Install a sender for every run of this process (tests, the simulator, the local server); None removes it."""
    global _installed  # noqa: PLW0603
    with _lock:
        _installed = send
