"""What one database command costs on Cosmos DB, in request units (RU), by Microsoft's documented rules
(tools/costs/rules.py: each rule, its page and its worked example). Development only: nothing here is deployed; the
benchmarks, the tests and the Cosmos-faithful store's charges use it. The inputs come from tools/costs/meter.py: per
command, the documents a query or a change feed returned (their BSON sizes) and how many shard key values its filter
names, and per document a write changed, its stored size before and after and the index terms it deleted and
inserted. The outputs are RU per operation (`Operation`, `total_ru`) and per unit of work (`UnitCost`), which
benchmarks/costs.py measures per heartbeat, per opened and closed event, per report change and per swept bottle,
and tools/costs/billing.py turns into a bill.
"""

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

KB = 1024
ALL = -1  # an Operation's reach: every physical partition

# --- the figures the rules use (tools/costs/rules.py: their pages) -----------------------------------------------

# (KB, RU) from the "Document size" table of RU_CONSUMPTION (session consistency; "illustrative" values).
_READ_TABLE = ((1, 1.00), (2, 1.04), (4, 1.14), (8, 1.33), (16, 1.67), (32, 2.19), (64, 4.76), (128, 9.95))
_WRITE_TABLE = ((1, 4.95), (2, 6.29), (4, 6.67), (8, 7.04), (16, 9.52), (32, 11.23), (64, 22.67), (128, 48.19))
TERM_RU = 0.2  # per index term added or removed (RU_CONSUMPTION, Write operations)
FANOUT_RU = 2.5  # per physical partition a query not confined to one shard key value reaches

# --- the size-based parts ------------------------------------------------------------------------------------


def _size_part(size: int, table: Sequence[tuple[int, float]]) -> float:
    kb = max(size / KB, 1.0)  # an item under 1 KB costs as 1 KB
    sizes = [s for s, _ in table]
    i = bisect.bisect_left(sizes, kb)
    if i == 0:
        return table[0][1]
    if i >= len(table):  # past the table: the last point's rate per KB
        return table[-1][1] * kb / table[-1][0]
    (k0, r0), (k1, r1) = table[i - 1], table[i]
    return r0 + (r1 - r0) * (kb - k0) / (k1 - k0)


def read_ru(size: int) -> float:
    """A point read of a document of `size` BSON bytes."""
    return _size_part(size, _READ_TABLE)


def write_ru(size: int) -> float:
    """The size-based part of writing (inserting, or deleting) a document of `size` bytes."""
    return _size_part(size, _WRITE_TABLE)


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

    def ru(self) -> float:
        if self.unchanged:
            size = self.before if self.before is not None else self.after
            return read_ru(size if size is not None else KB)
        if self.before is None and self.after is None:
            return 0.0
        if self.before is None:  # create
            assert self.after is not None
            return write_ru(self.after) + TERM_RU * self.terms_inserted
        if self.after is None:  # delete
            return write_ru(self.before) + TERM_RU * self.terms_deleted
        # update (replace): the old document deleted, the new one inserted, the modified terms both ways
        return write_ru(self.before) + write_ru(self.after) + TERM_RU * (self.terms_deleted + self.terms_inserted)


def partitions_reached(reach: int, partitions: int) -> float:
    """The physical partitions (of `partitions`) a query reaches: one, all (ALL), or, for `$in` of `reach` shard key
    values spread evenly, the expected number of distinct partitions they fall in."""
    if reach == ALL:
        return float(partitions)
    if reach <= 1 or partitions <= 1:
        return 1.0
    return partitions * (1 - (1 - 1 / partitions) ** reach)


def fanout_ru(reach: int, partitions: int) -> float:
    """What a query pays for the partitions it reaches: nothing when its filter pins one shard key value."""
    return 0.0 if reach == 1 else FANOUT_RU * partitions_reached(reach, partitions)


@dataclass
class Operation:
    """One database command as the cost model sees it."""

    command: str
    collection: str
    returned: list[int] = field(default_factory=list)  # BSON sizes of the documents it returned
    writes: list[DocumentWrite] = field(default_factory=list)
    reply_document: int | None = None  # findAndModify: the document in its reply
    reach: int = 1  # a read's shard key values: 1 (one partition), k (`$in` of k values) or ALL

    @property
    def is_read(self) -> bool:
        return self.command in {"find", "getMore", "aggregate", "count", "distinct"}

    def base_ru(self) -> float:
        """The RU that do not depend on the partition count: documents, writes, index terms."""
        if self.is_read:
            return max(sum(read_ru(size) for size in self.returned), read_ru(KB))
        total = sum(write.ru() for write in self.writes)
        if self.reply_document is not None:
            total += read_ru(self.reply_document)
        return total

    def ru(self, partitions: int = 1) -> float:
        """The operation's charge on a container of `partitions` physical partitions."""
        return self.base_ru() + (fanout_ru(self.reach, partitions) if self.is_read else 0.0)


def total_ru(operations: Iterable[Operation], partitions: int = 1) -> float:
    return sum(op.ru(partitions) for op in operations)


# --- per unit of work -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UnitCost:
    """RU per unit of work (a heartbeat, a change, a swept bottle), by collection: the part that does not depend
    on the partition count, and the queries per unit by their reach, which are priced by the partitions each
    collection has (at the design scale: design_scale.py)."""

    base: dict[str, float] = field(default_factory=dict)
    queries: dict[str, dict[int, float]] = field(default_factory=dict)  # collection -> reach -> queries per unit

    @classmethod
    def of(cls, operations: Iterable[Operation], units: float) -> "UnitCost":
        base: dict[str, float] = {}
        queries: dict[str, dict[int, float]] = {}
        for op in operations:
            base[op.collection] = base.get(op.collection, 0.0) + op.base_ru() / units
            if op.is_read and op.reach != 1:
                by_reach = queries.setdefault(op.collection, {})
                by_reach[op.reach] = by_reach.get(op.reach, 0.0) + 1 / units
        return cls(base, queries)

    @property
    def collections(self) -> set[str]:
        return set(self.base) | set(self.queries)

    def ru(self, collection: str, partitions: int = 1) -> float:
        fanout = sum(n * fanout_ru(reach, partitions) for reach, n in self.queries.get(collection, {}).items())
        return self.base.get(collection, 0.0) + fanout

    def by_collection(self, partitions: dict[str, int] | None = None) -> dict[str, float]:
        partitions = partitions or {}
        return {name: self.ru(name, partitions.get(name, 1)) for name in sorted(self.collections)}

    def total(self, partitions: dict[str, int] | None = None) -> float:
        return sum(self.by_collection(partitions).values())


def combine(parts: Iterable[tuple[UnitCost, float]], *, floor_at_zero: bool = False) -> UnitCost:
    """The weighted sum of unit costs (a weight may be negative: a marginal cost is a run less an empty run)."""
    base: dict[str, float] = {}
    queries: dict[str, dict[int, float]] = {}
    for cost, weight in parts:
        for name, ru in cost.base.items():
            base[name] = base.get(name, 0.0) + ru * weight
        for name, by_reach in cost.queries.items():
            into = queries.setdefault(name, {})
            for reach, n in by_reach.items():
                into[reach] = into.get(reach, 0.0) + n * weight
    if floor_at_zero:
        base = {name: max(ru, 0.0) for name, ru in base.items()}
        queries = {name: {r: max(n, 0.0) for r, n in by_reach.items()} for name, by_reach in queries.items()}
    return UnitCost(base, queries)
