"""The whole deployment's bill beside Cosmos DB's (benchmarks/design_scale.py): the Functions app's hosting, chosen
by the load (Flex Consumption, Elastic Premium EP1-EP3 or a Dedicated plan for the HTTP requests, the background on
Flex Consumption), the queues, Key Vault, telemetry and the archive; each price with the page it was read from and
the date it was read (READ_ON, HOSTING_READ_ON), each rule with a worked example from its page that
tests/benchmarks/test_deployment_bill.py checks.

What decides the Functions bill: the design scale's ~18 K HTTP requests a second are steady all day. On Flex
Consumption each is an execution ($0.40 a million) and its instance's memory bills while it executes; on Elastic
Premium or a Dedicated plan there is no execution charge, and the instances allocated bill all month whatever they
do. How many instances a plan needs follows the CPU a request takes: the Python worker's, from a recorded calibration
(benchmarks/cpu_calibration.json, never the machine that runs the bench: the headline must not move with it), and the
Functions host's own, which nothing here can measure (HOST_CPU_MS: an assumption with its sources and a range, the
bill printed at both ends).
"""

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from benchmarks import cpu_calibration, design_scale
from shared.settings import Settings
from tools.costs import telemetry
from tools.costs.billing import HOURS_PER_MONTH, PRICE, RESERVED_MAX_DISCOUNT, archive_bill
from tools.costs.rules import Rule

READ_ON = "2026-11-27"  # the date every price and rule below was read
SECONDS_PER_MONTH = HOURS_PER_MONTH * 3600
HOST_JSON = Path(__file__).resolve().parent.parent / "host.json"

# --- sources -----------------------------------------------------------------------------------------------

FLEX_COSTS = "https://learn.microsoft.com/azure/azure-functions/functions-consumption-costs"
FLEX_PLAN = "https://learn.microsoft.com/azure/azure-functions/flex-consumption-plan"
FLEX_PRICING = "https://azure.microsoft.com/pricing/details/functions/"
# The always-ready meters: the pricing page's table as a public design document copies it, in euros
# (github.com, "Functions Flex-consumption pricing": On Demand Execution Time EUR 0.000025 / GB-s, On Demand Total
# Executions EUR 0.371 a million, Always Ready Baseline EUR 0.0000038 / GB-s, Always Ready Execution Time
# EUR 0.0000149 / GB-s, Always Ready Total Executions EUR 0.370439 a million; 100,000 GB-s and 250,000 executions
# free a month, on demand only); no page the search tool returned gives them in dollars.
ALWAYS_READY_EUR = "https://azure.microsoft.com/pricing/details/functions/ (euro table, copied in a public design note)"
EUR_ON_DEMAND_GB_S = 0.000025
EUR_ON_DEMAND_MILLION = 0.371
EUR_BASELINE_GB_S = 0.0000038
EUR_ALWAYS_READY_GB_S = 0.0000149
EUR_ALWAYS_READY_MILLION = 0.370439


@dataclass(frozen=True)
class FlexPrice:
    """Flex Consumption's meters in dollars (a US region, pay as you go). The on-demand ones are FLEX_COSTS'
    worked example's; the always-ready ones are the euro table's at the ratio of the same meter on demand
    (dollars to euros), since no dollar figure was found."""

    on_demand_gb_s: float = 0.000026
    on_demand_per_million: float = 0.40
    free_gb_s: float = 100_000  # a month, per subscription, on demand only
    free_executions: float = 250_000
    baseline_gb_s: float = EUR_BASELINE_GB_S * 0.000026 / EUR_ON_DEMAND_GB_S
    always_ready_gb_s: float = EUR_ALWAYS_READY_GB_S * 0.000026 / EUR_ON_DEMAND_GB_S
    always_ready_per_million: float = EUR_ALWAYS_READY_MILLION * 0.40 / EUR_ON_DEMAND_MILLION
    source: str = (
        f"{FLEX_COSTS} (read {READ_ON}: $0.000026 per GB-s and $0.40 per million executions on demand, the page's "
        f"worked example); {ALWAYS_READY_EUR} (always ready, converted); {FLEX_PRICING} for today's price"
    )


FLEX = FlexPrice()
INSTANCE_CORES = {2048: 1, 4096: 2}  # FLEX_PLAN (Regional subscription memory quotas: 250 cores, 512,000 MB)
MEMORY_SIZES = tuple(INSTANCE_CORES)

RULES: tuple[Rule, ...] = (
    Rule(
        "Flex Consumption on demand",
        "an on-demand instance bills its memory for the time it is executing functions (GB-seconds, at least "
        "1,000 ms an active period, then in steps of 100 ms), however many executions run on it at once, and "
        "each execution; 100,000 GB-s and 250,000 executions a month are free",
        f"{FLEX_COSTS} (Flex Consumption plan: billing modes; the IO-bound and CPU-bound examples); {FLEX_PLAN} "
        "(Billing: 'The minimum billable execution period ... is 1,000 ms')",
        "40 requests a second, 10 at once, 2,048 MB: CPU-bound on 10 instances 10 x 2 GB x 3,600 s x $0.000026 "
        "= $1.872 an hour plus 0.144 M executions x $0.40 = $0.0576, $1.9296; IO-bound on one instance "
        "$0.1872 + $0.0576 = $0.245",
    ),
    Rule(
        "Flex Consumption always ready",
        "an always-ready instance bills a baseline for its memory all the time, a lower rate than on demand while "
        "it executes, and each execution; no free grant: it pays where an instance is busy more than "
        "baseline / (on demand - always ready) of the time",
        f"{FLEX_COSTS} (Always ready: baseline, execution time, executions); {ALWAYS_READY_EUR}",
        "one always-ready instance of 2 GB: EUR 0.0000038 x 2,592,000 s x 2 GB = EUR 19.70 a month of baseline",
    ),
    Rule(
        "instance memory",
        "an instance is 2,048 MB (one core) or 4,096 MB (two); both bill the same per GB-s, so the larger pays "
        "only if a request's work uses its second core: the app's Python worker is one process (its code holds "
        "the interpreter lock), so it does not",
        f"{FLEX_PLAN} (Instance memory; Regional subscription memory quotas: '250 instances of 2,048 MB')",
        "2,048 MB: 1 core, 4,096 MB: 2 cores; at one worker process both serve a core's worth of requests",
    ),
    Rule(
        "HTTP instances",
        "Flex adds HTTP instances as each reaches its per-instance concurrency: the requests under way are the "
        "rate times the time a request takes (Little's law), its database round trips and its CPU, slowed by the "
        "instance's CPU load as an M/M/1 queue (1 / (1 - load)) and at most by the requests it holds at once",
        f"{FLEX_PLAN} (Concurrency; Per-function scaling: 'All HTTP triggered functions ... scale together'); "
        f"{FLEX_COSTS} (the CPU-bound and IO-bound examples)",
        "40 requests a second taking 250 ms each at 10 at once: CPU-bound at a concurrency of 1, 10 instances; "
        "IO-bound at 10 to an instance, 1",
    ),
)

