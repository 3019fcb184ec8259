"""The rest of the bill (benchmarks/deployment_bill.py): each price and rule reproduces the worked example of the
page it is read from, and the design scale's Functions work is priced on the cheaper instance memory and the
cheaper count of always-ready instances."""

import math
from dataclasses import replace

import pytest

from benchmarks import deployment_bill as bill
from benchmarks import design_scale
from benchmarks.deployment_bill import FLEX, Group, Requests, Workload
from shared.settings import Settings
from tools.costs import telemetry
from tools.costs.billing import archive_bill

NO_GRANTS = replace(FLEX, free_gb_s=0, free_executions=0)


def test_every_rule_cites_its_page_and_a_worked_example():
    assert len({rule.name for rule in bill.RULES}) == len(bill.RULES)
    for rule in bill.RULES:
        assert "https://" in rule.source, rule.name
        assert rule.example, rule.name
    assert bill.READ_ON == "2026-11-27"
    assert bill.READ_ON in FLEX.source
    assert bill.HOSTING_READ_ON == "2026-11-28"
    for size in bill.SIZES:
        assert "https://" in size.price_source, size.name


def test_on_demand_bills_each_active_instances_memory_and_each_execution_as_the_pages_example():
    """functions-consumption-costs (Flex Consumption): 40 requests a second on 2,048 MB instances without free
    grants: CPU-bound on 10 instances $1.872 an hour of execution time and $0.0576 of executions, $1.9296;
    IO-bound on one instance $0.1872 + $0.0576 = $0.245."""
    cpu_bound = bill.monthly([Group("http", 40, 10)], 2048, NO_GRANTS)
    assert cpu_bound.on_demand_time / 730 == pytest.approx(1.872)
    assert cpu_bound.on_demand_executions / 730 == pytest.approx(0.0576)
    assert cpu_bound.total / 730 == pytest.approx(1.9296)
    io_bound = bill.monthly([Group("http", 40, 1)], 2048, NO_GRANTS)
    assert io_bound.total / 730 == pytest.approx(0.245, abs=0.001)
    # The same work within the month's free grants (100,000 GB-s, 250,000 executions) bills nothing.
    assert bill.monthly([Group("small", 0.05, 0.01)], 2048).total == 0.0


def test_the_instances_follow_the_pages_cpu_bound_and_io_bound_examples():
    """functions-consumption-costs: 40 requests a second, 10 at once (250 ms each): CPU-bound at a concurrency of
    one scales to 10 instances; IO-bound, all 10 on one instance."""
    cpu_bound = [Requests("cpu", 40, cpu_ms=250, calls=0)]
    assert bill.http_instances(cpu_bound, 2048, concurrency=1) == 10
    io_bound = [Requests("io", 40, cpu_ms=0, calls=250 / bill.DB_CALL_MS)]
    assert bill.http_instances(io_bound, 2048, concurrency=10) == 1
    # Many requests sharing a core wait on it: at 16 at once a core serves less than its CPU alone would.
    busy = [Requests("busy", 1_000, cpu_ms=1.0, calls=1)]
    assert bill.http_instances(busy, 2048) == 2  # 1 core of CPU, and its queue: 2 instances 50 % busy


def test_always_ready_bills_a_baseline_all_month_and_pays_for_an_instance_busy_enough():
    """The pricing page's table (as copied, in euros): an always-ready instance of 2 GB bills EUR 0.0000038 x
    2,592,000 s x 2 GB = EUR 19.70 a month of baseline; the dollar rates at the on-demand meter's ratio."""
    assert pytest.approx(19.70, abs=0.01) == bill.EUR_BASELINE_GB_S * 2_592_000 * 2
    assert FLEX.baseline_gb_s == pytest.approx(0.0000038 * 1.04)
    assert FLEX.always_ready_gb_s == pytest.approx(0.0000149 * 1.04)
    assert FLEX.always_ready_per_million == pytest.approx(0.370439 * 0.40 / 0.371)
    steady = bill.with_always_ready(Group("http", 100, 10), 2048)
    assert steady.always_ready == 10  # busy all month: the baseline and the lower rate beat on demand
    cost = bill.monthly([steady], 2048)
    gb_s = 10 * 2 * bill.SECONDS_PER_MONTH
    assert cost.baseline == pytest.approx(gb_s * FLEX.baseline_gb_s)
    assert cost.always_ready_time == pytest.approx(gb_s * FLEX.always_ready_gb_s)
    assert cost.on_demand_time == 0.0
    # Busy a tenth of the time, an always-ready instance would bill its baseline for nothing.
    assert bill.with_always_ready(Group("timers", 0.04, 0.1), 2048).always_ready == 0
    break_even = FLEX.baseline_gb_s / (FLEX.on_demand_gb_s - FLEX.always_ready_gb_s)
    assert 0.3 < break_even < 0.45


