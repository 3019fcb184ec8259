"""Progress of a long run on stderr: a bar on a terminal; elsewhere (a CI log, a redirect) a plain line every
few seconds, so a run of minutes is never silent."""

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TextIO

Clock = Callable[[], float]


class Progress:
    """`update(done, where)` as the work goes; `finish(where)` once at the end. `where` says how far in
    the work's own terms, e.g. "simulated 2026-03-28 14:00 UTC"."""

    def __init__(
        self,
        total: int,
        label: str,
        *,
        what: str = "the work",
        stream: TextIO | None = None,
        clock: Clock = time.monotonic,
        every: float = 5.0,
    ) -> None:
        self.total = max(total, 1)
        self.label = label
        self.what = what
        self.stream = stream if stream is not None else sys.stderr
        self.interactive = self.stream.isatty()
        self.clock = clock
        self.every = every
        self.started = clock()
        self.last_line = self.started
        self.shown = -1

    def update(self, done: int, where: str = "") -> None:
        percent = min(done * 100 // self.total, 100)
        if self.interactive:
            self._bar(percent, end="\r")
        elif self.clock() - self.last_line >= self.every:
            self.last_line = self.clock()
            self._line(percent, where)

    def finish(self, where: str = "") -> None:
        if self.interactive:
            self._bar(100, end="\n")
        else:
            self._line(100, where)

    def _bar(self, percent: int, end: str) -> None:
        if percent == self.shown and end == "\r":
            return
        self.shown = percent
        bar = "#" * (percent // 4) + "." * (25 - percent // 4)
        print(f"{self.label} [{bar}] {percent:3d}%", end=end, file=self.stream, flush=True)

    def _line(self, percent: int, where: str) -> None:
        elapsed = self.clock() - self.started
        parts = [where] if where else []
        parts += [f"{percent}% of {self.what}", f"{elapsed:.0f} s"]
        print(f"{self.label}: {', '.join(parts)}", file=self.stream, flush=True)


class Ticker:
    """For work that cannot count its steps: a line saying what runs and for how long, every `every`
    seconds (from a thread), and one when it ends: `done in`, or `stopped after` when it raised."""

    def __init__(self, stream: TextIO | None = None, *, clock: Clock = time.monotonic, every: float = 10.0) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.every = every

    @contextlib.contextmanager
    def running(self, label: str) -> Iterator[None]:
        started = self.clock()
        stop = threading.Event()

        def tick() -> None:
            while not stop.wait(self.every):
                self._say(f"{label}: running, {self.clock() - started:.0f} s")

        self._say(f"{label}: started")
        thread = threading.Thread(target=tick, daemon=True)
        thread.start()
        ended = "stopped after"
        try:
            yield
            ended = "done in"
        finally:
            stop.set()
            thread.join()
            self._say(f"{label}: {ended} {self.clock() - started:.0f} s")

    def _say(self, line: str) -> None:
        print(line, file=self.stream, flush=True)