ASSUMPTIONS: tuple[str, ...] = (
    "The CPU a request takes in the Python worker: benchmarks/cpu_calibration.json, a recorded run of "
    "benchmarks/runtime_cost.py (a heartbeat and an opened/closed event, each to a provisioned bottle, through the "
    "pinned runtime; the store in another process), not the machine that runs the bench.",
    "HOST_CPU_MS: the Functions host's own CPU a request (the .NET process in front of the worker), which nothing "
    "here can measure: 1.2 ms, within 0.08 to 2.4 ms (HOST_CPU_SOURCES); the bill is printed at both ends.",
    "DB_CALL_MS: a database round trip in the region, ~5 ms (Cosmos DB answers in single-digit milliseconds).",
    "A queue-triggered instance takes batchSize + newBatchThreshold messages at once (host.json), and a check "
    "run that finds little takes CHECK_RUN_SECONDS, the 1 s an active period bills at least.",
    "The users' own reads (their reports and notifications) are in neither bill: the design gives no rate.",
)

DB_CALL_MS = 5.0
HTTP_CONCURRENCY = 16  # infra/modules/functionapp.bicep httpPerInstanceConcurrency
PYTHON_WORKER_PROCESSES = 1  # the app sets no FUNCTIONS_WORKER_PROCESS_COUNT: one Python process an instance
CHECK_RUN_SECONDS = 1.0
CALLS_PER_SECOND = 1000 / DB_CALL_MS  # database calls a second one worker makes, one after another


# --- the HTTP group ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Requests:
    """A kind of HTTP request at the design scale: how many a second, the CPU each takes and its database round
    trips."""

    name: str
    per_second: float
    cpu_ms: float
    calls: float

    @property
    def io_ms(self) -> float:
        return self.calls * DB_CALL_MS


def usable_cores(memory_mb: int, worker_processes: int = PYTHON_WORKER_PROCESSES) -> int:
    """The cores an instance's requests can keep busy: its own, at most one a Python worker process."""
    return min(INSTANCE_CORES[memory_mb], worker_processes)


def http_instances(
    requests: Sequence[Requests],
    memory_mb: int,
    concurrency: int = HTTP_CONCURRENCY,
    worker_processes: int = PYTHON_WORKER_PROCESSES,
) -> int:
    """The HTTP instances Flex scales to for `requests` (RULES: HTTP instances): the fewest whose requests under
    way stay within `concurrency` each, a request taking its round trips and its CPU slowed by the instance's
    load (at most by `concurrency`: no more requests than that share its cores)."""
    rate = sum(r.per_second for r in requests)
    if rate <= 0:
        return 0
    cpu = sum(r.per_second * r.cpu_ms for r in requests) / rate / 1000
    io = sum(r.per_second * r.io_ms for r in requests) / rate / 1000
    cores = usable_cores(memory_mb, worker_processes)
    n = max(1, math.ceil(rate * cpu / cores - 1e-9))
    while True:
        load = rate * cpu / (n * cores)
        slowdown = min(1 / (1 - load), concurrency) if load < 1 else concurrency
        if rate * (io + cpu * slowdown) <= n * concurrency * (1 + 1e-9):
            return n
        n += 1


# --- the bill ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    """A scale group of the app (Flex scales HTTP functions together, each other function on its own): its
    executions a second and the instances it keeps busy on average (each billed while executing), of which
    `always_ready` are always-ready instances (the busiest ones)."""

    name: str
    executions_per_second: float
    instances: float
    always_ready: int = 0
    processes: int = PYTHON_WORKER_PROCESSES  # Python worker processes an instance runs (each samples on its own)

    def gb_seconds(self, memory_mb: int) -> float:
        """GB-seconds a month its instances execute."""
        return self.instances * memory_mb / 1024 * SECONDS_PER_MONTH

    def executions(self) -> float:
        return self.executions_per_second * SECONDS_PER_MONTH


@dataclass(frozen=True)
class Cost:
    """A month's Functions bill by meter, dollars."""

    on_demand_time: float = 0.0
    on_demand_executions: float = 0.0
    baseline: float = 0.0
    always_ready_time: float = 0.0
    always_ready_executions: float = 0.0
    allocated: float = 0.0  # Elastic Premium or Dedicated instances, billed all month whatever they do

    @property
    def total(self) -> float:
        return (
            self.on_demand_time
            + self.on_demand_executions
            + self.baseline
            + self.always_ready_time
            + self.always_ready_executions
            + self.allocated
        )

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(
            self.on_demand_time + other.on_demand_time,
            self.on_demand_executions + other.on_demand_executions,
            self.baseline + other.baseline,
            self.always_ready_time + other.always_ready_time,
            self.always_ready_executions + other.always_ready_executions,
            self.allocated + other.allocated,
        )


def monthly(groups: Iterable[Group], memory_mb: int, price: FlexPrice = FLEX) -> Cost:
    """What the groups bill in a month on instances of `memory_mb`: each group's always-ready instances at the
    baseline all month and the always-ready rates for the share of its work they do, the rest on demand, less
    the on-demand free grants."""
    gb = memory_mb / 1024
    on_demand_gb_s = on_demand_executions = 0.0
    baseline = always_time = always_executions = 0.0
    for group in groups:
        ready = min(group.always_ready, group.instances)
        share = ready / group.instances if group.instances else 0.0
        baseline += group.always_ready * gb * SECONDS_PER_MONTH * price.baseline_gb_s
        always_time += group.gb_seconds(memory_mb) * share * price.always_ready_gb_s
        always_executions += group.executions() * share / 1e6 * price.always_ready_per_million
        on_demand_gb_s += group.gb_seconds(memory_mb) * (1 - share)
        on_demand_executions += group.executions() * (1 - share)
    return Cost(
        on_demand_time=max(on_demand_gb_s - price.free_gb_s, 0.0) * price.on_demand_gb_s,
        on_demand_executions=max(on_demand_executions - price.free_executions, 0.0) / 1e6 * price.on_demand_per_million,
        baseline=baseline,
        always_ready_time=always_time,
        always_ready_executions=always_executions,
    )


