"""Cosmos DB request units from what a run measured, by Microsoft's documented rules (benchmarks only: nothing
here is deployed). The inputs come from benchmarks/cost_meter.py: per database command, the documents a query
or a change feed returned (their BSON sizes), and per document a write changed, its stored size before and
after and the index terms it deleted and inserted. The outputs are request units (RU) per operation, which
the benchmarks turn into RU per heartbeat, per opened and closed event, per report consumer change and per
swept bottle in trouble, and the design-scale table (design_scale.py).

Each rule is written beside the code that applies it, with its source. Where the documentation gives no
figure, the model says what it assumes instead (ASSUMPTIONS), and the benchmarks print what the result would
be under the opposite assumption where it matters.
"""

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

KB = 1024

# --- sources -----------------------------------------------------------------------------------------------

RU_CONSUMPTION = "https://learn.microsoft.com/azure/cosmos-db/understand-request-unit-consumption"
REQUEST_UNITS = "https://learn.microsoft.com/azure/cosmos-db/request-units"
READS_WRITES = "https://learn.microsoft.com/azure/cosmos-db/optimize-cost-reads-writes"
MONGO_INDEXING = "https://learn.microsoft.com/azure/cosmos-db/mongodb/indexing"
MONGO_TTL = "https://learn.microsoft.com/azure/cosmos-db/mongodb/time-to-live"


@dataclass(frozen=True)
class Rule:
    name: str
    statement: str
    source: str


RULES = (
    Rule(
        "point read",
        "a point read of a 1 KB item costs 1 RU; 100 KB about 10 RU (table: 1.00 at 1 KB, 1.04 at 2, 1.14 at 4, "
        "1.33 at 8 ... for session consistency)",
        f"{REQUEST_UNITS}; {RU_CONSUMPTION} (Document size)",
    ),
    Rule(
        "write, by size",
        "writing a 1 KB item costs about 5 RU (table: 4.95 at 1 KB, 6.29 at 2, 6.67 at 4, 7.04 at 8 ...), "
        "100 KB about 50",
        f"{RU_CONSUMPTION} (Document size); {READS_WRITES}",
    ),
    Rule(
        "create",
        "the size-based write plus 0.2 RU per index term added (1 KB with 10 terms: 5.0 + 0.2 x 10 = 7 RU)",
        f"{RU_CONSUMPTION} (Write operations: Create)",
    ),
    Rule(
        "update (replace)",
        "deleting the old document and inserting the new one, plus 0.2 RU per modified index term deleted and per "
        "one inserted (1 KB, two terms: 5.0 + 5.0 + 0.2 x 2 + 0.2 x 2 = 10.8 RU)",
        f"{RU_CONSUMPTION} (Updates (replace))",
    ),
    Rule(
        "delete",
        "the size-based write plus 0.2 RU per index term deleted (1 KB, 10 terms: 7 RU)",
        f"{RU_CONSUMPTION} (Delete)",
    ),
    Rule(
        "query and change feed",
        "RU follow the documents processed and their size: five 1 KB documents through a feed cost about what "
        "five point reads do; a query depends on the documents it loads and its index lookups, and costs no less "
        "than a point read",
        f"{RU_CONSUMPTION} (Feed operations; Query Operations); {REQUEST_UNITS}",
    ),
    Rule(
        "index terms",
        "the API for MongoDB indexes `_id` and the shard key by itself, and the indexes created; a compound "
        "index is one term per document, an indexed array one term per element (multikey)",
        f"{MONGO_INDEXING}",
    ),
    Rule(
        "TTL",
        "a TTL index on `_ts` deletes documents not modified for its expireAfterSeconds; the deletes are a "
        "background operation that consumes provisioned throughput",
        f"{MONGO_TTL}; {RU_CONSUMPTION} (Background operations)",
    ),
)

ASSUMPTIONS = (
    "Below 1 KB the documentation gives no figure: the size-based part of a read or write is taken as "
    "proportional to the size (1 RU per KB read, 4.95 RU per KB written: the '5 RU per KB' rule of thumb). "
    "SMALL_ITEMS_AS_1KB is the opposite assumption (every item charged as 1 KB), printed beside it.",
    "An update through the API for MongoDB is charged as a replace of the whole document (not as a patch, "
    "which would add 0.4 RU per modified property).",
    "A findAndModify is an update plus a point read of the document it returns (its reply).",
    "A write whose filter matches nothing costs a point read of the document it looked at.",
    "A document's `_ts` is an index term when its collection has a TTL index: every write replaces it.",
)

