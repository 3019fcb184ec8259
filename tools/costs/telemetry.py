"""The bill's Application Insights line (benchmarks/deployment_bill.py `telemetry_line`): what the Functions host
and the app send at the design scale, from the volume each unit of work was measured to send through the pinned
runtime (benchmarks/telemetry.py; the last run's figures are MEASURED, which tests/functions/test_telemetry_volume.py
holds equal to a fresh measurement) and the trace sampler the deployment sets (a fixed percentage, the same in the
host and the worker: infra/main.bicep `traceSamplingRatio`), priced by the GB ingested. The ratio is chosen by the
load (`ratio_for`): the smallest the infra allows that still keeps the traces a second ops need
(TRACES_A_SECOND_NEEDED), so a small fleet keeps every trace (main.bicep's default) and the design scale one in a
thousand (infra/design-scale.parameters.json). Also the daily ingestion cap the deployment sets for each, sized
from the same figures with headroom (`daily_cap_gb`).

How the volume is made:

- a unit kept by the sampler sends its `sampled_bytes` (the host's request item, the app's INFO line); the
  sampler keeps a fixed share of the traces, whatever the instances (`ratio`);
- a unit sends its `always_bytes` whatever the sampling (a warning or an error; none in normal operation);
- metrics are never sampled: each Python worker process exports each series it recorded in a minute once a
  minute (the exporter's delta temporality) and the distro's performance counters (an instance of a Dedicated plan
  runs a process a core), and each instance's host its own metrics (HOST_METRIC_SERIES, assumed);
- a notification's send and an archive blob call are Azure SDK calls: AZURE_SDK_SPANS_PER_CALL spans each, in the
  invocation's trace (assumed: the capture runs without the distro's Azure SDK instrumentation).

Every rule has its page (RULES) and every figure not measured is in ASSUMPTIONS."""

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tools.costs.billing import HOURS_PER_MONTH
from tools.costs.rules import Rule

READ_ON = "2026-11-28"  # the date every page below was read
SECONDS_PER_MONTH = HOURS_PER_MONTH * 3600
MAIN_BICEP = Path(__file__).resolve().parents[2] / "infra" / "main.bicep"

# --- sources -----------------------------------------------------------------------------------------------

INGESTION_PRICE = (
    "https://azure.microsoft.com/pricing/details/monitor/ (as public cost notes copy it: Application Insights and "
    "Log Analytics ingestion ~$2.30 per GB pay as you go, the first 5 GB a month free)"
)
DATA_SIZE = (
    "https://learn.microsoft.com/azure/azure-monitor/logs/cost-logs (Data size calculation: billed by the GB, "
    "10^9 bytes, of each record's columns as stored; 'the billed size is around 25 percent less than the incoming "
    f"data size ... up to 50 percent for small events'; page dated 2024-12-09, read {READ_ON})"
)
DAILY_CAP = (
    "https://learn.microsoft.com/azure/azure-monitor/logs/daily-cap (the workspace's dailyQuotaGb; 'some excess "
    "data is expected', billed; 'Since late 2024, there are issues with the daily cap being accurately applied'; "
    "alert when reached: _LogOperation | where Category =~ 'Ingestion' | where Detail contains 'OverQuota'; for "
    "workspace-based Application Insights 'the effective daily cap is the minimum of the two settings'; read "
    f"{READ_ON})"
)
HOST_SAMPLER = (
    "https://github.com/Azure/azure-functions-host/pull/11568 (merged 2026-01-20: the host reads OTEL_TRACES_SAMPLER, "
    "microsoft.rate_limited or microsoft.fixed_percentage, and OTEL_TRACES_SAMPLER_ARG, a ratio from 0.0 to 1.0 "
    "for the fixed percentage; host 4.1048.100 and later); https://github.com/Azure/azure-functions-host/issues/11745 "
    f"(one report of it not applying, on Container Apps; closed awaiting the author); read {READ_ON}"
)
HOST_SOURCE = (
    "azure-functions-host src/WebJobs.Script/Diagnostics/OpenTelemetry/OpenTelemetryConfigurationExtensions.cs "
    "(the stored version, commit 0fab06d): logs of categories Function.* are not exported when the worker has "
    "OpenTelemetry on, nor Host.Results, Host.Aggregator and Azure.*; metrics: ASP.NET Core, runtime and process "
    "instrumentation and the host's faas meter; ActivitySourceWrapper.cs: one server span per invocation of a "
    f"trigger it does not instrument itself; read {READ_ON}"
)
HOST_JSON_OTEL = (
    "https://github.com/Azure/azure-functions-host/issues/10770 ('the logging:applicationInsights section in "
    "host.json does not apply to otel mode'), https://github.com/MicrosoftDocs/azure-docs/pull/125609 (the section "
    f"removed from the OpenTelemetry how-to for that reason); read {READ_ON}"
)
DISTRO_SAMPLER = (
    "azure-monitor-opentelemetry 1.8.11 (requirements.txt) _utils/configurations.py: OTEL_TRACES_SAMPLER="
    "microsoft.fixed_percentage with OTEL_TRACES_SAMPLER_ARG a ratio gives the ApplicationInsightsSampler, which "
    "keeps a trace by a hash of its trace id (the same algorithm as the other Application Insights SDKs); no sampler "
    "set gives microsoft.rate_limited at 5 traces a second, per process"
)

