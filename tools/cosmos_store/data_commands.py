"""A read or write command (find, getMore, aggregate, count, distinct, insert, update, delete, findAndModify)
served as Cosmos DB would: refused if a rule says so (sorts, writes), admitted by its partitions' throughput,
run on the backend (rewritten while an index removal hides documents), and charged to the partitions it reached;
what a write stored is placed in the partition map (a partition past its limit splits). Each step's rule is
decided, and its page quoted, in the module it calls."""

import logging
from collections.abc import Mapping
from typing import Any

import bson

from tools.cosmos_store import charges, relay, throughput, wire
from tools.cosmos_store.index_reads import hidden_by_drops, sort_problem
from tools.cosmos_store.indexes import BAD_VALUE
from tools.cosmos_store.partitions import Collection, Partition
from tools.cosmos_store.state import StoreState
from tools.cosmos_store.targeting import filter_of, query_targets
from tools.cosmos_store.write_checks import prepare_write

log = logging.getLogger(__name__)
Document = dict[str, Any]
Plan = tuple[charges.WriteEffects | None, list[Partition]]


def serve(
    state: StoreState,
    connection: relay.Connection,
    request: wire.Message,
    *,
    name: str,
    command: Document,
    database: str,
) -> tuple[float, Document]:
    """The command's charge and the reply the app gets."""
    target = str(command.get("collection") if name == "getMore" else command.get(name))
    collection = state.partitions.collection(database, target)
    planned = plan(state, collection, name, command)
    if isinstance(planned, dict):
        return 0.0, planned
    effects, reached = planned
    refusal = throughput.admit(state, reached)
    if refusal is not None:
        return 0.0, refusal
    hidden = hidden_by_drops(state, collection, name, command) if name != "getMore" else None
    reply = relay.run_on_backend(connection, hidden) if hidden is not None else relay.backend_reply(connection, request)
    if not reply.get("ok"):
        return 0.0, reply
    charge = charge_reply(state, collection, name=name, reply=reply, effects=effects, reached=reached)
    state.cursors.remember_reached(reply, reached)
    if name == "getMore" and not int(reply.get("cursor", {}).get("id", 0)):  # exhausted
        state.cursors.forget([command["getMore"]])
    return charge, reply


def plan(state: StoreState, collection: Collection, name: str, command: Document) -> Plan | Document:
    """What a write will touch (None for a read) and the partitions the command reaches, or Cosmos DB's
    refusal of it: a getMore reaches what its cursor's first batch reached, a query what its filter pins."""
    if name == "getMore":
        return None, state.cursors.reached(int(command["getMore"])) or list(collection.partitions)
    database, target = collection.name.split(".", 1)
    problem = sort_problem(state.indexes, database, target, name, command)
    if problem is not None:
        return wire.error_document(BAD_VALUE, problem)
    if name in charges.WRITES:
        return prepare_write(state, collection, name, command)
    return None, query_targets(collection, filter_of(name, command))


def charge_reply(
    state: StoreState,
    collection: Collection,
    *,
    name: str,
    reply: Document,
    effects: charges.WriteEffects | None,
    reached: list[Partition],
) -> float:
    """Price a served command by the cost model (a write by what it did to each document, read after it
    ran) and spend it on the partitions it reached."""
    target = collection.name.split(".", 1)[1]
    writes = None
    if effects is not None:
        charges.look_after(state.backend(collection), effects, reply)
        writes = charges.document_writes(effects, target)
        place_written(state, collection, effects)
    value = reply.get("value")
    charge = charges.request_charge(
        name,
        target,
        returned=charges.returned_sizes(reply) if name in charges.READS else None,
        writes=writes,
        reply_document=len(bson.encode(value)) if name == "findAndModify" and isinstance(value, Mapping) else None,
        partitions_reached=len(reached),
    )
    state.spend(collection, reached, charge)
    return charge


def place_written(state: StoreState, collection: Collection, effects: charges.WriteEffects) -> None:
    """Place what a write stored (or removed) in the partition map, logging the splits it causes."""
    for index, document in enumerate(effects.inserted):
        if index not in effects.failed_inserts:
            _record(state, collection, document["_id"], document)
    for touched in effects.touched:
        if touched.matched or touched.after is not None:
            _record(state, collection, touched.document_id, touched.after)


def _record(state: StoreState, collection: Collection, document_id: Any, document: Document | None) -> None:
    for split in state.partitions.record(collection, document_id, document):
        log.info(
            "cosmos proxy: %s split partition %d into %d and %d",
            split.collection,
            split.parent.id,
            *(c.id for c in split.children),
        )
