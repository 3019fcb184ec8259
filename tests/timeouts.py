"""A test that never ends fails, named, with where it was (a pytest plugin, registered by tests/conftest.py).

pytest-timeout holds each test to the limit pyproject.toml sets. Its "thread" method, the one that ends a loop on
the Functions runtime's thread pool too (a signal reaches only the main thread), dumps every thread's stack and
ends the process; under pytest-xdist that dump goes to a worker's captured output and is lost, and the report says
only that the worker crashed. This plugin takes over that method's timer: at the limit it writes the test's name
and every thread's stack to the real stderr and to a file the controller reads, and the crash report the
controller makes for the test carries it. The run goes on with a new worker.
"""

import hashlib
import os
import shutil
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Any

import pytest

DUMPS = "PILLBOTTLE_TIMEOUT_DUMPS"  # the folder the dumps go to, made by the controller, inherited by its workers


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or DUMPS in os.environ:
        return
    folder = tempfile.mkdtemp(prefix="pytest-timeouts-")
    os.environ[DUMPS] = folder
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
    config.add_cleanup(lambda: os.environ.pop(DUMPS, None))


def dump_path(nodeid: str) -> Path:
    return Path(os.environ[DUMPS]) / f"{hashlib.sha256(nodeid.encode()).hexdigest()[:20]}.txt"


def every_stack() -> str:
    """Each thread's name and where it is, the innermost call last (as a traceback reads)."""
    frames = sys._current_frames()
    parts = []
    for thread in threading.enumerate():
        frame = frames.get(thread.ident) if thread.ident is not None else None
        if frame is not None:
            parts.append(f"--- thread {thread.name}\n" + "".join(traceback.format_stack(frame)))
    return "\n".join(parts)


def timed_out(item: pytest.Item, limit: float) -> None:
    """The limit ran out: say which test and where every thread was, then end the process."""
    text = f"Timeout: {item.nodeid} ran for more than {limit:.0f} s and was stopped. Every thread's stack:\n"
    text += every_stack()
    try:
        dump_path(item.nodeid).write_text(text, encoding="utf-8")
        capture = item.config.pluginmanager.getplugin("capturemanager")
        if capture is not None:
            capture.suspend_global_capture(in_=True)  # the real stderr, not the test's captured one
        sys.stderr.write(f"\n{text}\n")
        sys.stderr.flush()
    finally:
        os._exit(1)


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool | None:
    """pytest-timeout's "thread" method, with a dump that reaches the report; the "signal" method is its own."""
    if settings.method != "thread" or DUMPS not in os.environ:
        return None
    timer = threading.Timer(settings.timeout, timed_out, (item, settings.timeout))
    timer.name = f"timeout {item.nodeid}"
    timer.daemon = True

    def cancel() -> None:
        timer.cancel()
        timer.join()

    item.cancel_timeout = cancel  # type: ignore[attr-defined]  # what pytest-timeout's cancel hook calls
    timer.start()
    return True


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem: str, report: pytest.TestReport, sched: Any) -> None:
    """The controller's report of a test whose worker died: with the dump, if a timeout caused it."""
    dump = dump_path(crashitem)
    if dump.is_file():
        report.longrepr = f"{report.longrepr}\n{dump.read_text(encoding='utf-8')}"