def with_always_ready(group: Group, memory_mb: int, price: FlexPrice = FLEX) -> Group:
    """`group` with the always-ready instances that bill least: none, or as many as it keeps busy all day (its
    load is steady: the instances it needs at the quietest hour)."""
    steady = replace(group, always_ready=int(group.instances))
    cheaper = monthly([steady], memory_mb, price).total < monthly([group], memory_mb, price).total
    return steady if cheaper else replace(group, always_ready=0)


@dataclass(frozen=True)
class Workload:
    """The Functions work at the design scale, besides the HTTP requests: the report and check partitions and
    the timers."""

    actions_partitions: int  # the actions feed's partitions: bottle_actions' physical partitions
    actions_calls_per_second: float  # database calls the actions feed makes (benchmarks/costs.py, per change)
    tally_partitions: int  # REPORTS_PARTITIONS at the design scale
    tally_busy_seconds: float  # seconds of each minute a tally partition's run takes (paced, it waits in it)
    check_runs_per_second: float  # check partition runs (CHECK_PARTITIONS a check's schedule)
    timer_runs_per_second: float  # the dispatchers' runs
    queue_concurrency: int  # host.json: batchSize + newBatchThreshold


def queue_concurrency(host: Path = HOST_JSON) -> int:
    """Messages a queue-triggered instance takes at once: host.json's batchSize + newBatchThreshold."""
    queues = json.loads(host.read_text())["extensions"]["queues"]
    return int(queues["batchSize"]) + int(queues["newBatchThreshold"])


def groups(requests: Sequence[Requests], work: Workload, memory_mb: int) -> list[Group]:
    """The app's scale groups at the design scale, each with the instances it keeps busy on average."""
    http = Group("HTTP (device events)", sum(r.per_second for r in requests), http_instances(requests, memory_mb))
    actions_run = work.actions_calls_per_second * 60 / max(work.actions_partitions, 1) / CALLS_PER_SECOND
    actions_seconds = max(actions_run, CHECK_RUN_SECONDS)  # each run a minute's calls, one after another
    busy = work.actions_partitions * actions_seconds / 60 + work.tally_partitions * work.tally_busy_seconds / 60
    reports = Group(
        "report partitions (queue)",
        (work.actions_partitions + work.tally_partitions) / 60,
        busy / work.queue_concurrency,
    )
    checks = Group(
        "check partitions (queue)",
        work.check_runs_per_second,
        work.check_runs_per_second * CHECK_RUN_SECONDS / work.queue_concurrency,
    )
    timers = Group("timers (dispatch)", work.timer_runs_per_second, work.timer_runs_per_second * CHECK_RUN_SECONDS)
    return [http, reports, checks, timers]


# --- hosting the HTTP requests: Flex Consumption, Elastic Premium, Dedicated ---------------------------------

HOSTING_READ_ON = "2026-11-28"  # the date the hosting pages below were read
PREMIUM_PLAN = "https://learn.microsoft.com/azure/azure-functions/functions-premium-plan"
FUNCTIONS_SCALE = "https://learn.microsoft.com/azure/azure-functions/functions-scale"
DEDICATED_PLAN = "https://learn.microsoft.com/azure/azure-functions/dedicated-plan"
PYTHON_SCALE = "https://learn.microsoft.com/azure/azure-functions/python-scale-performance-reference"
CONTENT_SHARE = (
    "https://learn.microsoft.com/azure/azure-functions/functions-app-settings#website_contentazurefileconnectionstring"
)
DISABLE_FUNCTION = "https://learn.microsoft.com/azure/azure-functions/disable-function"
PREMIUM_PRICE_SOURCE = (
    f"{FLEX_PRICING} (Premium plan: vCPU $0.173 an hour, memory $0.0123 a GB-hour, pay as you go; the page as the "
    "search tool stores it shows its prices as '$-', so these are its table as two public notes copy it, in "
    "English and in Spanish, alike)"
)
DEDICATED_PRICE_SOURCE = (
    "https://azure.microsoft.com/pricing/details/app-service/linux/ (Premium v3, Linux: P1v3 ~$0.155 an hour, "
    "P2v3 ~$0.310; NOT read from a Microsoft page: the stored pricing page shows no prices, and these are a "
    "public note's copy of it; other public tables give $83 to $124 a month for P1v3. The least grounded price "
    "of the bill: check it in the pricing calculator for your region before deploying)"
)
HOST_CPU_SOURCES = (
    "https://github.com/Azure/azure-functions-host/pull/8281 (2022-07-06: an HTTP function that only answers 200, "
    ".NET isolated worker, on a one-core P1V2: 401 to 416 requests a second, 2.4 ms of a core a request for the "
    "host and a worker together: the high end); https://github.com/Azure/azure-functions-host/pull/7908 (the host "
    "with an in-process function in a lab, 13,126 requests a second on about one core: 0.08 ms, the low end)"
)


@dataclass(frozen=True)
class HostCpu:
    """The Functions host's own CPU a request, milliseconds: what the bill assumes, and the range it is printed at."""

    low: float
    assumed: float
    high: float
    source: str = HOST_CPU_SOURCES


# The assumption: half the high end's host-and-worker figure is the host's (the worker there did next to nothing, but
# has its own gRPC and HTTP pipeline). Calibrate it in the first days (docs/costs.md: The host's own cost).
HOST_CPU_MS = HostCpu(low=0.08, assumed=1.2, high=2.4)
TARGET_CPU = 0.7  # the share of an allocated instance's cores the steady load may use: headroom for the peaks
LIMIT_HEADROOM = 0.8  # the share of a plan's instance limit an option may use: room to grow a fifth before it is full
MAX_WORKER_PROCESSES = 10  # FUNCTIONS_WORKER_PROCESS_COUNT's maximum (PYTHON_SCALE)
THREADS_PER_PROCESS = 16  # PYTHON_THREADPOOL_THREAD_COUNT, as deployed
FLEX_PLAN_NAME = "Flex Consumption"
PREMIUM_PLAN_NAME = "Elastic Premium"
DEDICATED_PLAN_NAME = "Dedicated (App Service Premium v3)"


@dataclass(frozen=True)
class Size:
    """An instance size of a plan that bills allocated instances: its cores and memory, what an instance costs a
    month, the most instances one plan may have, and whether this deployment can run the app on it."""

    name: str
    plan: str
    cores: int
    memory_gb: float
    monthly: float
    max_instances: int
    price_source: str
    blocked: str = ""  # why this deployment cannot use it ("": it can)


def premium_size(name: str, cores: int, memory_gb: float) -> Size:
    hourly = cores * 0.173 + memory_gb * 0.0123
    return Size(
        name,
        PREMIUM_PLAN_NAME,
        cores,
        memory_gb,
        hourly * HOURS_PER_MONTH,
        PREMIUM_LINUX_MAX_INSTANCES,
        PREMIUM_PRICE_SOURCE,
        blocked=(
            "its app needs an Azure Files content share reached with a storage key "
            "(WEBSITE_CONTENTAZUREFILECONNECTIONSTRING; Azure Files takes no managed identity), and this "
            "deployment's storage has shared keys off"
        ),
    )


