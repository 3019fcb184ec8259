"""The opened/closed events into the archive: a sweep of `bottle_actions` by receive time, one settled UTC hour at
a time, cut into chunks of CHUNK_ROWS events whose files every run names alike, under a lease of its own (the
`actions_archive` feed). How it runs, why a sweep and not the change feed's pages, and what it costs:
docs/archive.md."""

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict, cast

from pymongo.collection import Collection
from pymongo.database import Database

from shared.archive.layout import ACTION_COLUMNS, action_file
from shared.archive.storage import Archive
from shared.feeds.leases import Lease
from shared.feeds.settling import hours_due
from shared.feeds.sweeps import LAST_BEGAN, LAST_PAGES
from shared.instants import HOUR, day_of, hour_of
from shared.settings import Settings
from shared.store import schema
from shared.store.pacing import Pace
from shared.store.retries import RetryPolicy, with_retries

CHUNK_ROWS = 100_000  # events of a receive hour per chunk (a file per device date): fixed, it names the files
MERGE_ATTEMPTS = 10  # guarded writes of one file refused in a row before a run gives way to the other writer
RECEIVED = "received_at"
_FIELDS = dict.fromkeys((*ACTION_COLUMNS, RECEIVED), 1)

Row = dict[str, Any]


class SweepToken(TypedDict, total=False):
    """The sweep's lease token, as it is stored: a pass under way (`Sweep.token`, `hour` set), or between passes
    what the last one left (`last_began`, `last_pages`)."""

    start: datetime
    end: datetime
    began: datetime
    hour: datetime
    chunk: int
    chunk_from: datetime | None
    written: datetime | None
    dates: list[datetime]
    pages: int
    paged_at: datetime | None
    last_pages: int | None  # LAST_PAGES
    last_began: datetime  # LAST_BEGAN


def sweep_token(token: Mapping[str, Any] | None) -> SweepToken:
    """A lease's token read as the sweep's: where the token a lease stores untyped meets its type (`Sweep.token`
    writes it)."""
    return cast(SweepToken, token or {})


@dataclass(frozen=True)
class Sweep:
    """A pass under way over the receive hours [start, end): the hour it is in, the chunk of that hour and where
    the chunk starts (`chunk_from`: the receive instant before it; None: the hour's start), how far the chunk's
    events are written already (`written`, with the device dates of its files; None: not at all), and its pages."""

    start: datetime
    end: datetime
    began: datetime
    hour: datetime
    chunk: int = 0
    chunk_from: datetime | None = None
    written: datetime | None = None
    dates: tuple[datetime, ...] = ()
    pages: int = 0
    paged_at: datetime | None = None
    last_pages: int | None = None

    def token(self) -> SweepToken:
        return {
            "start": self.start,
            "end": self.end,
            "began": self.began,
            "hour": self.hour,
            "chunk": self.chunk,
            "chunk_from": self.chunk_from,
            "written": self.written,
            "dates": list(self.dates),
            "pages": self.pages,
            "paged_at": self.paged_at,
            LAST_PAGES: self.last_pages,
        }

    @classmethod
    def resumed(cls, token: Mapping[str, Any] | None) -> "Sweep | None":
        """The pass a lease's token holds, if one is under way."""
        token = sweep_token(token)
        if token.get("hour") is None:
            return None
        return cls(
            start=_utc(token["start"]),
            end=_utc(token["end"]),
            began=_utc(token["began"]),
            hour=_utc(token["hour"]),
            chunk=int(token.get("chunk") or 0),
            chunk_from=_maybe_utc(token.get("chunk_from")),
            written=_maybe_utc(token.get("written")),
            dates=tuple(_utc(day) for day in token.get("dates") or []),
            pages=int(token.get("pages") or 0),
            paged_at=_maybe_utc(token.get("paged_at")),
            last_pages=token.get(LAST_PAGES),
        )

    @property
    def read_from(self) -> datetime | None:
        """The receive instant after which the next page starts (None: the hour's start)."""
        return self.written or self.chunk_from


