"""The bill's Application Insights line (tools/costs/telemetry.py): at the design scale it is at most $3,000 a month
from the measured volume and the deployed fixed-percentage sampler, it follows the traffic and not the instances,
and the daily cap the infra sets by default is the design scale's day with headroom, with an alert before it."""

from dataclasses import replace

import pytest

from benchmarks import deployment_bill as bill
from benchmarks import telemetry as benchmark
from benchmarks.harness import Table
from shared.settings import Settings
from tools.costs import telemetry
from tools.costs.telemetry import MEASURED, Rates

GOAL_DOLLARS = 3_000  # a month, at the design scale
# The database calls a unit of work makes, as benchmarks/costs.py measured them (docs/costs.md, How the bill is made).
CALLS = {"heartbeat": 1.0, "opened": 3.0, "closed": 3.0, "actions feed": 0.18}
ACTIONS_PARTITIONS = 82  # bottle_actions' physical partitions after a year (docs/costs.md)


@pytest.fixture(scope="module")
def design_scale() -> Rates:
    """The design scale's work and instances, as the Functions bill counts them."""
    requests, work = bill.design_scale_work(CALLS, ACTIONS_PARTITIONS, Settings())
    return bill.telemetry_rates(bill.functions_bill(requests, work))


def test_the_line_at_the_design_scale_is_at_most_3000_dollars_a_month_at_the_deployed_sampling(
    design_scale: Rates,
) -> None:
    ratio = telemetry.sampling_ratio()
    found = telemetry.volume(design_scale, ratio)

    assert ratio == 0.01  # infra/main.bicep traceSamplingRatio
    assert telemetry.dollars(found.gb_month()) <= GOAL_DOLLARS
    # Unsampled, every request would send its two items (the host's request, the app's line): ~$200 K a month.
    assert telemetry.dollars(telemetry.volume(design_scale, 1.0).gb_month()) > 50 * GOAL_DOLLARS


def test_the_volume_follows_the_traffic_not_the_instances(design_scale: Rates) -> None:
    """A fixed percentage keeps the same share of the traces however many instances serve them: four times the
    instances add only their metrics; a rate a second per process (the sampler before) grew with them."""
    more = replace(design_scale, http_instances=4 * design_scale.http_instances)
    ratio = telemetry.sampling_ratio()
    base, scaled = telemetry.volume(design_scale, ratio), telemetry.volume(more, ratio)

    sampled = "host requests and app log lines (sampled)"
    assert scaled.parts[sampled] == base.parts[sampled]
    assert scaled.gb_month() - base.gb_month() < 0.5 * base.gb_month()
    doubled = replace(design_scale, requests={kind: 2 * rate for kind, rate in design_scale.requests.items()})
    assert telemetry.volume(doubled, ratio).parts[sampled] == pytest.approx(2 * base.parts[sampled], rel=0.01)


def test_the_default_daily_cap_is_the_design_scale_s_day_with_headroom_and_the_alert_comes_before_it(
    design_scale: Rates,
) -> None:
    ratio = telemetry.sampling_ratio()
    day = telemetry.volume(design_scale, ratio).gb_day()
    cap = telemetry.daily_cap_default()

    assert cap == telemetry.daily_cap_gb(design_scale, ratio)
    assert cap >= telemetry.CAP_HEADROOM * day
    # The pace alert fires above a normal hour and well before a day at that pace would reach the cap.
    assert day / 24 < telemetry.warning_gb_per_hour(cap) < cap / 24
    # Held at the cap every day, the month stays bounded.
    assert telemetry.dollars(cap * 730 / 24) < 3 * GOAL_DOLLARS


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