# --- the size-based parts ------------------------------------------------------------------------------------

# (KB, RU) from the "Document size" table of RU_CONSUMPTION.
_READ_TABLE = ((1, 1.00), (2, 1.04), (4, 1.14), (8, 1.33), (16, 1.67), (32, 2.19), (64, 4.76), (128, 9.95))
_WRITE_TABLE = ((1, 4.95), (2, 6.29), (4, 6.67), (8, 7.04), (16, 9.52), (32, 11.23), (64, 22.67), (128, 48.19))
TERM_RU = 0.2  # per index term added or removed (RU_CONSUMPTION, Write operations)


@dataclass(frozen=True)
class SizeRule:
    """How the size-based part below 1 KB is charged: proportional (the model) or as 1 KB (the opposite)."""

    small_items_as_1kb: bool = False

    def _size_part(self, size: int, table: Sequence[tuple[int, float]]) -> float:
        kb = size / KB
        if kb <= 1:
            first = table[0][1]
            return first if self.small_items_as_1kb else first * kb
        sizes = [s for s, _ in table]
        i = bisect.bisect_left(sizes, kb)
        if i >= len(table):  # past the table: the last point's rate per KB
            return table[-1][1] * kb / table[-1][0]
        (k0, r0), (k1, r1) = table[i - 1], table[i]
        return r0 + (r1 - r0) * (kb - k0) / (k1 - k0)

    def read(self, size: int) -> float:
        """A point read of a document of `size` BSON bytes."""
        return self._size_part(size, _READ_TABLE)

    def write(self, size: int) -> float:
        """The size-based part of writing (inserting, or deleting) a document of `size` bytes."""
        return self._size_part(size, _WRITE_TABLE)


MODEL = SizeRule()
SMALL_ITEMS_AS_1KB = SizeRule(small_items_as_1kb=True)

# --- operations ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DocumentWrite:
    """One document a write command changed (or looked at): its BSON size before and after (None: it did not
    exist), and the index terms it deleted and inserted."""

    before: int | None
    after: int | None
    terms_deleted: int = 0
    terms_inserted: int = 0
    unchanged: bool = False  # the write matched nothing (or changed nothing): the document was only read
    indexes: tuple[str, ...] = ()  # the indexes whose terms it changed

    def ru(self, rule: SizeRule) -> float:
        if self.unchanged:
            size = self.before if self.before is not None else self.after
            return rule.read(size) if size is not None else rule.read(KB)
        if self.before is None and self.after is None:
            return 0.0
        if self.before is None:  # create
            assert self.after is not None
            return rule.write(self.after) + TERM_RU * self.terms_inserted
        if self.after is None:  # delete
            return rule.write(self.before) + TERM_RU * self.terms_deleted
        # update (replace): the old document deleted, the new one inserted, the modified terms both ways
        return rule.write(self.before) + rule.write(self.after) + TERM_RU * (self.terms_deleted + self.terms_inserted)


@dataclass
class Operation:
    """One database command as the cost model sees it."""

    command: str
    collection: str
    returned: list[int] = field(default_factory=list)  # BSON sizes of the documents it returned
    writes: list[DocumentWrite] = field(default_factory=list)
    reply_document: int | None = None  # findAndModify: the document in its reply

    @property
    def is_read(self) -> bool:
        return self.command in {"find", "getMore", "aggregate", "count", "distinct"}

    def ru(self, rule: SizeRule = MODEL) -> float:
        if self.is_read:
            # Each document processed as a point read of its size, and no query under a point read (a 1 KB one).
            return max(sum(rule.read(size) for size in self.returned), rule.read(KB))
        total = sum(write.ru(rule) for write in self.writes)
        if self.reply_document is not None:
            total += rule.read(self.reply_document)
        return total


def total_ru(operations: Iterable[Operation], rule: SizeRule = MODEL) -> float:
    return sum(op.ru(rule) for op in operations)


def by_collection(operations: Iterable[Operation], rule: SizeRule = MODEL) -> dict[str, float]:
    found: dict[str, float] = {}
    for op in operations:
        found[op.collection] = found.get(op.collection, 0.0) + op.ru(rule)
    return found
