"""The bill's Application Insights line (tools/costs/telemetry.py): at the design scale it is at most $3,000 a month
from the measured volume and the fixed-percentage sampler deployed for it, it follows the traffic and not the
instances; the ratio is the smallest that keeps the traces a second ops need (every trace for a small fleet, the
infra's default; one in a thousand at the design scale, its parameters file), and the daily cap of each is its day
with headroom, with an alert before it."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks import deployment_bill as bill
from benchmarks import telemetry as benchmark
from benchmarks.harness import Table
from shared.settings import Settings
from tools.costs import telemetry
from tools.costs.telemetry import MEASURED, Rates
from tools.costs.telemetry import TRACES_A_SECOND_NEEDED as NEEDED

GOAL_DOLLARS = 3_000  # a month, at the design scale
# The database calls a unit of work makes, as benchmarks/costs.py measured them (docs/costs.md, How the bill is made).
CALLS = {"heartbeat": 1.0, "opened": 3.0, "closed": 3.0, "actions feed": 0.18}
ACTIONS_PARTITIONS = 82  # bottle_actions' physical partitions after a year (docs/costs.md)


ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def design_bill() -> bill.FunctionsBill:
    """The design scale's Functions bill: its work, hosting and instances."""
    requests, work = bill.design_scale_work(CALLS, ACTIONS_PARTITIONS, Settings())
    return bill.functions_bill(requests, work)


@pytest.fixture(scope="module")
def design_scale(design_bill: bill.FunctionsBill) -> Rates:
    """The design scale's work and instances, as the Functions bill counts them."""
    return bill.telemetry_rates(design_bill)


def test_the_line_at_the_design_scale_is_at_most_3000_dollars_a_month_at_the_sampling_deployed_for_it(
    design_bill: bill.FunctionsBill, design_scale: Rates
) -> None:
    chosen = bill.telemetry_parameters(design_bill)
    ratio = float(str(chosen["traceSamplingRatio"]))
    found = telemetry.volume(design_scale, ratio)

    assert chosen["traceSamplingRatio"] == "0.001"  # ~18 K requests a second: 18 traces a second kept
    assert bill.telemetry_line(design_bill).one_region == telemetry.dollars(found.gb_month()) <= GOAL_DOLLARS
    # Unsampled, every request would send its two items (the host's request, the app's line): ~$200 K a month.
    assert telemetry.dollars(telemetry.volume(design_scale, 1.0).gb_month()) > 50 * GOAL_DOLLARS


@pytest.mark.parametrize("per_second", [0.2, 6.0, 10.0, 15.0, 60.0, 1_000.0, 18_066.7, 200_000.0])
def test_the_ratio_is_the_smallest_allowed_that_keeps_the_traces_ops_need(per_second: float) -> None:
    """At least NEEDED traces a second (ASSUMPTIONS: the 5xx alert's 5 minutes, examples to look at), and no more
    than the next smaller allowed ratio would keep short of it; a fleet below NEEDED requests a second keeps all."""
    allowed = telemetry.allowed_ratios()
    ratio = telemetry.ratio_for(per_second)

    assert ratio in allowed
    if per_second < NEEDED:
        assert ratio == "1"
    else:
        assert float(ratio) * per_second >= NEEDED
    smaller = allowed[: allowed.index(ratio)]
    assert all(float(r) * per_second < NEEDED for r in smaller)


def test_the_allowed_ratios_are_main_bicep_s() -> None:
    assert telemetry.allowed_ratios() == ["0.001", "0.002", "0.005", "0.01", "0.02", "0.05", "0.1", "0.2", "0.5", "1"]


def test_each_worker_process_exports_its_metrics_and_each_instance_s_host_its_own(design_scale: Rates) -> None:
    """A Dedicated instance runs a Python worker process a core, each with its meter provider: the app's series and
    the distro's counters come from every process, the host's once an instance."""
    one = replace(design_scale, http_processes=1)
    eight = replace(design_scale, http_processes=8)
    base, more = telemetry.volume(one, 0.001).parts, telemetry.volume(eight, 0.001).parts
    http_minute = MEASURED["HTTP instance, a minute's metric series"].metric_bytes
    counters = telemetry.PERFORMANCE_COUNTERS[1]

    per_process = one.http_instances * 7 / telemetry.EXPORT_INTERVAL_S
    assert more["app metrics"] - base["app metrics"] == pytest.approx(per_process * http_minute)
    assert more["the distro's performance counters"] - base["the distro's performance counters"] == pytest.approx(
        per_process * counters
    )
    assert more["the host's metrics"] == base["the host's metrics"]
    assert design_scale.http_processes == 8  # 15 P3v3 instances of 8 cores


