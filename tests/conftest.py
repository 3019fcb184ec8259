"""Fixtures: a fresh store per test (mongomock, and SecantusDB in-process for the integration runs),
settings from a clean environment, Azurite's queue service for the
queue tests, and every sorted query checked against the declared indexes. PILLBOTTLE_TEST_CLOCK_START places
the wall clock, and every read of it is recorded (tests/wall_clock.py)."""

import itertools
import os
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import mongomock
import pytest
from pymongo import MongoClient, monitoring
from pymongo.database import Database

from shared import instants
from shared.archive.current import use_archive
from shared.instants import hour_of, set_clock
from shared.settings import Settings, get_settings
from shared.store import client as store
from shared.store import retries
from shared.store.schema import collection_specs
from shared.store.setup import ensure_store
from tests import azurite
from tests.command_counter import CommandCounter
from tools.sort_audit import SortAudit

_databases = itertools.count()

# The wall clock, placed by PILLBOTTLE_TEST_CLOCK_START and each read of it recorded for the clock matrix
# (tests/wall_clock.py); a test past its time limit stopped with where it was (tests/timeouts.py).
pytest_plugins = ("tests.wall_clock", "tests.timeouts")


# Under mutmut (`./dev mutate`, which sets MUTANT_UNDER_TEST) the property tests run traced, two at a time on busy
# cores: no per-example deadline, and the same examples every run, so that a mutant's verdict is not luck.
if "MUTANT_UNDER_TEST" in os.environ:
    from hypothesis import settings as hypothesis_settings

    hypothesis_settings.register_profile("mutmut", deadline=None, derandomize=True)
    hypothesis_settings.load_profile("mutmut")


def _teach_mongomock_bulk_sort() -> None:
    """pymongo >= 4.11 passes `sort` to bulk builders; mongomock 4.3 predates it. We never sort in a
    bulk update, so accept the argument only when it is None."""
    from mongomock.collection import BulkOperationBuilder as builder  # noqa: N813

    for name in ("add_update", "add_replace"):
        original = getattr(builder, name)

        def accepting_sort(self: Any, *args: Any, _original: Any = original, sort: Any = None, **kwargs: Any) -> Any:
            assert sort is None, "bulk updates with sort are not supported by mongomock"
            return _original(self, *args, **kwargs)

        setattr(builder, name, accepting_sort)


_teach_mongomock_bulk_sort()


def _teach_mongomock_bit() -> None:
    """mongomock 4.3 has no `$bit`; the heartbeat ring is written with it (Cosmos DB, SecantusDB and MongoDB
    have it). As MongoDB does: each of `and`, `or`, `xor` in order, on the field's integer or 0 if missing,
    keeping a 64-bit integer a 64-bit integer."""
    from bson.int64 import Int64
    from mongomock import collection as mongomock_collection

    operations = {"and": int.__and__, "or": int.__or__, "xor": int.__xor__}

    def bit_updater(doc: Any, field_name: str, value: dict[str, int]) -> None:
        if not isinstance(doc, dict):
            raise NotImplementedError("$bit on array elements")
        current = doc.get(field_name, 0)
        result = int(current)
        for name, operand in value.items():
            result = operations[name](result, int(operand))
        wide = isinstance(current, Int64) or any(isinstance(v, Int64) for v in value.values())
        doc[field_name] = Int64(result) if wide else result

    mongomock_collection._updaters["$bit"] = bit_updater


_teach_mongomock_bit()


def _teach_mongomock_push_sort_values() -> None:
    """mongomock 4.3 sorts a `$push` by any number's sign; MongoDB (and SecantusDB) accept only 1 or -1 ("specify
    1 for ascending or -1 for descending": https://www.mongodb.com/docs/manual/reference/operator/update/sort/)
    and refuse the update otherwise (code 2, "The $sort element value must be either 1 or -1"). Refuse it here
    too, so the unit tests (and the mutation run, which has only them) catch a wrong sort value."""
    from mongomock.collection import Collection
    from pymongo.errors import WriteError

    def allowed(spec: Any) -> bool:
        if isinstance(spec, dict):
            return all(allowed(direction) for direction in spec.values())
        return type(spec) is int and spec in (1, -1)

    original = Collection._update

    def refusing_bad_sorts(self: Any, spec: Any, document: Any, *args: Any, **kwargs: Any) -> Any:
        for value in (document.get("$push") or {}).values() if isinstance(document, dict) else ():
            if isinstance(value, dict) and "$sort" in value and not allowed(value["$sort"]):
                raise WriteError("The $sort element value must be either 1 or -1", code=2)
        return original(self, spec, document, *args, **kwargs)

    setattr(Collection, "_update", refusing_bad_sorts)  # noqa: B010 - a private method of an untyped class


_teach_mongomock_push_sort_values()


def _mongomock_expires_by_the_app_clock() -> None:
    """mongomock applies TTL indexes (retention) on every read, by its own `utcnow`: make that the app's server
    clock, so a test that sets the clock (shared.instants.set_clock) sees documents expire by it, and a test
    that plays a past day does not see them expire at once by the real one."""
    from shared.instants import utc_now

    setattr(mongomock, "utcnow", lambda: utc_now().replace(tzinfo=None))  # noqa: B010 - untyped module attribute


_mongomock_expires_by_the_app_clock()

