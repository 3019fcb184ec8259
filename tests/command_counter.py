"""Counting the database commands the app sends, with a pymongo CommandListener."""

from collections import Counter

from pymongo import monitoring

WRITES = {"insert", "update", "delete", "findAndModify"}
READS = {"find", "aggregate", "count", "getMore", "distinct"}


class CommandCounter(monitoring.CommandListener):
    def __init__(self) -> None:
        self.commands: list[tuple[str, str]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        collection = event.command.get(event.command_name)
        self.commands.append((event.command_name, collection if isinstance(collection, str) else ""))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def reset(self) -> None:
        self.commands.clear()

    @property
    def writes(self) -> list[tuple[str, str]]:
        return [c for c in self.commands if c[0] in WRITES]

    @property
    def reads(self) -> list[tuple[str, str]]:
        return [c for c in self.commands if c[0] in READS]

    def by_name(self) -> Counter[str]:
        return Counter(name for name, _ in self.commands)
