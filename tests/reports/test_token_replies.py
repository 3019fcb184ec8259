"""What the dispatcher makes of Cosmos DB's `GetChangeStreamTokens` replies (shared/feeds/partitions.py): it asks for
the actions collection's tokens; a reply it cannot partition by fails the actions feed's dispatch loudly, saying
why; a reply that leaves a range out names the live leases over that range (and only those), whose lag counts."""

import json
import logging
from datetime import timedelta
from typing import Any

import pytest
from pymongo.errors import OperationFailure

from shared.consumers.plugged import dispatch
from shared.feeds.partitions import NoPartitionTokens
from shared.instants import utc_now
from shared.reports.feeds import ACTIONS_FEED
from shared.settings import get_settings
from shared.store import schema
from tests.cosmos_fakes import EPK_TOP, CosmosTokens, cosmos_token
from tests.reports.feeds import ReplyLeavingOut, actions_leases, checkpoint_all, dispatch_run

MINUTE = timedelta(minutes=1)
DAY = timedelta(days=1)


class TokensOfActions(CosmosTokens):
    """`GetChangeStreamTokens` names the collection whose tokens it gives ("collection": its name): the tokens of
    bottle_actions for it, and an error for anything else (no such collection)."""

    def command(self, command: Any) -> dict[str, Any]:
        if command.get("collection") != schema.BOTTLE_ACTIONS:
            raise OperationFailure(f"collection {command.get('collection')!r} not found", code=26)
        return super().command(command)


class OneRangeTwice(CosmosTokens):
    """A reply with two different tokens (two positions) for the lower half of the key space, and the upper half."""

    def tokens(self) -> list[dict[str, Any]]:
        half = EPK_TOP // 2
        return [cosmos_token(0, half, "1"), cosmos_token(half, EPK_TOP, "1"), cosmos_token(0, half, "2")]


class UnreadableToken(CosmosTokens):
    def tokens(self) -> list[dict[str, Any]]:
        return [{"_data": "bottle_actions-p0-of-1"}]


def test_the_dispatcher_asks_for_the_tokens_of_the_actions_collection(mock_db: Any) -> None:
    sent: list[str] = []
    dispatch(TokensOfActions(mock_db, 3), now=utc_now(), settings=get_settings(), send=sent.extend, on_cosmos=True)

    assert len(actions_leases(mock_db)) == 3
    assert sum(json.loads(m)["feed"] == ACTIONS_FEED.key for m in sent) == 3


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        (OneRangeTwice, "GetChangeStreamTokens named one feed range twice for bottle_actions"),
        (UnreadableToken, "bottle_actions: a change stream token without a readable feed range"),
    ],
)
def test_a_reply_the_feed_cannot_be_partitioned_by_fails_the_dispatch_saying_why(
    mock_db: Any, caplog: pytest.LogCaptureFixture, reply: type[CosmosTokens], why: str
) -> None:
    sent: list[str] = []
    with caplog.at_level(logging.ERROR), pytest.raises(NoPartitionTokens, match=why) as raised:
        dispatch(reply(mock_db, 2), now=utc_now(), settings=get_settings(), send=sent.extend, on_cosmos=True)

    [error] = [r for r in caplog.records if r.levelno == logging.ERROR and r.name == "shared.feeds.dispatcher"]
    assert error.getMessage() == f"reports: bottle_actions is not dispatched: {raised.value}"
    assert vars(error).get("feed") == ACTIONS_FEED.key  # the field an operator filters Application Insights by
    assert sent
    assert all(json.loads(m)["feed"] == "heartbeat_tally" for m in sent)  # the tally still runs
    assert mock_db[schema.LEASES].count_documents({"feed": ACTIONS_FEED.key}) == 0


def test_a_range_left_out_names_and_counts_only_the_live_lease_over_it(
    mock_db: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The whole range's first lease was retired after a split (a day behind); the other half's lease does not
    read the range left out: neither is named, nor counted in the feed's lag."""
    cosmos = ReplyLeavingOut(mock_db, partitions=1)
    now = utc_now()
    dispatch_run(cosmos, now)
    checkpoint_all(mock_db, now - DAY)
    cosmos.split(0)  # ("", "FF") -> ("", "2000"), ("2000", "FF")
    dispatch_run(cosmos, now)
    checkpoint_all(mock_db, now - MINUTE)
    dispatch_run(cosmos, now)  # the children ran: the first lease retires
    assert set(actions_leases(mock_db)) == {("", "2000"), ("2000", "FF")}
    cosmos.split(0)  # ("", "2000") -> ("", "1000"), ("1000", "2000"), and a reply without the second
    cosmos.left_out = {(EPK_TOP // 4, EPK_TOP // 2)}

    with caplog.at_level(logging.ERROR):
        run = dispatch_run(cosmos, now + 10 * MINUTE)

    assert "their leases (reports:bottle_actions:cosmos:-2000) are kept" in caplog.text
    assert run.lag_seconds[ACTIONS_FEED.key] == (11 * MINUTE).total_seconds()