def test_the_instance_memory_is_the_cheaper_and_one_python_worker_uses_one_core():
    """flex-consumption-plan: 2,048 MB is one core, 4,096 MB two, at the same price per GB-s; one Python worker
    process keeps one busy, so 4,096 MB costs twice as much for the same requests; with two it is a tie, and the
    smaller is kept."""
    assert bill.usable_cores(2048) == bill.usable_cores(4096) == 1
    assert bill.usable_cores(4096, worker_processes=2) == 2
    requests = [Requests("heartbeat", 10_000, cpu_ms=3.0, calls=1)]
    work = Workload(0, 0.0, 0, 0.0, 0.0, 0.0, 6)
    found = bill.functions_bill(requests, work, sizes=())  # Flex Consumption alone
    assert found.memory_mb == 2048
    assert found.by_memory[4096] > found.by_memory[2048]
    http = found.groups[0]
    assert http.instances == bill.http_instances(requests, 2048)
    assert http.always_ready == http.instances  # a steady load: every HTTP instance always ready


def test_the_design_scales_work_is_its_rates_the_measured_calls_and_the_settings():
    calls = {"heartbeat": 1.0, "opened": 3.0, "closed": 3.0, "actions feed": 0.2}
    cpu = bill.RequestCpu(heartbeat_ms=2.0, action_ms=4.0, host_ms=1.0)
    requests, work = bill.design_scale_work(calls, actions_partitions=82, settings=Settings(), cpu=cpu)

    assert [r.per_second for r in requests] == pytest.approx([30_000_000 / 1800, 700, 700])
    assert [r.cpu_ms for r in requests] == [3.0, 5.0, 5.0]  # the worker's and the host's
    assert work.actions_calls_per_second == pytest.approx(0.2 * design_scale.CHANGES_PER_SECOND)
    assert work.tally_partitions == design_scale.REPORTS_PARTITIONS
    # A paced tally run waits in its execution for its pages: its budget (45 s) of every minute of the hour.
    assert work.tally_busy_seconds == pytest.approx(45)
    assert work.queue_concurrency == 6  # host.json: batchSize 4 + newBatchThreshold 2
    assert work.check_runs_per_second == pytest.approx(4 * (1 / 300 + 1 / 60 + 1 / 300))
    groups = {g.name: g for g in bill.groups(requests, work, 2048)}
    reports = groups["report partitions (queue)"]
    actions_run = 0.2 * design_scale.CHANGES_PER_SECOND * 60 / 82 * bill.DB_CALL_MS / 1000
    assert reports.instances == pytest.approx((82 * actions_run / 60 + 64 * 45 / 60) / 6)


def test_queue_transactions_are_priced_as_the_calculators_example():
    """An Azure pricing calculator estimate (2024-06-24, East US, GPv2 LRS): 1,000 x 10,000 Class 1 and as many
    Class 2 queue operations and 1 GB: $8.05."""
    assert round(1_000 * bill.OTHER.queue_per_10k * 2 + 1 * bill.OTHER.queue_gb_month + 1e-9, 2) == 8.05


def test_the_queues_bill_each_message_put_got_and_deleted_and_the_polls():
    work = Workload(10, 0.0, 20, 30.0, 0.5, 0.04, 6)
    functions = bill.FunctionsBill(2048, [Group("report partitions (queue)", 0.5, 3.0)], bill.Cost())

    line = bill.queue_line(functions, work, notifications_per_second=2.0)

    messages = 30 / 60 + 0.5  # the work messages a second: the report partitions each minute and the check runs
    per_second = messages * (2 + 1 / 4) + 2.0 * 3 + 3.0 / 2 + 3 / 10  # batchSize 4, polls every 2 s, 3 queues
    assert line.one_region == pytest.approx(per_second * bill.SECONDS_PER_MONTH / 10_000 * 0.004)
    assert line.two_regions == line.one_region  # the queues stay in the first region


