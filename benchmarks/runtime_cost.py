"""The cost of a request as the Functions runtime runs it, and of a cold start.

    python -m benchmarks.runtime_cost [--requests 600] [--starts 5]

Device requests (`POST /api/bottles/{id}/events`) as a device sends them, each invoked two ways in the same run on
the same fleet: by calling the decorated Python function directly (what the local tools did before the runtime ran
them), and through the pinned azure-functions-runtime as the host invokes it (`invocation_request`: the runtime
builds the `func.HttpRequest` from the protocol's HTTP data, runs the function on its thread pool and encodes the
response; tools/local_host.py). Every bottle is provisioned before the first event it sends, and every request is
sent at its device's time (the app clock a few seconds after its last event), as a bottle in service sends it:

- a heartbeat a request, each bottle's every 30 minutes (the device contract): one database command each, the
  ring write whose filter proves every heartbeat new (the column `commands/request` shows it);
- an opened or a closed event a request (a dose): the bottle's read, the action's insert and its status write;
- batches of 100 events a 5-minute slot apart, the mix of benchmarks/ingestion.py.

The store is SecantusDB in a child process, so the CPU time measured is the Functions side's alone (the app, the
runtime, the driver; not the Functions host's own, which is .NET and not here: docs/costs.md carries it as an
assumption): the figure that sizes the instances. benchmarks/calibration.json records a run of it that the bill
is priced from; the suite prints each run's figures beside that record. Then the cold start: `import
function_app` in a fresh interpreter, and the runtime's indexing of the app (`worker_init_request` and
`functions_metadata_request`), each the median of `--starts` fresh processes.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial

import azure.functions as func

from benchmarks.harness import installed_store, print_table
from benchmarks.ingestion.runs import device_event
from functions.device_events import post_events
from shared.instants import clock_restored, set_clock, utc_now
from shared.settings import get_settings
from tools.arguments import int_between
from tools.command_tally import CommandTally
from tools.local_host import APP_ROOT, LocalHost
from tools.local_store import secantus_process

BATCH = 100
DIRECT = "direct call of the Python function"
RUNTIME = "through the Functions runtime"
HEARTBEAT = "a heartbeat a request"
ACTION = "an opened or closed event a request"
BATCHES = f"batches of {BATCH}"
TITLE = "Device requests as the Functions runtime runs them"
HEARTBEAT_EVERY = timedelta(minutes=30)  # the device contract: a heartbeat every 30 minutes
SLOT = timedelta(minutes=5)  # a batch's events a heartbeat slot apart: none is a repeat
SENT_AFTER = timedelta(seconds=3)  # a device sends a request this long after its last event
IN_SERVICE = timedelta(hours=1)  # bottles are provisioned this long before their first event (a slot or more:
# a heartbeat in the 5-minute slot of the provisioning is proved new by a second command, shared/ingestion/storing.py)


@dataclass(frozen=True)
class RequestCost:
    way: str
    shape: str
    requests: int
    events: int
    wall_s: float
    cpu_s: float
    commands: int = 0  # database commands the requests sent

    @property
    def commands_per_request(self) -> float:
        return self.commands / self.requests

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
    """`bottles` new bottles named `prefix-N`, provisioned through the runtime at the app clock's time; their
    device keys."""
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


def _at(moment: datetime) -> datetime:
    return moment


@dataclass(frozen=True)
class Send:
    """A device request: its bottle, its body, and when the device sends it (the app clock at its arrival)."""

    bottle_id: str
    body: bytes
    at: datetime


def heartbeat_sends(bottles: list[str], requests: int, start: datetime) -> list[Send]:
    """`requests` heartbeats, a request each, the bottles taking turns: each bottle's every HEARTBEAT_EVERY from
    `start` on, each sent SENT_AFTER its time."""
    sends = []
    for n in range(requests):
        at = start + (n // len(bottles)) * HEARTBEAT_EVERY + timedelta(seconds=n % len(bottles))
        event = {"type": "heartbeat", "time": at.isoformat()}
        sends.append(Send(bottles[n % len(bottles)], json.dumps(event).encode(), at + SENT_AFTER))
    return sends


def action_sends(bottles: list[str], requests: int, start: datetime) -> list[Send]:
    """`requests` opened and closed events, a request each, the bottles taking turns: each bottle opened, then
    closed a dose taken (one pill), a minute apart."""
    sends = []
    for n in range(requests):
        k = n // len(bottles)
        at = start + k * timedelta(minutes=1) + timedelta(seconds=n % len(bottles))
        pills = 30 - k // 2
        event: dict[str, object] = {"type": "opened" if k % 2 == 0 else "closed", "time": at.isoformat(),
                                    "mass_of_contents": 0.5 * pills, "number_of_pills": pills}  # fmt: skip
        if k % 2:
            event |= {"pills_taken": 1, "number_of_pills": pills - 1}
        sends.append(Send(bottles[n % len(bottles)], json.dumps(event).encode(), at + SENT_AFTER))
    return sends


def batch_sends(bottles: list[str], requests: int, start: datetime) -> list[Send]:
    """`requests` batches of BATCH events of the ingestion benchmark's mix, the bottles taking turns, each bottle's
    events a SLOT apart (every event of a batch stored), each batch sent SENT_AFTER its last event."""
    sends = []
    for n in range(requests):
        first = (n // len(bottles)) * BATCH
        times = [start + SLOT * (first + i) + timedelta(seconds=n % len(bottles)) for i in range(BATCH)]
        chunk = [device_event(first + i, at) for i, at in enumerate(times)]
        sends.append(Send(bottles[n % len(bottles)], json.dumps({"events": chunk}).encode(), times[-1] + SENT_AFTER))
    return sends


SHAPES: dict[str, Callable[[list[str], int, datetime], list[Send]]] = {
    HEARTBEAT: heartbeat_sends,
    ACTION: action_sends,
    BATCHES: batch_sends,
}


def counts(requests: int) -> dict[str, int]:
    """Requests of each shape for `requests` heartbeats: as many, half as many actions, a twentieth as many
    batches (at least 4)."""
    return {HEARTBEAT: requests, ACTION: max(requests // 2, 4), BATCHES: max(requests // 20, 4)}


def measure_posts(
    way: str, shape: str, post: Post, keys: dict[str, str], work: list[Send], *, tally: CommandTally
) -> RequestCost:
    """Send `work` one request after another, the app clock at each request's arrival; the CPU and wall time they
    took and the database commands they sent. Every request must be answered 202 with every event stored."""
    events = sent = 0
    commands = tally.count
    started, cpu = time.perf_counter(), time.process_time()
    for send in work:
        set_clock(partial(_at, send.at))
        status, answer = post(send.bottle_id, send.body, keys[send.bottle_id])
        assert status == 202, answer
        answered = json.loads(answer)
        assert answered["duplicates"] == answered["expired"] == 0, answered  # every event new: a device's request
        events += answered["stored"]
        sent += 1
    return RequestCost(way, shape, sent, events, time.perf_counter() - started, time.process_time() - cpu,
                       tally.count - commands)  # fmt: skip


def request_costs(requests: int, bottles: int = 20, shapes: tuple[str, ...] = tuple(SHAPES)) -> list[RequestCost]:
    """Each of `shapes`, directly and through the runtime, on one store in a child process: each (shape, way) gets
    bottles of its own, provisioned IN_SERVICE before their first event, so that nothing is a repeat of another's."""
    database = get_settings().mongodb_database
    start = utc_now().replace(second=0, microsecond=0) - timedelta(hours=21)
    costs = []
    tally = CommandTally()
    with secantus_process(expire=False) as uri, installed_store(uri, database, listeners=[tally]):
        host = LocalHost.load()
        ways = {DIRECT: direct_post(), RUNTIME: runtime_post(host)}
        with clock_restored():
            for w, post in enumerate(ways.values()):  # a warm-up of each way: code paths imported, pool started
                set_clock(lambda: start - IN_SERVICE)
                warm = provision(host, 2, f"warm{w}")
                for shape in shapes:
                    for send in SHAPES[shape](list(warm), 4, start):
                        set_clock(partial(_at, send.at))
                        post(send.bottle_id, send.body, warm[send.bottle_id])
            for s, (shape, count) in enumerate((k, n) for k, n in counts(requests).items() if k in shapes):
                for w, (way, post) in enumerate(ways.items()):
                    set_clock(lambda: start - IN_SERVICE)
                    keys = provision(host, bottles, f"s{s}w{w}")
                    work = SHAPES[shape](list(keys), count, start)
                    costs.append(measure_posts(way, shape, post, keys, work, tally=tally))
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
    env = {
        "MONGODB_CONNECTION_STRING": "mongodb://127.0.0.1:9/",
        "AzureWebJobsStorage": "UseDevelopmentStorage=true",  # the start-up requires the host's storage too
        "PATH": "/usr/bin:/bin",
    }
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


