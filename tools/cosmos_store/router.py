"""Where each request from the app goes: `hello` on to the backend with the proxy's address in its reply,
`getLastRequestStatistics` answered from the connection, a command Cosmos DB does not support refused
(features.py), the commands Cosmos DB answers its own way to the module that does (collections and indexes,
change streams, reads and writes), anything else forwarded as it is. A command that fails inside the proxy
is answered as a failed command (code 1), not a dropped connection."""

import logging
import time
from collections.abc import Callable
from typing import Any

from tools.cosmos_store import (
    charges,
    collection_admin,
    data_commands,
    features,
    partition_streams,
    relay,
    wire,
)
from tools.cosmos_store.indexes import BAD_VALUE
from tools.cosmos_store.metering import RequestStatistics
from tools.cosmos_store.state import StoreState

log = logging.getLogger(__name__)
INTERNAL_ERROR = 1
HELLO = {"hello", "ismaster", "isMaster"}
Document = dict[str, Any]
Outcome = tuple[float, Document] | None  # a charge and the reply to send; None: forwarded and answered already


class Router:
    """Serves one request at a time of any connection; `address` is the proxy's (what `hello` names)."""

    def __init__(self, state: StoreState, address: Callable[[], tuple[str, int]]) -> None:
        self.state = state
        self._address = address

    def handle(self, connection: relay.Connection, request: wire.Message) -> None:
        """Serve `request` and send the app its reply (or replies)."""
        if request.op_code == wire.OP_QUERY:
            query = wire.decode_op_query(request.body)
            hello = query.collection.endswith(".$cmd") and next(iter(query.query), "") in HELLO
            relay.forward(connection, request, rewrite=self._hello if hello else None)
            return
        if request.op_code != wire.OP_MSG:
            relay.forward(connection, request)
            return
        message = wire.decode_op_msg(request.body)
        if message.name in HELLO:
            relay.forward(connection, request, rewrite=self._hello)
            return
        if message.name == "getLastRequestStatistics":
            last = connection.last or RequestStatistics("", 0.0, 0.0)
            relay.answer(connection, request, last.reply())
            return
        self._serve_command(connection, request, message)

    def _hello(self, reply: Document) -> Document:
        return relay.proxied_hello(reply, self._address(), self.state.options.max_wire_version)

    def _serve_command(self, connection: relay.Connection, request: wire.Message, message: wire.OpMsg) -> None:
        """Serve a command, answer it unless it was forwarded, and note its charge for getLastRequestStatistics."""
        name = message.name
        started = time.perf_counter()
        command = message.merged()
        database = str(command.get("$db", "admin"))
        try:
            outcome = self._command(connection, request, name, command, database)
        except (OSError, ValueError):
            raise
        except Exception as error:  # a bug of the proxy's: the app sees a failed command, not a dropped connection
            log.exception("cosmos proxy: %s failed", name)
            outcome = 0.0, wire.error_document(INTERNAL_ERROR, f"cosmos proxy: {name} failed: {error!r}")
        if outcome is not None:
            charge, reply = outcome
            connection.last = RequestStatistics(name, charge, (time.perf_counter() - started) * 1000)
            relay.answer(connection, request, reply)

    def _command(
        self, connection: relay.Connection, request: wire.Message, name: str, command: Document, database: str
    ) -> Outcome:
        """A command's charge and reply, or None when it was forwarded and answered already."""
        state, target = self.state, command.get(name)
        try:
            features.check_command(name, command)
        except features.Refusal as refusal:
            return 0.0, wire.error_document(refusal.code, refusal.message, refusal.code_name)
        if name == "customAction":
            return 0.0, self._custom_action(command, database)
        if name == "currentOp":
            return 0.0, collection_admin.index_builds(state, command)
        if name == "createIndexes" and isinstance(target, str):
            return collection_admin.create_indexes(
                state, connection, request, database=database, name=target, command=command
            )
        collection_admin.note_drops(state, name, command, database)
        if name == "aggregate" and partition_streams.is_change_stream(command):
            return partition_streams.open_stream(state, connection, command, database)
        if name == "killCursors":
            state.cursors.forget(command.get("cursors", []))
        if name == "getMore" and state.cursors.is_stream(int(command.get("getMore", 0))):
            return partition_streams.stream_more(state, connection, request, command)
        if name in charges.READS or name in charges.WRITES:
            return data_commands.serve(state, connection, request, name=name, command=command, database=database)
        relay.forward(connection, request)
        return None

    def _custom_action(self, command: Document, database: str) -> Document:
        """customAction: CreateCollection or GetChangeStreamTokens (https://learn.microsoft.com/azure/cosmos-db/
        mongodb/custom-commands), on the collection it names; code 2 for any other or without a name."""
        action = command.get("customAction")
        name = command.get("collection")
        if not isinstance(name, str) or not name:
            return wire.error_document(BAD_VALUE, f"customAction {action!r} needs a 'collection' name")
        if action == "CreateCollection":
            return collection_admin.create_collection(self.state, database, name, command.get("shardKey"))
        if action == "GetChangeStreamTokens":
            return partition_streams.change_stream_tokens(
                self.state, database, name, command.get("startAtOperationTime")
            )
        return wire.error_document(BAD_VALUE, f"customAction {action!r} is not one this store knows")