def test_the_telemetry_line_is_the_telemetry_model_s_volume_of_the_groups_work():
    """The line's computation is tools/costs/telemetry.py's (tests/benchmarks/test_telemetry_bill.py checks it): the
    bill hands it the requests by kind, the runs of each group and the instances each keeps."""
    requests = [Requests("heartbeat", 1_000, 3.0, 1.0), Requests("opened", 50, 3.0, 3.0)]
    groups = [
        Group("HTTP (device events)", 1_050, 9.2),
        Group("report partitions (queue)", 2.0, 3.4),
        Group("check partitions (queue)", 2.5, 0.2),
        Group("timers (dispatch)", 0.04, 0.04),
    ]
    functions = bill.FunctionsBill(2048, groups, bill.Cost(), requests=requests)

    rates = bill.telemetry_rates(functions)
    line = bill.telemetry_line(functions)

    assert rates.requests == {"heartbeat": 1_000, "opened": 50}
    assert (rates.report_runs, rates.check_runs, rates.timer_runs) == pytest.approx((2.0, 2.5, 0.04))
    assert (rates.http_instances, rates.worker_instances) == (10, 4 + 1 + 1)
    expected = telemetry.dollars(telemetry.volume(rates, float(telemetry.ratio_for(1_050))).gb_month())
    assert (line.component, line.one_region, line.two_regions) == ("Application Insights", expected, expected)


def test_key_vault_bills_the_connection_strings_reads_at_instance_starts():
    """The Q&A's figure: Standard tier ~$0.03 per 10,000 operations; a few dozen a month cost cents."""
    functions = bill.FunctionsBill(2048, [Group("HTTP", 1_000, 10, always_ready=10), Group("w", 1, 2.5)], bill.Cost())

    line = bill.key_vault_line(functions)

    reads = (10 + 3 * 24) * 30
    assert line.one_region == pytest.approx(reads / 10_000 * 0.03)


def test_the_archive_line_is_its_sweep_transactions_and_first_year_storage(monkeypatch):
    """The archive has landed: its line is what tools.costs.billing.archive_bill computes (the sweep's request units,
    the transactions at the most, the storage after a year); without one, the line is 0 and says so."""
    archive = archive_bill()
    line = bill.archive_line()
    expected = archive.sweep_dollars_month + archive.transactions_dollars_month + archive.storage_dollars_month_year_1
    assert (line.component, line.one_region, line.two_regions) == ("Blob Storage archive", expected, expected)
    assert line.one_region > 0
    monkeypatch.setattr(bill, "ARCHIVE", None)
    assert bill.archive_line().one_region == 0.0
    assert bill.archive_line().counts.startswith("not landed")


def test_the_whole_bill_is_a_line_a_component_and_their_total():
    lines = [bill.Line("a", 10.0, 20.0, "", ""), bill.Line("b", 1.0, 1.0, "", "")]
    assert bill.total(lines) == 11.0
    assert bill.total(lines, regions=2) == 21.0
    text = bill.bill_markdown(lines, design_scale.Reserved(1_000.0, 58.4))
    assert "| **whole deployment** | **11** | **21** |" in text
    assert "$37 a month at 63%" in text  # 58.4 x 0.63


DESIGN_REQUESTS = [
    Requests("heartbeat", 30_000_000 / 1800, cpu_ms=3.0 + 1.2, calls=1),
    Requests("opened", 700, cpu_ms=4.9 + 1.2, calls=3),
    Requests("closed", 700, cpu_ms=4.9 + 1.2, calls=3),
]
QUIET = Workload(4, 0.0, 4, 1.0, 0.01, 0.04, 6)  # a background that keeps no instance busy


def test_premium_and_dedicated_instances_bill_all_month_as_the_pages_examples():
    """Elastic Premium: an EP1 (1 core, 3.5 GB) $0.173 a core-hour and $0.0123 a GB-hour, $157.72 a month, an EP3
    the same per core; Dedicated P3v3 (8 cores) 4 x $0.155 an hour, $452.60 a month."""
    sizes = {s.name: s for s in bill.SIZES}
    assert sizes["EP1"].monthly == pytest.approx(157.717, abs=0.01)
    assert sizes["EP3"].monthly == pytest.approx(630.87, abs=0.01)
    assert sizes["EP3"].monthly / 4 == pytest.approx(sizes["EP1"].monthly)
    assert sizes["P3v3"].monthly == pytest.approx(452.60)
    assert (sizes["EP3"].cores, sizes["EP3"].memory_gb, sizes["P3v3"].cores) == (4, 14.0, 8)
    assert sizes["EP1"].max_instances == 20
    assert sizes["P3v3"].max_instances == 30


