"""Long runs are never silent: a bar on a terminal; in a CI log or a redirect, a plain line every few seconds."""

import io
import time

import pytest

from tools.progress import Progress, Ticker


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_a_plain_line_every_five_seconds_and_one_at_the_end():
    stream, clock = io.StringIO(), FakeClock()
    progress = Progress(200, "simulating", what="requests", stream=stream, clock=clock, every=5)

    for seconds, done in [(1, 10), (4.9, 40), (5, 90), (7, 100), (9.9, 120), (12, 150)]:
        clock.now = 100 + seconds
        progress.update(done, f"simulated at step {done}")
    clock.now = 123.4
    progress.finish("simulated 2026-03-30 05:00 UTC")

    assert stream.getvalue().splitlines() == [
        "simulating: simulated at step 90, 45% of requests, 5 s",
        "simulating: simulated at step 150, 75% of requests, 12 s",
        "simulating: simulated 2026-03-30 05:00 UTC, 100% of requests, 23 s",
    ]


def test_on_a_terminal_one_bar_redrawn_in_place():
    stream = Terminal()
    progress = Progress(100, "sending", stream=stream, clock=FakeClock())

    progress.update(50)
    progress.update(50)
    progress.finish()

    assert stream.getvalue() == "sending [############.............]  50%\rsending [#########################] 100%\n"


def test_a_ticker_says_what_runs_while_it_runs_and_when_it_ends():
    stream, clock = io.StringIO(), FakeClock()
    ticker = Ticker(stream, clock=clock, every=0.01)

    with ticker.running("bench: checks"):
        clock.now += 40
        deadline = time.monotonic() + 5
        while "running, 40 s" not in stream.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
        clock.now += 2

    lines = stream.getvalue().splitlines()
    assert lines[0] == "bench: checks: started"
    assert "bench: checks: running, 40 s" in lines[1:-1]
    assert lines[-1] == "bench: checks: done in 42 s"


def test_a_ticker_says_the_work_stopped_when_it_raised_not_that_it_is_done():
    stream, clock = io.StringIO(), FakeClock()
    ticker = Ticker(stream, clock=clock, every=60)

    def work() -> None:
        with ticker.running("bench: checks"):
            clock.now += 7
            raise TimeoutError("timed out")

    with pytest.raises(TimeoutError):
        work()

    assert stream.getvalue().splitlines() == ["bench: checks: started", "bench: checks: stopped after 7 s"]
