"""Calls run side by side, as the app's workers would run them: the races the tests provoke."""

import threading
from collections.abc import Callable
from typing import Any


def at_once(*calls: Callable[[], Any]) -> list[Any]:
    """Each call on its own thread, all released together by a barrier; their results, in order. The first
    failure is raised once every thread has ended."""
    results: list[Any] = [None] * len(calls)
    failures: list[BaseException] = []
    barrier = threading.Barrier(len(calls), timeout=30)

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = calls[i]()
        except BaseException as error:  # raised below, in the test's thread
            failures.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    if failures:
        raise failures[0]
    return results