def test_allocated_instances_carry_the_requests_cpu_at_seventy_percent_of_their_cores():
    """18,067 requests a second at ~4.3 ms of CPU (worker and host) are ~78 cores busy: 112 at 70 %, 15 P3v3."""
    cores = sum(r.per_second * r.cpu_ms for r in DESIGN_REQUESTS) / 1000
    p3 = next(s for s in bill.SIZES if s.name == "P3v3")
    assert bill.allocated_instances(DESIGN_REQUESTS, p3) == math.ceil(cores / (8 * bill.TARGET_CPU))
    assert bill.allocated_instances([Requests("few", 10, cpu_ms=4.0, calls=1)], p3) == 1


def test_the_design_scale_runs_its_http_requests_on_the_cheapest_plan_that_fits_and_says_why_others_do_not():
    """Elastic Premium needs a key-based Azure Files share (and more instances than a Linux plan's 20); P1v3
    would need more than a Dedicated plan's room; Flex Consumption bills every execution: P3v3 is the cheapest that
    fits, the background stays on Flex Consumption."""
    found = bill.functions_bill(DESIGN_REQUESTS, QUIET)

    assert found.hosting is not None
    assert found.split
    assert found.hosting.name == "Dedicated (App Service Premium v3) P3v3"
    options = {o.name: o for o in found.options}
    assert not options["Elastic Premium EP3"].fits
    assert "storage key" in options["Elastic Premium EP3"].why_not
    assert "a plan has 20" in options["Elastic Premium EP3"].why_not
    assert not options["Dedicated (App Service Premium v3) P1v3"].fits
    assert "room to grow" in options["Dedicated (App Service Premium v3) P1v3"].why_not
    assert options["Flex Consumption"].cost.total > 2 * found.cost.total
    assert all(found.cost.total <= o.cost.total for o in found.options if o.fits)
    http = bill.http_group(found)
    assert http.instances == found.hosting.instances
    assert http.processes == 8  # a Python worker process a core: what each instance's telemetry is sampled by
    assert found.cost.allocated == pytest.approx(found.hosting.instances * 452.60)
    assert found.cost.on_demand_executions < 1_000  # the background's executions alone
    text = bill.functions_markdown(found)
    assert f"the HTTP requests on **{found.hosting.instances:,.0f} P3v3 instances**" in text
    assert "| no: its app needs an Azure Files content share" in text


def test_a_small_fleet_stays_on_flex_consumption_which_scales_to_zero():
    small = [Requests("heartbeat", 10_000 / 1800, cpu_ms=4.2, calls=1)]  # 10,000 bottles

    found = bill.functions_bill(small, QUIET)

    assert found.hosting is not None
    assert not found.split
    assert bill.functions_parameters(found)["httpHostingPlan"] == "FlexConsumption"


def test_the_deployment_parameters_take_the_hosting_chosen():
    found = bill.functions_bill(DESIGN_REQUESTS, QUIET)

    parameters = bill.functions_parameters(found)

    assert found.hosting is not None
    assert parameters["httpHostingPlan"] == "Dedicated"
    assert parameters["httpPlanSku"] == "P3v3"
    assert parameters["httpInstanceCount"] == found.hosting.instances
    assert parameters["httpWorkerProcessCount"] == 8
    assert parameters["httpAlwaysReadyInstances"] == 0
    assert 40 <= parameters["maximumInstanceCount"] <= 1000  # type: ignore[operator]


def test_the_hosts_cpu_is_an_assumption_with_its_sources_and_a_range_that_moves_the_bill():
    host = bill.HOST_CPU_MS
    assert host.low < host.assumed < host.high
    assert "azure-functions-host/pull/8281" in host.source
    assert "azure-functions-host/pull/7908" in host.source
    costs = []
    for host_ms in (host.low, host.high):
        requests = [replace(r, cpu_ms=r.cpu_ms - 1.2 + host_ms) for r in DESIGN_REQUESTS]
        costs.append(bill.functions_bill(requests, QUIET).cost.total)
    assert costs[0] < costs[1]