def _utc(moment: datetime) -> datetime:
    """`moment` as an aware UTC datetime: stored datetimes come back naive from some stores, and they are UTC."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _maybe_utc(moment: datetime | None) -> datetime | None:
    return None if moment is None else _utc(moment)


def next_sweep(db: Database[Any], lease: Lease, *, now: datetime, policy: RetryPolicy) -> Sweep | Lease | None:
    """The pass to run now: the one under way, or a new one over the receive hours due since the last (the first:
    from the hour of the oldest event stored); None when no hour is due. A first pass that finds nothing to sweep
    returns the lease's position instead (the hours due, to save: any event received later is in a later hour)."""
    under_way = Sweep.resumed(lease.token)
    if under_way is not None:
        return under_way
    end = hours_due(now)
    start = None if lease.checkpoint_time is None else _utc(lease.checkpoint_time)
    if start is None:
        oldest = with_retries(
            lambda: list(db[schema.BOTTLE_ACTIONS].find({}, {RECEIVED: 1}).sort(RECEIVED, 1).limit(1)), policy
        )
        start = min(hour_of(_utc(oldest[0][RECEIVED])), end) if oldest else end
        if start >= end:
            return replace(lease, checkpoint_time=end, token={LAST_BEGAN: now, LAST_PAGES: 0})
    if start >= end:
        return None
    last_pages = sweep_token(lease.token).get(LAST_PAGES)
    return Sweep(
        start=start, end=end, began=now, hour=start, last_pages=None if last_pages is None else int(last_pages)
    )


def pace_of(current: Sweep, *, now: datetime, spread: timedelta) -> Pace | None:
    """The pass's pace: its pages spread over REPORTS_TALLY_SPREAD_MINUTES from its start, counting on as many as
    the last pass read (autoscale bills each hour at its peak); None (unpaced) when a later hour is due already (it
    is catching up)."""
    if hours_due(now) > current.end:
        return None
    return Pace.over(current.began, spread, current.last_pages)


@dataclass
class SweepRun:
    pages: int = 0
    events: int = 0
    files_written: int = 0
    caught_up: bool = False
    # Another writer kept changing a file of the chunk (`contended`: its name, and the receive hour and chunk it is
    # of) between this run's reads and its writes, MERGE_ATTEMPTS times: the run gave way, its last position unsaved
    # (the worker logs it, and the invocation's line says `gave_way`).
    stopped_by_another: bool = False
    contended: tuple[str, datetime, int] | None = None


@dataclass
class _Chunk:
    """The events of the chunk under way, read so far."""

    rows: list[Row] = field(default_factory=list)


def run_actions_sweep(
    db: Database[Any],
    held: Lease,
    *,
    settings: Settings,
    archive: Archive,
    policy: RetryPolicy,
    wall_clock: Callable[[], datetime],
    out_of_time: Callable[[], bool],
    save: Callable[[Lease], bool],
    pause: Callable[[float], bool] = lambda seconds: False,
) -> tuple[Lease, SweepRun]:
    """Sweep the receive hours due into the archive, page by page, saving the position after each page, until
    caught up, out of time, or the lease is lost (`save` returns False). Returns the position reached."""
    run = SweepRun()
    started = wall_clock()
    found = next_sweep(db, held, now=started, policy=policy)
    if found is None or isinstance(found, Lease):
        run.caught_up = True
        if isinstance(found, Lease):
            held = found
            save(held)
        return held, run
    current = found
    chunk = _read_back(archive, current)
    pace = pace_of(current, now=started, spread=timedelta(minutes=settings.reports_tally_spread_minutes))
    collection = db[schema.BOTTLE_ACTIONS]
    while not out_of_time():
        wait = 0.0 if pace is None else pace.wait(current.pages, current.paged_at or current.began, wall_clock())
        if wait > 0 and not pause(wait):
            break
        after = _last_read(current, chunk)
        page = _page(collection, current.hour, after, settings.archive_page_size, policy)
        current = replace(current, pages=current.pages + 1, paged_at=wall_clock())
        run.pages += 1
        if not page:  # the hour is read to its end: its last chunk is whole
            run.files_written += _write_whole(archive, current, chunk)
            if current.hour + HOUR >= current.end:
                held = replace(
                    held, checkpoint_time=current.end, token={LAST_BEGAN: current.began, LAST_PAGES: current.pages}
                )
                run.caught_up = hours_due(wall_clock()) <= current.end
                save(held)
                return held, run
            current = replace(current, hour=current.hour + HOUR, chunk=0, chunk_from=None, written=None, dates=())
            chunk = _Chunk()
        else:
            run.events += len(page)
            current, chunk, written = _take(archive, current, chunk, page)
            run.files_written += written
        held = replace(held, token=current.token())
        if not save(held):
            return held, run
    if chunk.rows:  # the run ends mid-chunk: write what it has, so the next run need not read it again
        written_now = _write_partial(archive, current, chunk, run)
        if written_now is None:
            return held, run
        held = replace(held, token=written_now.token())
        save(held)
    return held, run


