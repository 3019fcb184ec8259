"""What the proxy has charged, as two readers see it: a connection's last request (`RequestStatistics`, what
`getLastRequestStatistics` answers) and the run's meter (`Metered`: request units per collection, each hour's
busiest second, operations throttled or retried). The charges themselves are priced in charges.py."""

import math
import uuid
from dataclasses import dataclass, field
from typing import Any

Document = dict[str, Any]


@dataclass
class RequestStatistics:
    command: str
    charge: float
    duration_ms: float

    def reply(self) -> Document:
        """As getLastRequestStatistics answers: "the name of the last operation executed, its request charge,
        and its duration" (https://learn.microsoft.com/azure/cosmos-db/mongodb/find-request-unit-charge)."""
        return {
            "CommandName": self.command,
            "RequestCharge": self.charge,
            "RequestDurationInMilliSeconds": round(self.duration_ms, 3),
            "ActivityId": str(uuid.uuid4()),
            "ok": 1.0,
        }


@dataclass
class Metered:
    """What the proxy has charged and refused, for a run's summary."""

    request_units: dict[str, float] = field(default_factory=dict)  # per "db.collection"
    throttled: int = 0
    retried_in_server: int = 0  # operations server-side retry delayed, then served
    timed_out: int = 0  # operations server-side retry gave up on (code 50)
    # per "db.collection", per hour of the proxy's clock (its seconds // 3600): the most RU charged in one second
    hourly_peak_ru: dict[str, dict[int, float]] = field(default_factory=dict)
    _second: dict[str, tuple[int, float]] = field(default_factory=dict, repr=False)

    def add(self, collection: str, charge: float, now: float) -> None:
        """Count a charge: the collection's total and its second, and the hour's peak second."""
        self.request_units[collection] = self.request_units.get(collection, 0.0) + charge
        second, spent = self._second.get(collection, (-1, 0.0))
        spent = spent + charge if second == math.floor(now) else charge
        self._second[collection] = (math.floor(now), spent)
        hours = self.hourly_peak_ru.setdefault(collection, {})
        hour = math.floor(now) // 3600
        hours[hour] = max(hours.get(hour, 0.0), spent)

    def peak_ru_per_second(self, collection: str) -> float:
        """The collection's highest hourly peak: what autoscale's busiest hour bills."""
        return max(self.hourly_peak_ru.get(collection, {}).values(), default=0.0)