# A plan's instances on Linux: 20 in most regions, up to 100 in a few (PREMIUM_PLAN: Region max scale-out); the
# bill keeps within the 20 every region with Linux Premium gives.
PREMIUM_LINUX_MAX_INSTANCES = 20
DEDICATED_MAX_INSTANCES = 30  # FUNCTIONS_SCALE: Dedicated plan 10 to 30 instances (Premium v3: 30)
SIZES: tuple[Size, ...] = (
    premium_size("EP1", 1, 3.5),
    premium_size("EP2", 2, 7.0),
    premium_size("EP3", 4, 14.0),
    *(
        Size(name, DEDICATED_PLAN_NAME, cores, 4.0 * cores, hourly * HOURS_PER_MONTH, DEDICATED_MAX_INSTANCES,
             DEDICATED_PRICE_SOURCE)
        for name, cores, hourly in (("P1v3", 2, 0.155), ("P2v3", 4, 0.310), ("P3v3", 8, 0.620))
    ),
)  # fmt: skip

RULES = (
    *RULES,
    Rule(
        "Elastic Premium",
        "no execution charge: the plan bills the cores and memory of every instance allocated, per second, at least "
        "one all the time; EP1, EP2, EP3 are 1, 2, 4 cores and 3.5, 7, 14 GB; one plan scales out to 20 to 100 "
        "instances on Linux by region",
        f"{PREMIUM_PLAN} (Billing; Available instance SKUs; Region max scale-out), read {HOSTING_READ_ON}; "
        f"{PREMIUM_PRICE_SOURCE}",
        "an EP1 all month: (1 x $0.173 + 3.5 x $0.0123) x 730 = $157.72; an EP3 (4 x $0.173 + 14 x $0.0123) x 730 = "
        "$630.87: the same per core",
    ),
    Rule(
        "Dedicated (App Service) plan",
        "the app runs on the plan's instances at its regular rate, no execution charge, scaled by hand or by "
        "autoscale rules (no event-driven scale), Always On; a Premium v3 plan has up to 30 instances",
        f"{DEDICATED_PLAN}; {FUNCTIONS_SCALE} (Scale: Dedicated plan 10 to 30), read {HOSTING_READ_ON}; "
        f"{DEDICATED_PRICE_SOURCE}",
        "a P3v3 (8 cores, 32 GB) all month: 4 x $0.155 x 730 = $452.60",
    ),
    Rule(
        "Python worker processes",
        "each instance runs FUNCTIONS_WORKER_PROCESS_COUNT Python worker processes (1 to 10), each with its thread "
        "pool: one process uses one core, so an instance of n cores runs n of them",
        f"{PYTHON_SCALE} (FUNCTIONS_WORKER_PROCESS_COUNT: maximum 10), read {HOSTING_READ_ON}",
        "a P3v3 of 8 cores: 8 processes of 16 threads, 128 requests at once",
    ),
    Rule(
        "one package, two apps",
        "the same code runs as two apps, each with the functions it does not host turned off by the app setting "
        "AzureWebJobs.<FUNCTION_NAME>.Disabled = true (a disabled HTTP function answers 404 to other keys than "
        "the master key)",
        f"{DISABLE_FUNCTION}, read {HOSTING_READ_ON}",
        "the HTTP app: AzureWebJobs.aggregate_reports.Disabled = true, ...; the background app: "
        "AzureWebJobs.post_events.Disabled = true, ...",
    ),
)


def allocated_instances(requests: Sequence[Requests], size: Size) -> int:
    """The instances of `size` the requests need, allocated all month: their CPU (worker and host) at TARGET_CPU of
    the instances' cores, and their requests under way within the worker processes' threads."""
    rate = sum(r.per_second for r in requests)
    if rate <= 0:
        return 1
    cpu = sum(r.per_second * r.cpu_ms for r in requests) / 1000  # cores busy
    io = sum(r.per_second * r.io_ms for r in requests) / 1000
    by_cpu = math.ceil(cpu / (size.cores * TARGET_CPU) - 1e-9)
    slots = min(size.cores, MAX_WORKER_PROCESSES) * THREADS_PER_PROCESS
    by_threads = math.ceil((io + cpu / TARGET_CPU) / slots - 1e-9)
    return max(1, by_cpu, by_threads)


@dataclass(frozen=True)
class Hosting:
    """Where the HTTP requests run, and what that costs a month: Flex Consumption (one app, every function), or
    `instances` of an allocated `size` (an app of its own; the background stays on Flex Consumption)."""

    plan: str
    size: Size | None  # None: Flex Consumption
    instances: float
    cost: Cost
    fits: bool
    why_not: str = ""

    @property
    def name(self) -> str:
        return FLEX_PLAN_NAME if self.size is None else f"{self.plan} {self.size.name}"

    @property
    def split(self) -> bool:
        return self.size is not None


def allocated_hosting(requests: Sequence[Requests], size: Size) -> Hosting:
    """The HTTP requests on `size`: the instances they need (and the one prewarmed instance an Elastic Premium
    plan adds as a buffer when it scales, billed too), whether they fit the plan (within LIMIT_HEADROOM of its
    instance limit) and this deployment."""
    instances = allocated_instances(requests, size)
    billed = instances + (1 if size.plan == PREMIUM_PLAN_NAME else 0)
    room = math.floor(size.max_instances * LIMIT_HEADROOM)
    reasons = [size.blocked] if size.blocked else []
    if instances > room:
        reasons.append(f"needs {instances} instances, a plan has {size.max_instances} ({room} with room to grow)")
    why_not = "; and ".join(reasons)
    return Hosting(size.plan, size, instances, Cost(allocated=billed * size.monthly), not why_not, why_not)