HEADER = ["requests", "invoked", "count", "commands/request", "CPU ms/request", "vs direct", "wall ms/request",
          "CPU ms/event"]  # fmt: skip


def rows_of(costs: list[RequestCost]) -> list[list[str]]:
    rows = []
    for cost in costs:
        direct = next(c for c in costs if c.shape == cost.shape and c.way == DIRECT)
        rows.append(
            [
                cost.shape,
                cost.way,
                f"{cost.requests:,}",
                f"{cost.commands_per_request:.2f}",
                f"{cost.cpu_ms_per_request:.3f}",
                f"{cost.cpu_ms_per_request / direct.cpu_ms_per_request:.2f}x",
                f"{cost.wall_ms_per_request:.3f}",
                f"{1000 * cost.cpu_s / cost.events:.3f}",
            ]
        )
    return rows


def run(requests: int = 600, starts: int = 5) -> str:
    rows = rows_of(request_costs(requests))
    header = HEADER
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
    parser.add_argument(
        "--requests", type=int_between(20, 100_000), default=600, help="heartbeat requests a way (half as many events)"
    )
    parser.add_argument("--starts", type=int_between(1, 50), default=5, help="fresh processes per cold-start step")
    args = parser.parse_args(argv)
    run(args.requests, args.starts)


if __name__ == "__main__":
    main()
