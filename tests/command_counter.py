"""Counting the database commands the app sends, with a pymongo CommandListener."""

from collections import Counter

from pymongo import monitoring

WRITES = {"insert", "update", "delete", "findAndModify"}
READS = {"find", "aggregate", "count", "getMore", "distinct"}
# Where a write command carries its statements (a findAndModify is one).
STATEMENTS = {"insert": "documents", "update": "updates", "delete": "deletes"}


class CommandCounter(monitoring.CommandListener):
    """The commands sent, as (command, collection), the statements of each write command (Cosmos DB charges
    each statement that changes a document as a write of that document), and the documents each (command,
    collection) read back."""

    def __init__(self) -> None:
        self.commands: list[tuple[str, str]] = []
        self.write_statements: list[tuple[str, str, int]] = []
        self.documents_read: Counter[tuple[str, str]] = Counter()
        self._started: dict[int, tuple[str, str]] = {}

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        collection = event.command.get(event.command_name)
        name = collection if isinstance(collection, str) else ""
        if event.command_name == "getMore":
            name = str(event.command.get("collection", ""))
        self.commands.append((event.command_name, name))
        if event.command_name in WRITES:
            field = STATEMENTS.get(event.command_name)
            count = len(event.command.get(field) or []) if field else 1
            self.write_statements.append((event.command_name, name, count))
        self._started[event.request_id] = (event.command_name, name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        command = self._started.pop(event.request_id, ("", ""))
        cursor = event.reply.get("cursor")
        if isinstance(cursor, dict):
            self.documents_read[command] += len(cursor.get("firstBatch", cursor.get("nextBatch", [])))

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self._started.pop(event.request_id, None)

    def reset(self) -> None:
        self.commands.clear()
        self.write_statements.clear()
        self.documents_read.clear()

    @property
    def writes(self) -> list[tuple[str, str]]:
        return [c for c in self.commands if c[0] in WRITES]

    @property
    def reads(self) -> list[tuple[str, str]]:
        return [c for c in self.commands if c[0] in READS]

    def by_name(self) -> Counter[str]:
        return Counter(name for name, _ in self.commands)