@dataclass(frozen=True)
class FunctionsBill:
    """The Functions part of the bill: the hosting of the HTTP requests chosen (`hosting`; every option priced in
    `options`), the background's Flex Consumption instance memory, the groups (the HTTP one on its plan) with
    their always-ready instances, and what they cost a month (with each Flex memory size's cost)."""

    memory_mb: int
    groups: list[Group]
    cost: Cost
    by_memory: dict[int, float] = field(default_factory=dict)
    requests: list[Requests] = field(default_factory=list)
    hosting: Hosting | None = None
    options: list[Hosting] = field(default_factory=list)

    @property
    def calls_per_request(self) -> float:
        rate = sum(r.per_second for r in self.requests)
        return sum(r.per_second * r.calls for r in self.requests) / rate if rate else 0.0

    @property
    def cpu_ms(self) -> float:
        rate = sum(r.per_second for r in self.requests)
        return sum(r.per_second * r.cpu_ms for r in self.requests) / rate if rate else 0.0

    @property
    def always_ready(self) -> int:
        return sum(g.always_ready for g in self.groups)

    @property
    def peak_instances(self) -> int:
        return math.ceil(sum(g.instances for g in self.groups))

    @property
    def split(self) -> bool:
        return self.hosting is not None and self.hosting.split

    @property
    def background_instances(self) -> float:
        """The Flex Consumption instances busy on average (all of them, HTTP too, when it is not split)."""
        return sum(g.instances for g in self.groups if not (self.split and g.name.startswith("HTTP")))


def flex_bill(requests: Sequence[Requests], work: Workload, price: FlexPrice = FLEX, *, http: bool = True
              ) -> tuple[int, list[Group], Cost, dict[int, float]]:  # fmt: skip
    """Every group on Flex Consumption (`http` False: all but the HTTP one) on the cheaper instance memory, the HTTP
    group on its cheaper always-ready count: (memory, groups, cost, each memory's cost)."""
    bills = {}
    for memory in MEMORY_SIZES:
        found = [with_always_ready(g, memory, price) if g.name.startswith("HTTP") else g
                 for g in groups(requests, work, memory) if http or not g.name.startswith("HTTP")]  # fmt: skip
        bills[memory] = (found, monthly(found, memory, price))
    memory = min(MEMORY_SIZES, key=lambda m: (bills[m][1].total, m))
    chosen, cost = bills[memory]
    return memory, chosen, cost, {m: c.total for m, (_, c) in bills.items()}


def functions_bill(
    requests: Sequence[Requests], work: Workload, price: FlexPrice = FLEX, sizes: Sequence[Size] = SIZES
) -> FunctionsBill:
    """The cheapest hosting of the design scale's work that fits: everything on Flex Consumption, or the HTTP
    requests on an allocated plan's instances (each size of `sizes`) and the background on Flex Consumption. An
    option fits when its instances are within LIMIT_HEADROOM of one plan's limit and this deployment can run the
    app on it; on a tie, the fewer instances (more room within the limit)."""
    memory, all_flex, flex_cost, by_memory = flex_bill(requests, work, price)
    options = [Hosting(FLEX_PLAN_NAME, None, http_group_of(all_flex).instances, flex_cost, True)]
    bg_memory, background, bg_cost, bg_by_memory = flex_bill(requests, work, price, http=False)
    for size in sizes:
        http = allocated_hosting(requests, size)
        options.append(replace(http, cost=http.cost + bg_cost))
    fitting = [o for o in options if o.fits]
    chosen = min(fitting, key=lambda o: (round(o.cost.total, 2), o.instances))
    if not chosen.split:
        return FunctionsBill(memory, all_flex, flex_cost, by_memory, list(requests), chosen, options)
    rate = sum(r.per_second for r in requests)
    processes = min(chosen.size.cores, MAX_WORKER_PROCESSES) if chosen.size else PYTHON_WORKER_PROCESSES
    http_group = Group(
        f"HTTP (device events), on {chosen.name}", rate, chosen.instances, int(chosen.instances), processes
    )
    return FunctionsBill(bg_memory, [http_group, *background], chosen.cost, bg_by_memory, list(requests), chosen,
                         options)  # fmt: skip


def http_group_of(found: Sequence[Group]) -> Group:
    return next(g for g in found if g.name.startswith("HTTP"))


# --- at the design scale -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestCpu:
    """The CPU a device request takes, milliseconds: the Python worker's for a heartbeat and for an opened or closed
    event (a calibration's), and the Functions host's (HOST_CPU_MS)."""

    heartbeat_ms: float
    action_ms: float
    host_ms: float

    @classmethod
    def calibrated(cls, host_ms: float = HOST_CPU_MS.assumed, record: Path = cpu_calibration.RECORD) -> "RequestCpu":
        found = cpu_calibration.load(record)
        return cls(found.heartbeat_cpu_ms, found.action_cpu_ms, host_ms)


def design_scale_work(
    calls: Mapping[str, float],
    actions_partitions: int,
    settings: Settings,
    *,
    cpu: RequestCpu | None = None,
) -> tuple[list[Requests], Workload]:
    """The design scale's HTTP requests and worker load (design_scale's rates): `calls` are the database commands
    a unit of work makes, measured (benchmarks/costs.py: "heartbeat", "opened", "closed", "actions feed" per
    source change), `cpu` the CPU each request takes, the worker's and the host's (None: the calibration's and
    HOST_CPU_MS's assumed)."""
    cpu = cpu or RequestCpu.calibrated()
    requests = [
        Requests("heartbeat", design_scale.HEARTBEATS_PER_SECOND, cpu.heartbeat_ms + cpu.host_ms,
                 calls.get("heartbeat", 1.0)),
        Requests("opened", design_scale.OPENED_PER_SECOND, cpu.action_ms + cpu.host_ms, calls.get("opened", 3.0)),
        Requests("closed", design_scale.CLOSED_PER_SECOND, cpu.action_ms + cpu.host_ms, calls.get("closed", 3.0)),
    ]  # fmt: skip
    spread = min(settings.reports_tally_spread_minutes or design_scale.TALLY_MINUTES, 60) / 60
    schedules = design_scale.SWEEP_MINUTES  # minutes between a check's runs
    work = Workload(
        actions_partitions=actions_partitions,
        actions_calls_per_second=calls.get("actions feed", 0.0) * design_scale.CHANGES_PER_SECOND,
        tally_partitions=design_scale.REPORTS_PARTITIONS,
        tally_busy_seconds=min(settings.reports_time_budget_seconds, 60.0) * spread,
        check_runs_per_second=sum(settings.check_partitions / (minutes * 60) for minutes in schedules.values()),
        timer_runs_per_second=1 / 60 + sum(1 / (minutes * 60) for minutes in schedules.values()),
        queue_concurrency=queue_concurrency(),
    )
    return requests, work


def http_group(functions: FunctionsBill) -> Group:
    return http_group_of(functions.groups)


FLEX_HOSTING = "FlexConsumption"  # infra/main.bicep httpHostingPlan: every function on the Flex app
DEDICATED_HOSTING = "Dedicated"  # the HTTP functions on an app of their own on a Dedicated plan


