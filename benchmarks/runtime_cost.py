"""The cost of a request as the Functions runtime runs it, and of a cold start.

    python -m benchmarks.runtime_cost [--requests 600] [--starts 5]

Device requests (`POST /api/bottles/{id}/events`), each invoked two ways in the same run on the same fleet: by
calling the decorated Python function directly (what the local tools did before the runtime ran them), and through
the pinned azure-functions-runtime as the host invokes it (`invocation_request`: the runtime builds the
`func.HttpRequest` from the protocol's HTTP data, runs the function on its thread pool and encodes the response;
tools/local_host.py). One event a request (a heartbeat, an opened/closed pair now and then) and batches of 100
events a 5-minute slot apart, so that every event of a batch is stored on both sides. The store is SecantusDB in a
child process, so the CPU time measured is the Functions side's alone (the app, the runtime, the driver): the
figure that sizes the instances (docs/costs.md). Then the cold start: `import function_app` in a fresh
interpreter, and the runtime's indexing of the app (`worker_init_request` and `functions_metadata_request`), each
the median of `--starts` fresh processes.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

import azure.functions as func

from benchmarks.harness import installed_store, print_table
from benchmarks.ingestion.runs import device_event
from functions.device_events import post_events
from shared.instants import set_clock, utc_now
from shared.settings import get_settings
from tools.arguments import int_between
from tools.local_host import APP_ROOT, LocalHost
from tools.local_store import secantus_process

BATCH = 100
DIRECT = "direct call of the Python function"
RUNTIME = "through the Functions runtime"
SINGLE = "one event a request"
TITLE = "Device requests as the Functions runtime runs them"


@dataclass(frozen=True)
class RequestCost:
    way: str
    shape: str
    requests: int
    events: int
    wall_s: float
    cpu_s: float

    @property
    def cpu_ms_per_request(self) -> float:
        return 1000 * self.cpu_s / self.requests

    @property
    def wall_ms_per_request(self) -> float:
        return 1000 * self.wall_s / self.requests


Post = Callable[[str, bytes, str], tuple[int, bytes]]


def direct_post() -> Post:
    handler = post_events.build().get_user_function()

    def post(bottle_id: str, body: bytes, key: str) -> tuple[int, bytes]:
        request = func.HttpRequest(
            method="POST",
            url=f"/api/bottles/{bottle_id}/events",
            headers={"x-device-key": key, "content-type": "application/json"},
            route_params={"bottle_id": bottle_id},
            body=body,
        )
        response = handler(request)
        return response.status_code, response.get_body()

    return post


def runtime_post(host: LocalHost) -> Post:
    def post(bottle_id: str, body: bytes, key: str) -> tuple[int, bytes]:
        response = host.invoke_http(
            "post_events",
            method="POST",
            url=f"/api/bottles/{bottle_id}/events",
            headers={"x-device-key": key, "content-type": "application/json"},
            params={},
            route_params={"bottle_id": bottle_id},
            body=body,
        )
        return response.status_code, response.get_body()

    return post


def provision(host: LocalHost, bottles: int, prefix: str) -> dict[str, str]:
    """`bottles` new bottles named `prefix-N`, provisioned through the runtime; their device keys."""
    keys = {}
    for n in range(bottles):
        bottle_id = f"{prefix}-{n}"
        body = {"user_id": f"user-{n // 3}", "medication": "Cordrazine", "schedule": {"every_hours": 8}}
        response = host.invoke_http(
            "provision_bottle",
            method="PUT",
            url=f"/api/bottles/{bottle_id}",
            headers={"content-type": "application/json"},
            params={},
            route_params={"bottle_id": bottle_id},
            body=json.dumps(body).encode(),
        )
        keys[bottle_id] = json.loads(response.get_body())["device_key"]
    return keys


def bodies(keys: dict[str, str], requests: int, per_request: int, start: datetime) -> Iterator[tuple[str, bytes]]:
    """`requests` bodies for the bottles in turn, `per_request` events each, every event of a bottle in a
    5-minute slot of its own (so every one is stored, whichever way it is invoked)."""
    bottles = list(keys)
    for n in range(requests):
        bottle_id = bottles[n % len(bottles)]
        first = (n // len(bottles)) * per_request
        chunk = [device_event(first + i, start + timedelta(minutes=5 * (first + i))) for i in range(per_request)]
        yield bottle_id, json.dumps(chunk[0] if per_request == 1 else {"events": chunk}).encode()


def measure_posts(way: str, shape: str, post: Post, keys: dict[str, str], work: list[tuple[str, bytes]]) -> RequestCost:
    events = 0
    started, cpu = time.perf_counter(), time.process_time()
    for bottle_id, body in work:
        status, answer = post(bottle_id, body, keys[bottle_id])
        assert status == 202, answer
        events += sum(json.loads(answer).values())  # stored + duplicates (+ expired): every event answered
    return RequestCost(way, shape, len(work), events, time.perf_counter() - started, time.process_time() - cpu)


def request_costs(requests: int, bottles: int = 20) -> list[RequestCost]:
    """Single events and batches, directly and through the runtime, on one fleet of a store in a child process:
    each way gets its own bottles' fresh slots, so neither answers the other's events as duplicates."""
    database = get_settings().mongodb_database
    start = utc_now().replace(second=0, microsecond=0) - timedelta(hours=22)
    costs = []
    with secantus_process(expire=False) as uri, installed_store(uri, database):
        host = LocalHost.load()
        ways = {DIRECT: direct_post(), RUNTIME: runtime_post(host)}
        set_clock(lambda: start + timedelta(hours=22))
        try:
            for w, post in enumerate(ways.values()):  # a warm-up of each way: code paths imported, pool started
                warm = provision(host, 2, f"warm{w}")
                for bottle_id, body in bodies(warm, 4, 1, start):
                    post(bottle_id, body, warm[bottle_id])
            shapes = {SINGLE: (requests, 1), f"batches of {BATCH}": (max(requests // 20, 4), BATCH)}
            for s, (shape, (count, per_request)) in enumerate(shapes.items()):
                for w, (way, post) in enumerate(ways.items()):
                    keys = provision(host, bottles, f"s{s}w{w}")
                    work = list(bodies(keys, count, per_request, start))
                    costs.append(measure_posts(way, shape, post, keys, work))
        finally:
            set_clock(None)
    return costs


def cold_start(starts: int) -> dict[str, float]:
    """Median seconds of `import function_app` and of the runtime indexing the app, each in fresh processes."""
    probes = {
        "import function_app": "import function_app",
        "the runtime indexes the app (init and metadata)": (
            "from tools.host.worker import load_app\nfrom tools.local_host import APP_ROOT\nload_app(APP_ROOT)"
        ),
    }
    timed = "import time\n_t = time.perf_counter()\n{}\nprint(time.perf_counter() - _t)"
    env = {"MONGODB_CONNECTION_STRING": "mongodb://127.0.0.1:9/", "PATH": "/usr/bin:/bin"}
    medians = {}
    for name, code in probes.items():
        runs = []
        for _ in range(starts):
            done = subprocess.run(
                [sys.executable, "-c", timed.format(code)],
                cwd=APP_ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
                check=True,
            )
            runs.append(float(done.stdout.strip().splitlines()[-1]))
        medians[name] = statistics.median(runs)
    return medians


def run(requests: int = 600, starts: int = 5) -> str:
    costs = request_costs(requests)
    rows = []
    for cost in costs:
        direct = next(c for c in costs if c.shape == cost.shape and c.way == DIRECT)
        rows.append(
            [
                cost.shape,
                cost.way,
                f"{cost.requests:,}",
                f"{cost.cpu_ms_per_request:.3f}",
                f"{cost.cpu_ms_per_request / direct.cpu_ms_per_request:.2f}x",
                f"{cost.wall_ms_per_request:.3f}",
                f"{1000 * cost.cpu_s / cost.events:.3f}",
            ]
        )
    header = ["requests", "invoked", "count", "CPU ms/request", "vs direct", "wall ms/request", "CPU ms/event"]
    title = f"{TITLE} ({sys.version.split()[0]}, the store in another process: CPU is the Functions side's)"
    text = print_table(title, rows, header)
    started = cold_start(starts)
    start_rows = [[name, f"{seconds * 1000:.0f}"] for name, seconds in started.items()]
    text += "\n\n" + print_table(f"Cold start, median of {starts} fresh processes", start_rows, ["step", "ms"])
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.runtime_cost",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--requests", type=int_between(20, 100_000), default=600, help="single-event requests a way")
    parser.add_argument("--starts", type=int_between(1, 50), default=5, help="fresh processes per cold-start step")
    args = parser.parse_args(argv)
    run(args.requests, args.starts)


if __name__ == "__main__":
    main()
