"""The app's own notification check tests, run once more on the Cosmos-faithful store (tools/cosmos_store): the
left-open check's episodes, a notification resolved after the bottle was handed over and back (each check), and
provisioning through ingestion to every check's notifications and queue messages, through the app's client as on
Cosmos DB for MongoDB 6.0 (tests/cosmos_store_app.py)."""

import pytest

from tests.cosmos_store_app import cosmos_store, db, real_db  # noqa: F401 - the stores the tests below ask for
from tests.integration.notifications.test_checks_on_secantus import (  # noqa: F401 - collected here, on the store
    test_from_provisioning_through_ingestion_to_notifications_and_queue_messages,
)
from tests.notifications.test_hand_over import (  # noqa: F401
    test_on_secantus_a_notification_sent_between_a_hand_over_and_a_hand_over_back_is_resolved,
    world_on_secantus,
)
from tests.notifications.test_left_open import (  # noqa: F401
    test_a_bottle_left_open_is_notified_once_and_the_close_resolves_it,
    test_left_open_minutes_is_a_setting,
    test_only_bottles_in_trouble_are_notified,
    test_reopened_before_the_check_saw_the_close_resolves_the_old_episode_and_starts_a_new_one,
    test_the_next_opening_is_a_new_episode,
    world,
)

pytestmark = pytest.mark.integration
