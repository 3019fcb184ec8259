"""The HTTP answers the local host gives, for whoever wants to see each one (the tests check every answer of the
app against openapi.yaml: tests/openapi_responses.py). Kept apart from tools/local_host.py so that registering an
observer imports nothing heavy."""

from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class HttpAnswer:
    """One answer a local host gave on a function's route, as its observers (`observe_http_answers`) see it: the app
    the function belongs to (`LoadedApp.key`), the route as declared (`bottles/{bottle_id}`), the request's method
    and URL (as the function saw it), and the answer. `by_host`: the host answered, not the function (a rejected
    function key, the empty 500 of a failed invocation). Paths no route serves (404, 405) are not observed."""

    app: tuple[str, str]
    route: str
    method: str
    url: str
    status: int
    headers: Mapping[str, str]
    body: bytes
    by_host: bool


HttpObserver = Callable[[HttpAnswer], None]
_observers: list[HttpObserver] = []


def observe_http_answers(observer: HttpObserver) -> None:
    """Have `observer` see every HTTP answer of every local host in this process, on the thread that asked for it,
    before the caller gets it. What the observer raises reaches the caller instead of the answer. Registering the
    same observer twice is once."""
    if observer not in _observers:
        _observers.append(observer)


def observing() -> bool:
    """Whether any observer is registered (the host builds no `HttpAnswer` otherwise)."""
    return bool(_observers)


def answered(answer: HttpAnswer) -> None:
    """Show `answer` to every observer, in the order they registered; what one raises propagates."""
    for observer in _observers:
        observer(answer)
