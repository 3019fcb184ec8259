"""Ctrl-C that stops a command at once, whichever of its threads the kernel hands the signal to.

A signal sent to a process goes to any one of its threads that does not block it. Python runs its handler (the
KeyboardInterrupt) in the main thread, but only once that thread next runs Python code: if the signal landed on
another thread (a library's native thread pool, say OpenBLAS's under numpy, or a driver's monitor thread), a main
thread blocked in a system call (a socket read with a 30 s timeout) is not woken and the Ctrl-C waits for it.
`interrupts_reach_main_thread` closes that gap: every SIGINT also wakes the main thread."""

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

_WOKEN_BY = frozenset({signal.SIGINT})
# A signal of no other use here whose handler does nothing: sent to the main thread, it interrupts the system
# call the thread waits in (Python installs its handlers without SA_RESTART), and Python then runs the pending
# SIGINT handler there. Sending SIGINT itself would run that handler twice when the main thread had it already.
_NUDGE = signal.SIGUSR2


@contextlib.contextmanager
def interrupts_reach_main_thread() -> Iterator[None]:
    """Within the block, a SIGINT received on any thread interrupts whatever system call the main thread waits in,
    so the KeyboardInterrupt is raised there at once rather than when the call returns. Outside the main thread,
    or where threads cannot be signalled, it does nothing.

    How: Python writes each handled signal's number to its wakeup fd (signal.set_wakeup_fd) from whichever thread
    the handler ran on; a daemon thread, with the signals blocked for itself, reads that pipe and nudges the main
    thread."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_kill"):
        yield
        return
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)  # set_wakeup_fd's requirement: a handler never blocks on a full pipe
    previous_nudge = signal.signal(_NUDGE, _do_nothing)
    previous_wakeup = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    relay = threading.Thread(
        target=_relay, args=(read_end, threading.main_thread().ident), name="interrupt-relay", daemon=True
    )
    relay.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous_wakeup)
        os.close(write_end)  # the relay's read sees the end of the pipe and returns
        relay.join()
        os.close(read_end)
        signal.signal(_NUDGE, previous_nudge)


def _relay(read_end: int, main_thread: int | None) -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {*_WOKEN_BY, _NUDGE})  # never this thread's to handle
    while received := os.read(read_end, 64):
        if main_thread is not None and _WOKEN_BY.intersection(received):
            signal.pthread_kill(main_thread, _NUDGE)


def _do_nothing(signum: int, frame: object) -> None:
    """The nudge's handler: its only effect is the interrupted system call."""
