"""A clock a test moves by hand: what a run reads as the time, and what its waits (sleep) add to it; the report
feeds' and the checks' tests give it to the code they pace."""


class FakeTime:
    """A monotonic clock that moves only when the code under test sleeps (a back-off, a paced wait) or a test
    says so."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