def test_the_volume_follows_the_traffic_not_the_instances(design_scale: Rates) -> None:
    """A fixed percentage keeps the same share of the traces however many instances serve them: four times the
    instances add only their metrics; a rate a second per process (the sampler before) grew with them."""
    more = replace(design_scale, http_instances=4 * design_scale.http_instances)
    ratio = float(telemetry.ratio_for(design_scale.requests_per_second))
    base, scaled = telemetry.volume(design_scale, ratio), telemetry.volume(more, ratio)

    sampled = "host requests and app log lines (sampled)"
    metrics = {"app metrics", "the distro's performance counters", "the host's metrics"}
    assert {k: v for k, v in scaled.parts.items() if k not in metrics} == {
        k: v for k, v in base.parts.items() if k not in metrics
    }
    assert all(scaled.parts[k] > base.parts[k] for k in metrics)
    doubled = replace(design_scale, requests={kind: 2 * rate for kind, rate in design_scale.requests.items()})
    assert telemetry.volume(doubled, ratio).parts[sampled] == pytest.approx(2 * base.parts[sampled], rel=0.01)


def design_scale_file() -> dict[str, object]:
    given = json.loads((ROOT / "infra" / "design-scale.parameters.json").read_text())["parameters"]
    return {name: entry["value"] for name, entry in given.items()}


def test_the_design_scale_file_sets_the_ratio_and_the_cap_the_bill_is_priced_at(
    design_bill: bill.FunctionsBill, design_scale: Rates
) -> None:
    chosen = bill.telemetry_parameters(design_bill)
    ratio, cap = float(str(chosen["traceSamplingRatio"])), int(str(chosen["logDailyQuotaGb"]))
    day = telemetry.volume(design_scale, ratio).gb_day()

    given = design_scale_file()
    assert (given["traceSamplingRatio"], given["logDailyQuotaGb"]) == (chosen["traceSamplingRatio"], cap)
    assert cap >= telemetry.CAP_HEADROOM * day
    # The pace alert fires above a normal hour and well before a day at that pace would reach the cap.
    assert day / 24 < telemetry.warning_gb_per_hour(cap) < cap / 24
    # Held at the cap every day, the month stays bounded.
    assert telemetry.dollars(cap * 730 / 24) < GOAL_DOLLARS


def test_the_infra_s_defaults_keep_every_trace_of_a_small_fleet_with_a_cap_sized_for_it(design_scale: Rates) -> None:
    """main.bicep's defaults suit a small fleet on the default Flex app: every trace kept (fewer than NEEDED a
    second come at all), the cap twice its day; past that fleet, the pace alert says when to lower the ratio."""
    small = bill.small_fleet_rates(design_scale, Settings())
    defaults = bill.default_telemetry_parameters(design_scale, Settings())
    day = telemetry.volume(small, 1.0).gb_day()
    cap = telemetry.daily_cap_default()

    assert small.requests_per_second == pytest.approx(NEEDED)
    assert defaults == {"traceSamplingRatio": "1", "logDailyQuotaGb": cap}
    assert telemetry.sampling_ratio() == 1.0
    assert cap >= telemetry.CAP_HEADROOM * day
    assert day / 24 < telemetry.warning_gb_per_hour(cap) < cap / 24
    # A fleet five times past it, keeping every trace, is on pace for the cap: the alert says to lower the ratio.
    grown = replace(small, requests={kind: 5 * rate for kind, rate in small.requests.items()})
    assert telemetry.volume(grown, 1.0).gb_day() / 24 > telemetry.warning_gb_per_hour(cap)


def test_ingestion_is_priced_as_the_cost_guide_s_examples() -> None:
    """A cost guide's examples from the pricing page's rate: 10 GB a month ~$12, 100 GB ~$220, the first 5 free."""
    assert telemetry.dollars(10) == pytest.approx(11.50)
    assert telemetry.dollars(100) == pytest.approx(218.50)
    assert telemetry.dollars(4) == 0


def test_every_rule_cites_its_page_and_every_figure_not_measured_is_an_assumption() -> None:
    for rule in telemetry.RULES:
        assert "https://" in rule.source, rule.name
        assert rule.example, rule.name
    named = " ".join(telemetry.ASSUMPTIONS)
    for figure in ("HOST_METRIC_SERIES", "AZURE_SDK_SPANS_PER_CALL"):
        assert figure in named
    assert {rule.name for rule in telemetry.RULES} <= {rule.name for rule in bill.RULES}


def test_a_bench_run_measures_the_telemetry_again_but_prices_the_line_with_the_recorded_volume(
    design_scale: Rates,
) -> None:
    """`./dev bench` runs the telemetry benchmark before the cost part and prints what it measured, but the bill
    is priced with the recorded volume (MEASURED), so that its headline is the same on every machine; what a run
    measured still prices the line when it is passed in (tests/functions/test_telemetry_volume.py holds the record
    to a fresh measurement)."""
    from benchmarks import suite

    names = [part.label for part in suite.parts(quick=True)]
    assert names.index("telemetry") < names.index("request units")
    doubled = {name: replace(unit, sampled_bytes=2 * unit.sampled_bytes) for name, unit in MEASURED.items()}
    table = Table(benchmark.TITLE, benchmark.HEADER, [benchmark.row(unit) for unit in doubled.values()])

    assert benchmark.measured([table]) == doubled
    sampled = "host requests and app log lines (sampled)"
    assert telemetry.volume(design_scale, 0.01).parts == telemetry.volume(design_scale, 0.01, MEASURED).parts
    assert telemetry.volume(design_scale, 0.01, doubled).parts[sampled] == pytest.approx(
        2 * telemetry.volume(design_scale, 0.01, MEASURED).parts[sampled]
    )
