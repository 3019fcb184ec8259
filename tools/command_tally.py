"""Counting the database commands a run sends (a pymongo CommandListener): the simulator and the benchmarks."""

from pymongo import monitoring

WRITES = {"insert", "update", "delete", "findAndModify"}
HANDSHAKE = {"hello", "isMaster", "ismaster", "ping", "endSessions", "buildInfo", "saslStart", "saslContinue"}


class CommandTally(monitoring.CommandListener):
    """Counts database commands, and the writes among them (connection handshakes excluded)."""

    def __init__(self) -> None:
        self.count = 0
        self.writes = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name not in HANDSHAKE:
            self.count += 1
            self.writes += event.command_name in WRITES

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass
