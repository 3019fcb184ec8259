"""What Cosmos DB for MongoDB (RU) 6.0 does not support, as pure functions of a command: the commands, query
operators, aggregation stages and index properties its feature page marks unsupported, and a document's size limit.
The proxy asks them before it forwards a command and refuses what they name. The rules, their codes and their
pages: docs/cosmos-store.md, "What it models" (Unsupported features, A document's size)."""

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import bson

# https://learn.microsoft.com/azure/cosmos-db/mongodb/error-codes-solutions
# "115 | CommandNotSupported | The request attempted isn't supported." "67 | CannotCreateIndex | The request to
# create an index can't be completed."
COMMAND_NOT_SUPPORTED = 115
CANNOT_CREATE_INDEX = 67
BAD_VALUE = 2
MB = 1024 * 1024
# https://learn.microsoft.com/azure/cosmos-db/mongodb/feature-support-60: "16-MB document support raises the size
# limit for your documents from 2 MB to 16 MB" (the `EnableMongo16MBDocumentSupport` capability).
# https://learn.microsoft.com/azure/cosmos-db/concepts-limits: "Maximum size of an item | 2 MB"; "Maximum size of a
# document | 16 MB (UTF-8 length of JSON representation)" ... "Large document sizes up to 16 MB require feature
# enablement in the Azure portal".
DOCUMENT_LIMIT = 2 * MB  # without the EnableMongo16MBDocumentSupport capability
LARGE_DOCUMENT_LIMIT = 16 * MB  # with it

# The server version infra/modules/cosmos.bicep deploys, 6.0: https://learn.microsoft.com/azure/cosmos-db/mongodb/
# feature-support-60, "Azure Cosmos DB for MongoDB (6.0 server version): Supported features and syntax". Marked
# "No": the commands, stages, operators and index types below; the index properties `Case Insensitive` and
# `Sparse`, and `Partial` "Supported only for unique indexes" (check_index). `lookup` is "Partial": "If you attempt
# to use the `$lookup` operator with the `let` and `pipeline` fields, an error message that indicates that *`let`
# is not supported* appears."

COMMANDS = frozenset(
    {
        "eval",
        "getPrevError",
        "parallelCollectionScan",
        "resetError",
        "cloneCollectionAsCapped",
        "collMod",
        "connectionStatus",
        "convertToCapped",
        "copydb",
        "killOp",
        "renameCollection",
        "connPoolStats",
        "dataSize",
        "dbHash",
        "features",
        "listCommands",
        "profile",  # the page's `profiler`
        "serverStatus",
        "top",
        "mapReduce",
    }
)
STAGES = frozenset(
    {
        "$bucket",
        "$bucketAuto",
        "$collStats",
        "$currentOp",
        "$graphLookup",
        "$indexStats",
        "$listLocalSessions",
        "$listSessions",
    }
)
OPERATORS = frozenset(
    {
        "$jsonSchema",
        "$text",
        "$where",
        "$bitsAllSet",
        "$bitsAnySet",
        "$bitsAllClear",
        "$bitsAnyClear",
        "$center",
        "$centerSphere",
        "$box",
        "$polygon",
    }
)
INDEX_TYPES = frozenset({"text", "2d", "hashed"})  # the page's `Text Index`, `2d Index`, `Hashed Index`


class Refusal(Exception):
    """What Cosmos DB would answer instead of running a command: a code and a message naming what it refused."""

    def __init__(self, code: int, message: str, code_name: str) -> None:
        super().__init__(message)
        self.code, self.message, self.code_name = code, message, code_name


def _not_supported(what: str) -> Refusal:
    """CommandNotSupported (115), the error codes page's code for what "isn't supported": the feature page gives no
    code for an unsupported operator or stage."""
    return Refusal(COMMAND_NOT_SUPPORTED, f"{what} is not supported", "CommandNotSupported")


def check_command(name: str, command: Mapping[str, Any]) -> None:
    """Raise the Refusal Cosmos DB answers `command` with, if it uses what the feature page marks unsupported: the
    command itself, a query operator in any of its filters, a stage of any of its pipelines, an index property."""
    if name in COMMANDS:
        raise _not_supported(f"Command {name}")
    if name == "explain" and isinstance(command.get("explain"), Mapping):
        inner = dict(command["explain"])
        check_command(next(iter(inner), ""), inner)
        return
    for pipeline in _pipelines(name, command):
        _check_pipeline(pipeline)
    for query in _filters(name, command):
        _check_filter(query)
    if name == "createIndexes":
        for index in command.get("indexes", []):
            if isinstance(index, Mapping):
                check_index(index)


def check_index(index: Mapping[str, Any]) -> None:
    """Raise CannotCreateIndex (67) for an index of a type or with a property the feature page marks unsupported:
    text, 2d and hashed indexes; sparse, case insensitive (a collation), and partial unless unique."""
    keys = dict(index.get("key", {}))
    name = index.get("name")
    kinds = sorted({str(v) for v in keys.values() if isinstance(v, str)} & INDEX_TYPES)
    problem = None
    if kinds:
        problem = f"{kinds[0]} indexes are not supported"
    elif index.get("sparse"):
        problem = "sparse indexes are not supported"
    elif "collation" in index:
        problem = "case insensitive indexes (a collation) are not supported"
    elif "partialFilterExpression" in index and not index.get("unique"):
        problem = "partial indexes are supported only for unique indexes"
    if problem is not None:
        raise Refusal(CANNOT_CREATE_INDEX, f"cannot create index {name!r} on {keys}: {problem}", "CannotCreateIndex")


def _check_pipeline(pipeline: Any) -> None:
    for stage in pipeline if isinstance(pipeline, list) else []:
        if not isinstance(stage, Mapping) or not stage:
            continue
        stage_name = str(next(iter(stage)))
        body = stage[stage_name]
        if stage_name in STAGES:
            raise _not_supported(f"Aggregation stage {stage_name}")
        if stage_name == "$lookup" and isinstance(body, Mapping) and ("let" in body or "pipeline" in body):
            raise _not_supported("$lookup with 'let' and 'pipeline': let")
        if stage_name == "$match":
            _check_filter(body)
        for inner in _inner_pipelines(stage_name, body):
            _check_pipeline(inner)


def _inner_pipelines(stage_name: str, body: Any) -> Iterator[Any]:
    if stage_name == "$facet" and isinstance(body, Mapping):
        yield from body.values()
    if stage_name in {"$lookup", "$unionWith"} and isinstance(body, Mapping):
        yield body.get("pipeline")


def _check_filter(query: Any) -> None:
    """Every key at any depth of a filter: an operator the page marks unsupported is refused wherever it is."""
    if isinstance(query, Mapping):
        for key, value in query.items():
            if key in OPERATORS:
                raise _not_supported(f"Query operator {key}")
            _check_filter(value)
    elif isinstance(query, list):
        for item in query:
            _check_filter(item)


def _filters(name: str, command: Mapping[str, Any]) -> Iterator[Any]:
    """The query filters a command carries (an aggregate's are in its `$match` stages)."""
    if name == "find":
        yield command.get("filter")
    elif name in {"count", "distinct", "findAndModify"}:
        yield command.get("query")
    elif name == "update":
        yield from (statement.get("q") for statement in command.get("updates", []) if isinstance(statement, Mapping))
    elif name == "delete":
        yield from (statement.get("q") for statement in command.get("deletes", []) if isinstance(statement, Mapping))
    elif name == "create":
        yield command.get("validator")


def _pipelines(name: str, command: Mapping[str, Any]) -> Iterator[Any]:
    if name == "aggregate":
        yield command.get("pipeline")
    elif name == "create":
        yield command.get("pipeline")  # a view's


def document_too_large(size: int, limit: int, where: str) -> Refusal:
    """The Refusal for a write that would store a document past the size limit (nothing is written): code 2 with
    the NoSQL API's message (HTTP 413, RequestEntityTooLarge:
    https://learn.microsoft.com/rest/api/cosmos-db/http-status-codes-for-cosmosdb), as for the 20 GB logical
    partition limit, since the pages give no MongoDB code for a document too large."""
    return Refusal(
        BAD_VALUE,
        "Response status code does not indicate success: RequestEntityTooLarge (413); Substatus: 0; Reason: "
        f'(Message: {{"Errors":["Request size is too large"]}}): {where} would be {size:,} bytes, over the '
        f"{limit // MB} MB a document may hold",
        "",
    )


def largest_written(name: str, command: Mapping[str, Any], before: Sequence[Mapping[str, Any]]) -> tuple[int, str]:
    """The size (its BSON length: close to the UTF-8 length of its JSON the limits page counts, and of the same
    order) of the largest document a write would store, and which: an inserted document or a replacement
    exactly; an update by operators or a pipeline as the largest document it may touch (`before`) grown by all
    the update carries (what it really adds is known only once it ran: the least forgiving reading)."""
    largest, which = 0, ""
    if name == "insert":
        for index, document in enumerate(command.get("documents", [])):
            size = len(bson.encode(document))
            if size > largest:
                largest, which = size, f"document {index} of the insert"
        return largest, which
    statements = command.get("updates", []) if name == "update" else [command] if name == "findAndModify" else []
    touched = max((len(bson.encode(dict(d))) for d in before), default=0)
    for index, statement in enumerate(statements):
        update = statement.get("u") if name == "update" else statement.get("update")
        if isinstance(update, Mapping) and update and not any(str(k).startswith("$") for k in update):
            size = len(bson.encode(dict(update)))  # a replacement: the document it stores
        elif isinstance(update, Mapping | list) and update:
            size = touched + len(bson.encode({"u": update}))
        else:
            continue
        if size > largest:
            largest, which = size, f"the document update {index} writes"
    return largest, which