RULES: tuple[Rule, ...] = (
    Rule(
        "Application Insights ingestion",
        "telemetry is billed by the GB (10^9 bytes) ingested into the Log Analytics workspace, the first 5 GB a month "
        "free; the billed size of a record is its stored columns, smaller than the JSON sent (the model bills the "
        "JSON: an upper bound); what is sampled away or filtered before it is sent is not billed",
        f"{INGESTION_PRICE}; {DATA_SIZE}",
        "a cost guide's 'medium app: 10 GB/month = ~$12', 'large app: 100 GB/month = ~$220': (10 - 5) x $2.30 = "
        "$11.50, (100 - 5) x $2.30 = $218.50",
    ),
    Rule(
        "a fixed-percentage trace sampler",
        "the host and the distro read OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG; microsoft.fixed_percentage "
        "keeps that share of the traces by a hash of the trace id, in every process alike, so the volume follows "
        "the traffic, not the instances (microsoft.rate_limited keeps a number a second per process); logs below "
        "WARNING follow their trace (shared/telemetry/observability.py), metrics are never sampled",
        f"{HOST_SAMPLER}; {DISTRO_SAMPLER}",
        "18,000 requests a second at 0.01: 180 traces a second, on 1 instance or 100; rate-limited at 5 a second: "
        "5 on 1 instance, 500 on 100",
    ),
    Rule(
        "daily cap",
        "a workspace stops ingesting billable data for the rest of its day once its daily cap is reached (some excess "
        "is still billed), and records it in the Operation table; the cap protects the budget against a surge, and "
        "an alert before it keeps it from silently blinding operators",
        DAILY_CAP,
        "a cap of 80 GB a day: at most ~80 x 30.4 = 2,433 GB a month, ~$5,585, whatever is sent",
    ),
)

ASSUMPTIONS: tuple[str, ...] = (
    "HOST_METRIC_SERIES: the host exports ~60 metric series an instance a minute (ASP.NET Core, .NET runtime and "
    "process instrumentation, its faas meter: its source lists them, none counted here); check it in the first "
    "days (customMetrics by cloud_RoleInstance).",
    "AZURE_SDK_SPANS_PER_CALL: an Azure SDK call (a notification's send, an archive blob write) is 2 spans in a kept "
    "trace (the SDK's and its HTTP call's), each the size of a request item; the capture runs without the distro's "
    "Azure SDK instrumentation.",
    "The host's request item is sized as the Python exporter converts a span with the host's name and attributes "
    "(the .NET exporter writes the same schema); the host writes no other item per invocation (its Function.* logs "
    "are not exported with the worker's OpenTelemetry on: HOST_SOURCE).",
    "The sampler applies in the host as PR 11568 says (one report, on Container Apps, says it did not): check it in "
    "the first days (requests' itemCount is 1,000 at 0.001).",
    "TRACES_A_SECOND_NEEDED: ops need at least 10 device requests' traces kept a second, 3,000 in the 5 minutes the "
    "http-5xx-rate alert reads (infra/modules/alerts.bicep: the share of 5xx counted from the kept requests by their "
    "itemCount): the share's standard error at the alert's 5 % is then under 0.4 points, so sampling alone never "
    "fires it, and every 5 minutes hold ~230 opened/closed requests to look at; counts come from the metrics, never "
    "sampled, and warnings and errors are kept whatever the sampling.",
    "Each Python worker process exports its own metric series and the distro's performance counters (its own "
    "meter provider and exporter); the host, one an instance, its own.",
)

