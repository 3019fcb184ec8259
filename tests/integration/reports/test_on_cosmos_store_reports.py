"""The app's own report tests, run once more on the Cosmos-faithful store (tools/cosmos_store): the dispatcher
partitioned by `GetChangeStreamTokens`, a change stream per physical partition, the heartbeat tally, the guarded
report writes, the read API and the rebuild, through the app's client as on Cosmos DB for MongoDB 6.0
(tests/cosmos_store_app.py). tests/reports/test_reports.py's autouse `change_source` (change streams, a 48-hour
heartbeat window) and `report_day` (the day they play, made from each test's clock) apply to every test here, as the
days those tests play need."""

import pytest

from tests.cosmos_store_app import cosmos_store, db, real_db  # noqa: F401 - the stores the tests below ask for
from tests.reports.test_queries import (  # noqa: F401 - collected here, on the store
    test_a_daily_read_starts_at_the_day_from_falls_in,
    test_an_hourly_read_starts_at_the_hour_from_falls_in_not_earlier,
)
from tests.reports.test_racing_writes import (  # noqa: F401
    test_a_user_hour_deleted_after_it_was_read_is_not_brought_back_by_the_guarded_write,
    test_guarded_writes_in_one_bulk_tell_which_landed,
    test_report_documents_are_read_one_user_a_query_never_an_in_of_users,
)
from tests.reports.test_reports import (  # noqa: F401
    change_source,
    report_day,
    server_clock,
    test_a_daily_report_sums_its_hours_and_keeps_the_latest_readings,
    test_a_page_aggregated_again_after_a_crash_before_its_checkpoint_gives_the_same_reports,
    test_a_reassigned_bottles_later_events_count_for_the_new_user_only,
    test_a_run_stops_at_its_time_budget_and_the_next_run_carries_on,
    test_a_throttled_page_is_not_checkpointed_and_the_next_run_completes_it,
    test_aggregating_again_changes_nothing,
    test_an_hourly_report_holds_each_bottle_and_the_users_totals,
    test_heartbeats_counted_before_they_leave_the_window_stay_counted,
    test_late_events_land_in_their_past_hour_and_its_day_is_recomputed,
    test_late_heartbeats_of_many_hours_each_count_in_their_hour,
    test_rebuilding_everyone_from_scratch_gives_the_consumers_reports,
    test_rebuilding_one_user_recomputes_their_reports_from_source,
    test_reports_come_back_oldest_first_for_every_period_overlapping_the_range,
)

pytestmark = pytest.mark.integration