def _last_read(current: Sweep, chunk: _Chunk) -> datetime | None:
    """The receive instant the next page starts after: the chunk's last event read, or where it starts."""
    return _utc(chunk.rows[-1][RECEIVED]) if chunk.rows else current.read_from


def _page(
    collection: Collection[Any], hour: datetime, after: datetime | None, size: int, policy: RetryPolicy
) -> list[Row]:
    """The next events of the receive hour after `after` (None: from its start), in receive order, at most `size`
    but ending on a whole receive instant (all of an instant's events, if they alone fill the page)."""
    received = {"$gt": after} if after is not None else {"$gte": hour}
    query = {RECEIVED: {**received, "$lt": hour + HOUR}}
    docs: list[Row] = with_retries(lambda: list(collection.find(query, _FIELDS).sort(RECEIVED, 1).limit(size)), policy)
    if len(docs) == size:
        last = docs[-1][RECEIVED]
        whole = [doc for doc in docs if doc[RECEIVED] != last]
        # The instant alone, as a range like every query of the sweep (stored times are whole milliseconds).
        instant = {RECEIVED: {"$gte": last, "$lt": last + timedelta(milliseconds=1)}}
        docs = whole or with_retries(lambda: list(collection.find(instant, _FIELDS)), policy)
    return docs


def _take(archive: Archive, current: Sweep, chunk: _Chunk, page: list[Row]) -> tuple[Sweep, _Chunk, int]:
    """Add a page's events to the chunk, instant by instant; a chunk that reaches CHUNK_ROWS at the end of an
    instant is whole: written, and the next one starts. The pass's position and the files written."""
    written = 0
    for instant in _instants(page):
        chunk.rows.extend(instant)
        if len(chunk.rows) >= CHUNK_ROWS:
            written += _write_whole(archive, current, chunk)
            ended = _utc(chunk.rows[-1][RECEIVED])
            current = replace(current, chunk=current.chunk + 1, chunk_from=ended, written=None, dates=())
            chunk = _Chunk()
    return current, chunk, written


def _instants(page: list[Row]) -> list[list[Row]]:
    groups: list[list[Row]] = []
    for doc in page:
        if groups and groups[-1][0][RECEIVED] == doc[RECEIVED]:
            groups[-1].append(doc)
        else:
            groups.append([doc])
    return groups


def _by_day(current: Sweep, rows: list[Row]) -> dict[str, list[Row]]:
    """The chunk's files: its events by device date, each in a fixed order."""
    files: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        files[action_file(day_of(_utc(row["time"])), current.hour, current.chunk)].append(_archived(row))
    return {name: sorted(found, key=_order) for name, found in files.items()}


def _archived(doc: Mapping[str, Any]) -> Row:
    row = {name: doc.get(name) for name in ACTION_COLUMNS}
    row["time"], row[RECEIVED] = _utc(doc["time"]), _utc(doc[RECEIVED])
    if row["action"] != "closed":
        row["pills_taken"] = None
    return row