HOST_METRIC_SERIES = 60
AZURE_SDK_SPANS_PER_CALL = 2
EXPORT_INTERVAL_S = 60.0  # OTEL_METRIC_EXPORT_INTERVAL's default (60,000 ms), unset in the deployment
INGESTION_PER_GB = 2.30
FREE_GB = 5.0  # a month, per billing account
CAP_HEADROOM = 2.0  # the daily cap: twice the day of the load it is sized for
TRACES_A_SECOND_NEEDED = 10.0  # the fewest device requests' traces a second ops need kept (ASSUMPTIONS)
CAP_WARNING_PERCENT = 80  # the alert before the cap: at a pace that would reach this share of it in a day


@dataclass(frozen=True)
class UnitVolume:
    """What one unit of work sent (benchmarks/telemetry.py): items and bytes only in a trace the sampler kept (the
    host's request item, the app's INFO lines), items and bytes sent whatever the sampling (warnings, errors), and
    metric points (each series it recorded, once an export)."""

    unit: str
    requests: int
    traces: int
    sampled_bytes: int
    always_items: int
    always_bytes: int
    metric_points: int
    metric_bytes: int


def _unit(*values: object) -> UnitVolume:
    return UnitVolume(*values)  # type: ignore[arg-type]


# The last run of benchmarks/telemetry.py (2026-11-28, SecantusDB in-process), unit by unit.
MEASURED: Mapping[str, UnitVolume] = {
    v.unit: v
    for v in (
        _unit("heartbeat request", 1, 1, 1821, 0, 0, 2, 1245),
        _unit("opened request", 1, 1, 1821, 0, 0, 2, 1245),
        _unit("closed request", 1, 1, 1821, 0, 0, 2, 1245),
        _unit("duplicate request", 1, 1, 1821, 0, 0, 2, 1248),
        _unit("refused request (401)", 1, 1, 1810, 0, 0, 1, 632),
        _unit("HTTP instance, a minute's metric series", 0, 0, 0, 0, 0, 4, 2493),
        _unit("check run sending 3 notifications", 1, 1, 2086, 0, 0, 4, 2552),
        _unit("check run sending none", 1, 1, 2084, 0, 0, 2, 1280),
        _unit("reports dispatch (timer)", 1, 1, 1826, 0, 0, 2, 1289),
        _unit("report run, 1 page", 1, 1, 2195, 0, 0, 1, 721),
        _unit("report run, 3 pages", 1, 1, 2197, 0, 0, 1, 721),
        _unit("a report page more", 0, 0, 1, 0, 0, 0, 0),
        _unit("check dispatch (timer)", 1, 1, 1793, 0, 0, 0, 0),
    )
}
PERFORMANCE_COUNTERS = (8, 4978)  # the distro's, per process and export: points, bytes (distro_counters())


@dataclass(frozen=True)
class Rates:
    """The design scale's work a second, and the instances it keeps (benchmarks/deployment_bill.py builds it
    from the Functions bill)."""

    requests: Mapping[str, float]  # HTTP requests a second by kind: heartbeat, opened, closed
    report_runs: float
    check_runs: float
    timer_runs: float
    sdk_calls: float  # Azure SDK calls a second: notifications sent, archive blob writes
    http_instances: float
    worker_instances: float
    http_processes: int = 1  # Python worker processes an HTTP instance runs (a core each on a Dedicated plan)

    @property
    def requests_per_second(self) -> float:
        return sum(self.requests.values())


@dataclass(frozen=True)
class Volume:
    """Bytes a second by source, at a sampling ratio."""

    parts: dict[str, float] = field(default_factory=dict)

    @property
    def per_second(self) -> float:
        return sum(self.parts.values())

    def gb_month(self) -> float:
        return self.per_second * SECONDS_PER_MONTH / 1e9

    def gb_day(self) -> float:
        return self.per_second * 86_400 / 1e9


def sampling_ratio(bicep: Path = MAIN_BICEP) -> float:
    """The share of traces a deployment keeps by default (a small fleet's): infra/main.bicep's traceSamplingRatio
    default."""
    found = re.search(r"param traceSamplingRatio string = '([\d.]+)'", bicep.read_text())
    assert found, f"{bicep} has no traceSamplingRatio parameter"
    return float(found.group(1))


def allowed_ratios(bicep: Path = MAIN_BICEP) -> list[str]:
    """The values infra/main.bicep allows traceSamplingRatio, as written there (strings: the app setting's)."""
    found = re.search(r"@allowed\(\[([^\]]*)\]\)\s*param traceSamplingRatio ", bicep.read_text())
    assert found, f"{bicep} has no @allowed list on traceSamplingRatio"
    return sorted(re.findall(r"'([\d.]+)'", found.group(1)), key=float)


