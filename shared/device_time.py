"""How a device's clock relates to the server's: a rule ingestion enforces and the reports rely on."""

from datetime import timedelta

# The furthest ahead of the server clock an event's device time may be (ingestion rejects later ones), so
# nothing of an hour is received before that hour's start minus this.
MAX_FUTURE_SKEW = timedelta(minutes=5)
# A heartbeat received longer than this after its device time is late: the report consumer cannot find its
# hour from its time alone (shared/heartbeat_document.py lists it).
LATE_AFTER = timedelta(minutes=5)