# Registered process-wide before any test runs, so it hears every client the tests make, however they make it
# (fixtures, the simulator, the local server, the operations commands). mongomock sends no commands: the
# SecantusDB runs are what it checks, and tests/integration/store/test_sorted_reads.py drives every read path there.
_SORTS = SortAudit()
monitoring.register(_SORTS)


@pytest.fixture(autouse=True)
def sort_audit() -> Iterator[SortAudit]:
    """The queries this test sent to a real server. A test whose code sorts in a way no declared index serves
    exactly (tools/sort_audit.py: the rule) errors at teardown, naming the query."""
    _SORTS.clear()
    yield _SORTS
    unserved = _SORTS.unserved(collection_specs(Settings()))
    _SORTS.clear()
    if unserved:
        pytest.fail("sorts Cosmos DB would not serve from an index:\n" + "\n".join(unserved), pytrace=False)


@pytest.fixture(autouse=True)
def clean_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test starts from default settings with fast retries and no throttling seen, and ends with the app's
    store, archive and clock its own again."""
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias  # the host's own names: AzureWebJobsStorage, ...
        monkeypatch.delenv(alias if isinstance(alias, str) else name.upper(), raising=False)
    monkeypatch.setenv("STORE_RETRY_BASE_MS", "1")
    get_settings.cache_clear()
    # The process's recent throttling widens every 503's Retry-After for a minute: a throttling test before this
    # one, in the same worker process, would change what this one's 503s say.
    retries.RECENT_THROTTLING.forget()
    yield
    store.use_client(None)
    use_archive(None)
    set_clock(None)  # a test that set a clock of its own and left it would run every later test in its process at it
    get_settings.cache_clear()


@pytest.fixture
def mid_hour() -> Iterator[None]:
    """The app's clock runs in real time from the middle of the current UTC hour: a test that reads it more than
    once (the heartbeat tally counts an hour 10 minutes after it ends) sees no hour boundary go by."""
    wall = instants._wall_clock  # the real clock, or the one PILLBOTTLE_TEST_CLOCK_START placed
    now = wall()
    offset = hour_of(now) + timedelta(minutes=30) - now
    set_clock(lambda: wall() + offset)
    yield
    set_clock(None)


@pytest.fixture(scope="session")
def secantus_uri() -> Iterator[str]:
    from secantus import SecantusDBServer

    # No background TTL sweeps: tests write fixed, long-past dates (tests/store/test_retention.py prunes on demand).
    with SecantusDBServer(storage_path=":memory:", ttl_sweep_seconds=0) as server:
        yield server.uri


@pytest.fixture(scope="session")
def secantus_client(secantus_uri: str) -> Iterator[MongoClient[Any]]:
    client: MongoClient[Any] = store.create_client(secantus_uri)
    yield client
    client.close()


def _fresh_database(client: Any, monkeypatch: pytest.MonkeyPatch) -> Database[Any]:
    name = f"test_{next(_databases)}"
    monkeypatch.setenv("MONGODB_DATABASE", name)
    get_settings.cache_clear()
    store.use_client(client)
    db: Database[Any] = client[name]
    ensure_store(db, get_settings(), on_cosmos=False)
    return db


@pytest.fixture
def mock_db(monkeypatch: pytest.MonkeyPatch) -> Database[Any]:
    """A set-up database on mongomock, installed as the app's store."""
    return _fresh_database(mongomock.MongoClient(tz_aware=True), monkeypatch)


@pytest.fixture
def real_db(secantus_client: MongoClient[Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[Database[Any]]:
    """A set-up database on SecantusDB (a real MongoDB wire-protocol server), installed as the app's store."""
    db = _fresh_database(secantus_client, monkeypatch)
    yield db
    secantus_client.drop_database(db.name)


@pytest.fixture
def counted(secantus_uri: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Database[Any], CommandCounter]]:
    """A set-up database on SecantusDB whose client counts every command the app sends (cost tests)."""
    counter = CommandCounter()
    client = store.create_client(secantus_uri, event_listeners=[counter])
    db = _fresh_database(client, monkeypatch)
    yield db, counter
    client.drop_database(db.name)
    client.close()


@pytest.fixture(params=["mongomock", pytest.param("secantus", marks=pytest.mark.integration)])
def db(request: pytest.FixtureRequest) -> Database[Any]:
    """The app's store, once on mongomock and once on SecantusDB: API behaviour must not depend on it."""
    database: Database[Any] = request.getfixturevalue("mock_db" if request.param == "mongomock" else "real_db")
    return database


@pytest.fixture(scope="session")
def azurite_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """Azurite's queue service, in memory, for the whole session: its port."""
    reason = azurite.missing()
    if reason:
        pytest.skip(reason)
    with azurite.azurite_queue(tmp_path_factory.mktemp("azurite")) as port:
        yield port


@pytest.fixture(scope="session")
def azurite_blob_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """Azurite's blob service, in memory, for the whole session: its port."""
    reason = azurite.missing()
    if reason:
        pytest.skip(reason)
    with azurite.azurite_blob(tmp_path_factory.mktemp("azurite-blob")) as port:
        yield port


@pytest.fixture(scope="session")
def registered_functions() -> dict[str, Any]:
    """The app's functions by name, as the Functions runtime indexed them and reported them to the host (its
    `RpcFunctionMetadata`: name, bindings, raw bindings); loaded once per process."""
    from tools.host.worker import load_app
    from tools.local_host import APP_ROOT

    return {function.name: function for function in load_app(APP_ROOT).functions}