def _order(row: Row) -> tuple[Any, ...]:
    return tuple((row[name] is None, row[name] if row[name] is not None else 0) for name in (RECEIVED, *ACTION_COLUMNS))


def _write_whole(archive: Archive, current: Sweep, chunk: _Chunk) -> int:
    """Write a whole chunk's files (whatever they held: a whole chunk's content is fixed by its name)."""
    from shared.archive import parquet  # noqa: PLC0415 - pyarrow only where the archive is written

    files = _by_day(current, chunk.rows)
    for name, rows in sorted(files.items()):
        archive.write(name, parquet.encode_actions(rows))
    return len(files)


def _write_partial(archive: Archive, current: Sweep, chunk: _Chunk, run: SweepRun) -> Sweep | None:
    """Write the chunk's events so far into its files (`_merged_into`): the pass's position with how far they go,
    or None if another writer kept changing one of them (the run gives way: `run.stopped_by_another`)."""
    for name, rows in sorted(_by_day(current, chunk.rows).items()):
        landed = _merged_into(archive, name, rows)
        if landed is None:
            run.stopped_by_another, run.contended = True, (name, current.hour, current.chunk)
            return None
        run.files_written += landed
    days = sorted({day_of(_utc(row["time"])) for row in chunk.rows})
    return replace(current, written=_utc(chunk.rows[-1][RECEIVED]), dates=tuple(days))


def _merged_into(archive: Archive, name: str, rows: list[Row]) -> int | None:
    """Write a partial chunk's rows of one file, keeping every row the file holds already: 1 if it was written, 0
    if it held them all, None if another writer changed it between each read and write, MERGE_ATTEMPTS times.

    Why keep what the file holds: its name fixes what it may hold (the events of one device date in one chunk of
    a settled receive hour), so every row in it is one of those events, whoever wrote it: a worker that got
    further and died before saving its position, or a live one whose lease this run took over. The file only ever
    gains rows of its chunk, none twice, so no run takes a dead worker's file for a live one's and stalls, and no
    stale writer takes rows away. The write is guarded by the version read: a write in between is read again."""
    from shared.archive import parquet  # noqa: PLC0415 - pyarrow only where the archive is written

    for _ in range(MERGE_ATTEMPTS):
        stored = archive.read(name)
        held = [] if stored is None else [_archived(row) for row in parquet.decode(stored.data)]
        result = _union(held, rows)
        if stored is not None and len(result) == len(held):
            return 0
        if archive.write_guarded(name, parquet.encode_actions(result), None if stored is None else stored.version):
            return 1
    return None


def _union(held: list[Row], rows: list[Row]) -> list[Row]:
    """The rows of both, each as often as the one that has it more often (two events alike in every column are
    two events: both are kept), in the file's order."""
    counts = Counter(_identity(row) for row in held) | Counter(_identity(row) for row in rows)
    by_identity = {_identity(row): row for row in (*held, *rows)}
    return sorted((by_identity[key] for key, times in counts.items() for _ in range(times)), key=_order)


def _identity(row: Row) -> tuple[Any, ...]:
    return tuple(row[name] for name in ACTION_COLUMNS)


def _read_back(archive: Archive, current: Sweep) -> _Chunk:
    """The chunk under way as far as an earlier run wrote it: its files, only up to `written` (a worker killed
    after writing more, before saving, may have left more, which this run reads again)."""
    chunk = _Chunk()
    if current.written is None:
        return chunk
    from shared.archive import parquet  # noqa: PLC0415 - pyarrow only where the archive is read

    for day in current.dates:
        stored = archive.read(action_file(day, current.hour, current.chunk))
        if stored is not None:
            chunk.rows += [row for row in parquet.decode(stored.data) if _utc(row[RECEIVED]) <= current.written]
    chunk.rows.sort(key=_order)
    return chunk
