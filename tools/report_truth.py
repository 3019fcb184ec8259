"""The hourly report totals counted straight from the source collections, as the README defines them
("What is counted where"), independently of the consumer: the simulator checks its reports against them,
and the report property test its replays."""

from collections import defaultdict
from datetime import datetime
from typing import Any

from shared.store import schema

COUNTED = ("opened", "closed", "doses", "pills_taken", "heartbeats")
Totals = dict[tuple[str, datetime], tuple[int, ...]]


def _hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def source_totals(db: Any) -> Totals:
    """Per (user, hour) with anything in it: opened, closed, doses, pills taken and heartbeats.

    An action counts for the user it was stored with; a heartbeat for whoever owned the bottle at its time
    (the last owner whose `since` is not after it; the first owner owns everything before)."""
    totals: dict[tuple[str, datetime], list[int]] = defaultdict(lambda: [0] * len(COUNTED))
    for action in db[schema.BOTTLE_ACTIONS].find():
        counts = totals[(action["user_id"], _hour(action["time"]))]
        taken = action.get("pills_taken", 0)
        counts[0] += action["action"] == "opened"
        counts[1] += action["action"] == "closed"
        counts[2] += taken > 0
        counts[3] += taken
    for doc in db[schema.BOTTLE_HEARTBEATS].find():
        for moment in doc["times"]:
            owner = [o for i, o in enumerate(doc["owners"]) if i == 0 or o["since"] <= moment][-1]["user_id"]
            totals[(owner, _hour(moment))][4] += 1
    return {key: tuple(values) for key, values in totals.items() if any(values)}


def reported_totals(db: Any) -> Totals:
    """The same totals as the hourly reports have them."""
    return {
        (report["user_id"], report["hour"]): tuple(report[c] for c in COUNTED)
        for report in db[schema.USER_HOURLY_REPORTS].find()
    }


def complete_from(db: Any) -> datetime | None:
    """The first hour from which every bottle's heartbeat window is whole (an older hour may have lost
    heartbeats the reports counted before they left the window); None if no bottle has any."""
    oldest = [min(doc["times"]) for doc in db[schema.BOTTLE_HEARTBEATS].find({}, {"times": 1}) if doc["times"]]
    return max(_hour(moment) for moment in oldest) if oldest else None
