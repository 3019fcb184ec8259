"""Ctrl-C in the tests: its default action for the suite's own process and for the processes it starts, even where
the suite was started with SIGINT ignored (a shell without job control starts its background jobs so, and an
ignored signal stays ignored across fork and exec, where a handled one is reset to its default)."""

import contextlib
import signal
from collections.abc import Iterator


@contextlib.contextmanager
def ctrl_c_default_action() -> Iterator[None]:
    """Python's KeyboardInterrupt for SIGINT within the block, and its default action in any process started in it,
    whatever the suite was started with."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