def ratio_for(requests_per_second: float, bicep: Path = MAIN_BICEP) -> str:
    """The trace sampling ratio to deploy for a load of `requests_per_second` device requests: the smallest
    infra/main.bicep allows that keeps at least TRACES_A_SECOND_NEEDED of their traces a second, or every trace
    ("1") when even all of them are fewer. Fewer kept traces than that add nothing ops use, and each costs its
    bytes."""
    allowed = allowed_ratios(bicep)
    return next((r for r in allowed if float(r) * requests_per_second >= TRACES_A_SECOND_NEEDED), allowed[-1])


def daily_cap_default(bicep: Path = MAIN_BICEP) -> int:
    """The daily cap the deployment sets by default (GB): infra/main.bicep's logDailyQuotaGb default."""
    found = re.search(r"param logDailyQuotaGb int = (-?\d+)", bicep.read_text())
    assert found, f"{bicep} has no logDailyQuotaGb parameter"
    return int(found.group(1))


def volume(rates: Rates, ratio: float, measured: Mapping[str, UnitVolume] | None = None) -> Volume:
    """Bytes a second by source: the requests and runs kept by the sampler (`ratio`), what is sent whatever the
    sampling, the Azure SDK spans of kept traces, and the metrics of every instance. `measured`: each unit's
    volume (default: MEASURED, the recorded one, so that the bill is the same on every machine)."""
    measured = measured or MEASURED
    check = measured["check run sending 3 notifications"]
    report = measured["report run, 1 page"]
    dispatch = (measured["reports dispatch (timer)"], measured["check dispatch (timer)"])
    item = measured["heartbeat request"].sampled_bytes / 2  # a request item or a log line, on average
    http_minute = measured["HTTP instance, a minute's metric series"]
    runs = [(rate, measured[f"{kind} request"]) for kind, rate in rates.requests.items()]
    runs += [(rates.check_runs, check), (rates.report_runs, report)]
    runs += [(rates.timer_runs / 2, unit) for unit in dispatch]
    instances = rates.http_instances + rates.worker_instances
    http_processes = rates.http_instances * rates.http_processes  # each exports its own series
    points, counter_bytes = PERFORMANCE_COUNTERS
    host_point = counter_bytes / points  # a metric point of the host's, the size of the distro's
    return Volume(
        {
            "host requests and app log lines (sampled)": ratio * sum(rate * unit.sampled_bytes for rate, unit in runs),
            "Azure SDK spans (sampled)": ratio * rates.sdk_calls * AZURE_SDK_SPANS_PER_CALL * item,
            "warnings and errors (every one)": sum(rate * unit.always_bytes for rate, unit in runs),
            "app metrics": http_processes * http_minute.metric_bytes / EXPORT_INTERVAL_S
            + sum(rate * unit.metric_bytes for rate, unit in runs if not _is_http(unit)),
            "the distro's performance counters": (http_processes + rates.worker_instances)
            * counter_bytes
            / EXPORT_INTERVAL_S,
            "the host's metrics": instances * HOST_METRIC_SERIES * host_point / EXPORT_INTERVAL_S,
        }
    )


def _is_http(unit: UnitVolume) -> bool:
    return unit.unit.endswith(" request") or unit.unit.startswith("refused")


def dollars(gb_month: float) -> float:
    """A month's ingestion in dollars, after the free GB."""
    return max(gb_month - FREE_GB, 0.0) * INGESTION_PER_GB


def daily_cap_gb(rates: Rates, ratio: float) -> int:
    """The daily cap to set for the load of `rates` sampled at `ratio`: CAP_HEADROOM times its day, up to a multiple
    of 10 GB."""
    return max(10, math.ceil(CAP_HEADROOM * volume(rates, ratio).gb_day() / 10) * 10)


def warning_gb_per_hour(cap_gb: float, percent: int = CAP_WARNING_PERCENT) -> float:
    """The hourly ingestion that, kept up for a day, reaches `percent` of the cap: the alert before the cap."""
    return cap_gb * percent / 100 / 24


def counts(rates: Rates, ratio: float) -> str:
    """What the line counts, as docs/costs.md's table says it."""
    found = volume(rates, ratio)
    parts = ", ".join(f"{name} {bps * SECONDS_PER_MONTH / 1e9:,.0f}" for name, bps in found.parts.items())
    kept = ratio * rates.requests_per_second
    return (
        f"{found.gb_month():,.0f} GB a month ({found.gb_day():,.1f} a day) at {ratio * 100:g}% of the traces kept "
        f"({kept:,.0f} device requests' traces a second): {parts} (GB, measured per unit of work through the runtime: "
        "benchmarks/telemetry.py)"
    )
