"""The app's own ingestion and provisioning tests, run once more on the Cosmos-faithful store (tools/cosmos_store):
device requests, keys, retries and races through the app's client as on Cosmos DB for MongoDB 6.0. The first change
to these paths that uses what Cosmos DB refuses (an unsupported operator, stage, index or command, a sort no index
serves, a write without its shard key, a document over 2 MB) fails here (tests/cosmos_store_app.py)."""

import pytest

from tests.bottles.test_provisioning import (  # noqa: F401 - collected here, on the store
    test_create_returns_201_with_a_key_that_is_stored_only_as_a_hash,
    test_get_shows_registry_and_live_status_but_never_the_key,
    test_out_of_order_actions_never_move_status_backwards,
    test_putting_a_bottle_again_keeps_its_last_heartbeat,
    test_reassigning_a_bottle_attributes_later_events_to_the_new_user,
    test_update_returns_200_without_a_key_and_keeps_the_old_one,
)
from tests.cosmos_store_app import cosmos_store, db, real_db  # noqa: F401 - the stores the tests below ask for
from tests.fake_time import QUIET_HOUR
from tests.ingestion.test_device_auth import (  # noqa: F401
    test_a_rotated_key_is_refused_for_heartbeats_at_once,
    test_a_wrong_key_stores_nothing_of_a_batch,
    test_rotation_issues_a_new_key_and_the_old_one_stops_working,
)
from tests.ingestion.test_device_events import (  # noqa: F401
    test_a_late_heartbeat_marks_its_hour_and_its_arrival_for_the_report_consumer,
    test_a_repeated_heartbeat_is_a_duplicate_and_counted_once,
    test_actions_are_stored_with_owner_and_medication_from_the_registry,
    test_batch_of_500_is_accepted,
    test_explicit_event_ids_deduplicate_across_requests,
    test_heartbeat_is_stored_in_the_bottles_heartbeat_document,
    test_heartbeats_older_than_the_window_are_accepted_but_not_counted,
    test_oversize_requests_are_413_and_store_nothing,
    test_retried_request_is_stored_once,
    test_the_heartbeat_document_stays_small_however_long_the_bottle_reports,
)
from tests.ingestion.test_repeats_and_races import (  # noqa: F401
    test_a_create_whose_answer_was_lost_is_still_a_create_with_its_key,
    test_an_event_id_reused_for_a_different_event_changes_nothing,
    test_an_open_and_a_close_at_one_instant_end_closed_in_either_order,
    test_concurrent_creates_of_one_bottle_issue_exactly_one_working_key,
)

# The store's rules are under test here, which no clock moves: the instant is the same tests' to vary where they
# are defined (on SecantusDB and mongomock, in the clock matrix), so these run on a clock of their own.
pytestmark = [pytest.mark.integration, pytest.mark.own_clock(QUIET_HOUR)]