def functions_parameters(functions: FunctionsBill) -> dict[str, object]:
    """The infra/main.bicep parameters that deploy the Functions part of the bill: where the HTTP functions run
    (httpHostingPlan, and for a plan of their own its size, instances and worker processes), the Flex app's
    instance memory and always-ready HTTP instances, and a maximum instance count twice the instances it keeps
    busy on average (bursts, cold starts), within Flex Consumption's 40 to 1,000."""
    flex_busy = math.ceil(functions.background_instances)
    parameters: dict[str, object] = {"instanceMemoryMB": functions.memory_mb}
    hosting = functions.hosting
    if hosting is not None and hosting.size is not None:
        parameters |= {
            "httpHostingPlan": DEDICATED_HOSTING,
            "httpPlanSku": hosting.size.name,
            "httpInstanceCount": int(hosting.instances),
            "httpWorkerProcessCount": min(hosting.size.cores, MAX_WORKER_PROCESSES),
            "httpAlwaysReadyInstances": 0,
        }
    else:
        parameters |= {"httpHostingPlan": FLEX_HOSTING, "httpAlwaysReadyInstances": http_group(functions).always_ready}
    parameters["maximumInstanceCount"] = min(1000, max(40, math.ceil(2 * flex_busy / 10) * 10))
    return parameters


def hosting_markdown(functions: FunctionsBill) -> str:
    """Every hosting of the HTTP requests priced, the chosen one first in bold, with what it gives up."""
    lines = [
        "| HTTP requests on | instances | $/month (the background on Flex Consumption included) | fits | gives up |",
        "| --- | ---: | ---: | --- | --- |",
    ]
    gives_up = {
        FLEX_PLAN_NAME: "nothing of the platform's, but bills every execution ($0.40 a million)",
        PREMIUM_PLAN_NAME: "scale to zero (an instance at least, all month); per-function scaling (one app of "
        "HTTP functions)",
        DEDICATED_PLAN_NAME: "scale to zero and event-driven scale: its instances are set (by hand or autoscale "
        "rules), billed all month; cold starts gone",
    }
    for option in sorted(functions.options, key=lambda o: (o is not functions.hosting, o.cost.total)):
        name = option.name if option is not functions.hosting else f"**{option.name}**"
        fits = "yes" if option.fits else f"no: {option.why_not}"
        lines.append(
            f"| {name} | {option.instances:,.0f} | {option.cost.total:,.0f} | {fits} | {gives_up[option.plan]} |"
        )
    return "\n".join(lines)


