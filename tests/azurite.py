"""Azurite's queue and blob services (the Storage emulator, npm package `azurite` pinned in package.json) in child
processes for the queue and archive tests: each started once per session on a free port, in memory, stopped at the
end."""

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXECUTABLE = ROOT / "node_modules" / ".bin" / "azurite-queue"
BLOB_EXECUTABLE = ROOT / "node_modules" / ".bin" / "azurite-blob"
ACCOUNT = "devstoreaccount1"
# Azurite's well-known development account key (public, documented with the emulator; not a secret).
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
STARTUP_SECONDS = 30


def missing() -> str | None:
    """Why Azurite cannot run here, or None."""
    if shutil.which("node") is None:
        return "Node.js is not installed: the Azurite queue tests need it (then `npm ci` at the repository root)"
    if not EXECUTABLE.exists():
        return "Azurite is not installed: run `npm ci` at the repository root (./dev test and .ci/run do)"
    return None


def connection_string(port: int) -> str:
    """An `AzureWebJobsStorage` connection string for Azurite's queue service on this port."""
    return (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
        f"QueueEndpoint=http://127.0.0.1:{port}/{ACCOUNT};"
    )


def blob_connection_string(port: int) -> str:
    """An `AzureWebJobsStorage` connection string for Azurite's blob service on this port."""
    return (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
        f"BlobEndpoint=http://127.0.0.1:{port}/{ACCOUNT};"
    )


def free_port() -> int:
    """A port nothing listens on (just now)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def _accepts(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def azurite_queue(workdir: Path) -> Iterator[int]:
    """Start Azurite's queue service; yield its port once it accepts connections; stop it."""
    with _azurite(EXECUTABLE, "queue", workdir) as port:
        yield port


@contextmanager
def azurite_blob(workdir: Path) -> Iterator[int]:
    """Start Azurite's blob service; yield its port once it accepts connections; stop it."""
    with _azurite(BLOB_EXECUTABLE, "blob", workdir) as port:
        yield port


@contextmanager
def _azurite(executable: Path, service: str, workdir: Path) -> Iterator[int]:
    port = free_port()
    log = workdir / f"azurite-{service}.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [
                str(executable),
                "--silent",
                "--disableTelemetry",
                "--inMemoryPersistence",
                # The SDK speaks a newer service version than this Azurite knows; the API used is unchanged.
                "--skipApiVersionCheck",
                f"--{service}Host",
                "127.0.0.1",
                f"--{service}Port",
                str(port),
            ],
            cwd=workdir,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while not _accepts(port):
            if process.poll() is not None:
                raise RuntimeError(f"Azurite exited with {process.returncode}: {log.read_text()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Azurite did not listen on {port} within {STARTUP_SECONDS} s: {log.read_text()}")
            time.sleep(0.1)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