def functions_markdown(functions: FunctionsBill, price: FlexPrice = FLEX) -> str:
    """The Functions part of the bill as docs/costs.md shows it: the hosting options, the scale groups, the cost."""
    lines = [
        hosting_markdown(functions),
        "",
        "| Functions scale group | executions a second | instances busy (average) | always ready | GB-s a month |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for group in functions.groups:
        allocated = functions.split and group.name.startswith("HTTP")
        gb_s = "-" if allocated else f"{group.gb_seconds(functions.memory_mb):,.0f}"
        lines.append(
            f"| {group.name} | {group.executions_per_second:,.2f} | {group.instances:,.1f} | {group.always_ready:,} | "
            f"{gb_s} |"
        )
    cost = functions.cost
    executions = cost.on_demand_executions + cost.always_ready_executions
    hosting = functions.hosting
    where = (
        f"the HTTP requests on **{hosting.instances:,.0f} {hosting.size.name} instances** ({hosting.plan}, "
        f"${cost.allocated:,.0f}), the rest on Flex Consumption instances of {functions.memory_mb:,} MB"
        if hosting is not None and hosting.size is not None
        else f"every function on Flex Consumption instances of **{functions.memory_mb:,} MB**, "
        f"**{http_group(functions).always_ready} of them always-ready HTTP instances**"
    )
    lines.append(
        f"\nFunctions: **${cost.total:,.0f} a month**, {where}: executions ${executions:,.0f}, execution time "
        f"${cost.on_demand_time + cost.always_ready_time:,.0f}, always-ready baseline ${cost.baseline:,.0f}. A "
        f"request takes {functions.cpu_ms:.2f} ms of CPU on average (the worker's, benchmarks/cpu_calibration.json, "
        f"and the host's {HOST_CPU_MS.assumed} ms, HOST_CPU_MS) and {functions.calls_per_request:.2f} database round "
        f"trips of {DB_CALL_MS:.0f} ms; an allocated instance is sized to {TARGET_CPU:.0%} of its cores. Price: "
        f"Flex ${price.on_demand_gb_s:.6f} per GB-s and ${price.on_demand_per_million:.2f} per million executions "
        f"on demand, always ready ${price.baseline_gb_s:.8f} per GB-s of baseline, ${price.always_ready_gb_s:.7f} "
        f"per GB-s busy, ${price.always_ready_per_million:.3f} per million (read {READ_ON}); Elastic Premium "
        f"$0.173 a core-hour and $0.0123 a GB-hour; Dedicated P1v3 $0.155 an hour, not from a Microsoft page "
        f"(benchmarks/deployment_bill.py SIZES: their pages, read {HOSTING_READ_ON})."
    )
    return "\n".join(lines)


# --- the rest: Storage queues, Application Insights, Key Vault, the archive ---------------------------------

STORAGE_CALCULATOR = (
    "https://github.com/microsoft/kernel-memory/blob/main/docs/azure/architecture.md (an Azure pricing calculator "
    "estimate of 2024-06-24, East US: Queue Storage, General Purpose V2, LRS, 1 GB, 1,000 x 10,000 Class 1 and "
    "1,000 x 10,000 Class 2 operations: $8.05)"
)
QUEUE_OPERATIONS = "https://learn.microsoft.com/rest/api/storageservices/queue-service-rest-api"
KEY_VAULT_PRICE = (
    "https://learn.microsoft.com/answers/questions/5608202/how-to-correctly-estimate-azure-key-vault-cost "
    "(Standard tier: ~$0.03 per 10,000 operations; a service caches a secret it fetched)"
)


@dataclass(frozen=True)
class OtherPrice:
    """The other meters in dollars (a US region, pay as you go), each from the page named in its source."""

    queue_per_10k: float = 0.004  # Class 1 and Class 2 alike: 1,000 x 0.004 + 1,000 x 0.004 + 1 GB x 0.045 = 8.05
    queue_gb_month: float = 0.045
    key_vault_per_10k: float = 0.03
    source: str = f"{STORAGE_CALCULATOR}; {KEY_VAULT_PRICE}; read {READ_ON}"


OTHER = OtherPrice()

RULES = (
    *RULES,
    Rule(
        "Storage queue transactions",
        "every queue operation is a transaction (a put, a get of up to 32 messages, a delete, a peek, an empty poll); "
        "Class 1 and Class 2 operations both $0.004 per 10,000 on General Purpose v2 LRS, capacity $0.045 per GB",
        f"{STORAGE_CALCULATOR}; {QUEUE_OPERATIONS}",
        "10 M Class 1 and 10 M Class 2 operations and 1 GB: 1,000 x $0.004 + 1,000 x $0.004 + $0.045 = $8.05",
    ),
    Rule(
        "Key Vault operations",
        "each secret read or write is an operation, $0.03 per 10,000 on the Standard tier; the app's connection "
        "string is a Key Vault reference the platform reads when an instance starts and caches",
        KEY_VAULT_PRICE,
        "a few dozen operations a month cost a few cents: 30 x $0.03 / 10,000 = $0.00009",
    ),
    *telemetry.RULES,  # Application Insights: tools/costs/telemetry.py
)

ASSUMPTIONS = (
    *ASSUMPTIONS,
    "A notification is put on its queue by the checks and got and deleted by its consumer (outside the app); a "
    "queue listener polls an empty queue every maxPollingInterval, the platform's scale controller each queue "
    "every SCALE_POLL_SECONDS.",
    "KEY_VAULT_READS_A_DAY: the connection string read when an instance starts: the always-ready instances once a "
    "day, the workers' as they scale out (an instance start each an hour).",
    *telemetry.ASSUMPTIONS,  # Application Insights: tools/costs/telemetry.py
)

SCALE_POLL_SECONDS = 10.0


def queue_polling_seconds(host: Path = HOST_JSON) -> float:
    """host.json's queue polling interval (seconds): the longest an empty queue waits to be polled again."""
    loaded = json.loads(host.read_text())
    hours, minutes, seconds = (float(part) for part in loaded["extensions"]["queues"]["maxPollingInterval"].split(":"))
    return hours * 3600 + minutes * 60 + seconds


@dataclass(frozen=True)
class Line:
    """A component of the whole bill: dollars a month in one region and in two (a second region holds the
    Cosmos DB account's replica; the rest runs in the first), what it counts, and its price's page and date."""

    component: str
    one_region: float
    two_regions: float
    counts: str
    price: str


def queue_line(functions: FunctionsBill, work: Workload, notifications_per_second: float) -> Line:
    """Storage queue transactions a month: each work message put, got (a batch of batchSize at a time) and
    deleted, each notification put, got and deleted, the listeners' empty polls and the scale controller's."""
    polling = queue_polling_seconds()
    batch = json.loads(HOST_JSON.read_text())["extensions"]["queues"]["batchSize"]
    work_messages = (work.actions_partitions + work.tally_partitions) / 60 + work.check_runs_per_second
    listeners = sum(g.instances for g in functions.groups if "(queue)" in g.name)
    per_second = (
        work_messages * (2 + 1 / batch)
        + notifications_per_second * 3
        + listeners / polling
        + 3 / SCALE_POLL_SECONDS  # three queues
    )
    monthly = per_second * SECONDS_PER_MONTH / 10_000 * OTHER.queue_per_10k
    counts = (
        f"{per_second:,.0f} transactions a second: {work_messages:,.1f} work messages and "
        f"{notifications_per_second:,.0f} notifications a second, polls"
    )
    return Line("Storage queues", monthly, monthly, counts, STORAGE_CALCULATOR)


def telemetry_rates(functions: FunctionsBill) -> telemetry.Rates:
    """The design scale's work as the telemetry model counts it: the HTTP requests by kind, the queue and timer
    runs, the Azure SDK calls (notifications sent, archive files written and merged) and the instances each
    group keeps (a group that runs at all keeps at least one process exporting its metrics)."""
    by_kind = {"(queue)": 0.0, "(dispatch)": 0.0}
    workers = 0.0
    for group in functions.groups:
        if group.name.startswith("HTTP"):
            continue
        workers += math.ceil(group.instances) if group.executions_per_second > 0 else 0
        for suffix in by_kind:
            if group.name.endswith(suffix):
                by_kind[suffix] += group.executions_per_second
    reports = next((g.executions_per_second for g in functions.groups if g.name.startswith("report")), 0.0)
    archive = archive_bill()
    return telemetry.Rates(
        requests={r.name: r.per_second for r in functions.requests},
        report_runs=reports,
        check_runs=by_kind["(queue)"] - reports,
        timer_runs=by_kind["(dispatch)"],
        sdk_calls=design_scale.notifications_a_day() / 86_400
        + (archive.event_writes_hour + 2 * archive.heartbeat_merges_hour) / 3600,
        http_instances=math.ceil(http_group(functions).instances),
        worker_instances=workers,
        http_processes=http_group(functions).processes,
    )


def telemetry_parameters(functions: FunctionsBill) -> dict[str, object]:
    """The infra/main.bicep parameters that bound the telemetry of this load (tools/costs/telemetry.py):
    traceSamplingRatio, the smallest the infra allows that keeps the traces a second ops need (`ratio_for`), and
    logDailyQuotaGb, the daily cap: its day at that ratio with CAP_HEADROOM (the ingestion alerts follow the cap)."""
    return sampling_parameters(telemetry_rates(functions))


def sampling_parameters(rates: telemetry.Rates) -> dict[str, object]:
    """traceSamplingRatio and logDailyQuotaGb for the load of `rates`."""
    ratio = telemetry.ratio_for(rates.requests_per_second)
    return {"traceSamplingRatio": ratio, "logDailyQuotaGb": telemetry.daily_cap_gb(rates, float(ratio))}


def telemetry_line(functions: FunctionsBill) -> Line:
    """Application Insights ingestion a month (tools/costs/telemetry.py): the volume measured per unit of work, at
    the fixed-percentage trace sampling deployed for this load (`telemetry_parameters`: at the design scale, the
    ratio infra/design-scale.parameters.json sets)."""
    rates = telemetry_rates(functions)
    ratio = float(telemetry.ratio_for(rates.requests_per_second))
    monthly = telemetry.dollars(telemetry.volume(rates, ratio).gb_month())
    return Line("Application Insights", monthly, monthly, telemetry.counts(rates, ratio), telemetry.INGESTION_PRICE)


def small_fleet_rates(design: telemetry.Rates, settings: Settings) -> telemetry.Rates:
    """The load infra/main.bicep's telemetry defaults are sized for: the largest fleet whose device requests are
    all kept and still no more than TRACES_A_SECOND_NEEDED a second (`ratio_for` gives it every trace, "1"), on
    the default Flex app: the design scale's requests and Azure SDK calls in proportion, the timers and the check
    and report partitions of `settings` (the defaults: REPORTS_PARTITIONS, CHECK_PARTITIONS; one physical
    partition of bottle_actions), one HTTP instance and one instance for each background group."""
    share = telemetry.TRACES_A_SECOND_NEEDED / design.requests_per_second
    schedules = design_scale.SWEEP_MINUTES
    return telemetry.Rates(
        requests={kind: rate * share for kind, rate in design.requests.items()},
        report_runs=(1 + settings.reports_partitions) / 60,
        check_runs=sum(settings.check_partitions / (minutes * 60) for minutes in schedules.values()),
        timer_runs=design.timer_runs,
        sdk_calls=design.sdk_calls * share,
        http_instances=1,
        worker_instances=3,  # the report partitions, the check partitions, the timers
    )


def default_telemetry_parameters(design: telemetry.Rates, settings: Settings) -> dict[str, object]:
    """infra/main.bicep's defaults for the telemetry: the ratio and daily cap of `small_fleet_rates`."""
    return sampling_parameters(small_fleet_rates(design, settings))


KEY_VAULT_READS_A_DAY_PER_WORKER = 24  # an instance start an hour


def key_vault_line(functions: FunctionsBill) -> Line:
    """Key Vault operations a month: the connection string read at each instance start."""
    workers = sum(g.instances for g in functions.groups if not g.name.startswith("HTTP"))
    reads = (functions.always_ready + math.ceil(workers) * KEY_VAULT_READS_A_DAY_PER_WORKER) * 30
    monthly = reads / 10_000 * OTHER.key_vault_per_10k
    return Line("Key Vault", monthly, monthly, f"~{reads:,} secret reads a month", KEY_VAULT_PRICE)


def archive_at_design_scale() -> Line:
    """The archive on Blob Storage (shared/archive/, docs/archive.md): its sweep's request units on Cosmos DB, its
    transactions at the most and its storage at the end of the first year (tools.costs.billing.archive_bill). A second
    region replicates the sweep's reads of nothing: the archive is written from the first region only."""
    archive = archive_bill()
    monthly = archive.sweep_dollars_month + archive.transactions_dollars_month + archive.storage_dollars_month_year_1
    counts = (
        f"the sweep's {archive.sweep_ru_billed:,.0f} RU/s, {archive.event_writes_hour:,.0f} event files and "
        f"{archive.heartbeat_merges_hour:,.0f} heartbeat merges an hour, {archive.events_gb_year:,.0f} GB of events "
        f"a year (kept for good: ${archive.storage_dollars_month_year_5:,.0f} a month after five years)"
    )
    return Line("Blob Storage archive", monthly, monthly, counts, ARCHIVE_PRICE)


# The archive's line: archive_at_design_scale (a test may set another).
ARCHIVE: Callable[[], Line] | None = archive_at_design_scale
ARCHIVE_NOT_LANDED = "not landed: the archive on Blob Storage is not in this branch; its line is 0 until it is"
ARCHIVE_PRICE = "Blob Storage list prices assumed in tools/costs/billing.py (archive_bill): check the pricing page"


def archive_line() -> Line:
    if ARCHIVE is not None:
        return ARCHIVE()
    return Line("Blob Storage archive", 0.0, 0.0, ARCHIVE_NOT_LANDED, "-")


# --- the whole bill -----------------------------------------------------------------------------------------


def cosmos_line(rows: list[design_scale.Row]) -> Line:
    hour, billed = design_scale.busiest_hour(rows)
    counts = (
        f"{billed:,.0f} RU/s at the account's busiest hour ({hour:02d}:00 UTC), "
        f"{sum(r.storage_gb for r in rows):,.0f} GB stored; a second region bills both again"
    )
    return Line("Cosmos DB", design_scale.monthly(rows, 1), design_scale.monthly(rows, 2), counts, PRICE.source)


FUNCTIONS_COMPONENT = "Functions"  # the line's name, whatever the hosting (the summary and the README find it by it)


def functions_line(functions: FunctionsBill) -> Line:
    hosting = functions.hosting
    if hosting is not None and hosting.size is not None:
        background = sum(g.executions() for g in functions.groups if not g.name.startswith("HTTP"))
        counts = (
            f"the HTTP requests on {hosting.instances:,.0f} {hosting.size.name} instances ({hosting.plan}); the "
            f"timers and queue workers on Flex Consumption, {background / 1e6:,.1f} million executions a month, "
            f"{math.ceil(functions.background_instances)} instances busy on average of {functions.memory_mb:,} MB"
        )
        price = f"{hosting.size.price_source}; {FLEX.source}"
    else:
        executions = sum(g.executions() for g in functions.groups)
        counts = (
            f"Flex Consumption: {executions / 1e9:,.1f} billion executions a month, {functions.peak_instances} "
            f"instances busy on average ({http_group(functions).always_ready} always ready) of "
            f"{functions.memory_mb:,} MB"
        )
        price = FLEX.source
    return Line(FUNCTIONS_COMPONENT, functions.cost.total, functions.cost.total, counts, price)


def whole_bill(
    rows: list[design_scale.Row], functions: FunctionsBill, work: Workload, notifications_per_second: float
) -> list[Line]:
    """Every component of the deployment at the design scale, a line each."""
    return [
        cosmos_line(rows),
        functions_line(functions),
        queue_line(functions, work, notifications_per_second),
        telemetry_line(functions),
        key_vault_line(functions),
        archive_line(),
    ]


def total(lines: Iterable[Line], regions: int = 1) -> float:
    return sum(line.one_region if regions == 1 else line.two_regions for line in lines)


def bill_markdown(lines: list[Line], reservation: design_scale.Reserved) -> str:
    """The whole deployment's bill as docs/costs.md shows it: a line a component, its price's page."""
    table = [
        f"| component | $/month, 1 region | $/month, 2 regions | what it counts | price: its page (read {READ_ON}) |",
        "| --- | ---: | ---: | --- | --- |",
    ]
    for line in lines:
        table.append(
            f"| {line.component} | {line.one_region:,.0f} | {line.two_regions:,.0f} | {line.counts} | {line.price} |"
        )
    table.append(f"| **whole deployment** | **{total(lines, 1):,.0f}** | **{total(lines, 2):,.0f}** | | |")
    table.append(
        f"\nReserved capacity (a purchase, not in these figures): Cosmos DB bills at least "
        f"{reservation.steady:,.0f} standard RU/s every hour, ${reservation.monthly:,.0f} a month pay as you go; "
        f"reserving them saves their discount, ${reservation.saving(RESERVED_MAX_DISCOUNT):,.0f} a month at "
        f"{RESERVED_MAX_DISCOUNT:.0%}, the most the reserved-capacity page names (three years). Two regions: the "
        "Cosmos DB account replicated to a second "
        "region (its throughput and storage billed again); the Functions app and the rest run in the first."
    )
    return "\n".join(table)
