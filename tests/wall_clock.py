"""The wall clock in the tests (a pytest plugin, registered by tests/conftest.py): placed for each test, and every
read of it recorded, so that the clock matrix runs exactly the tests that read it.

`shared.instants._wall_clock` is the one clock the app reads when a test has not set its own (`set_clock`, or the
`own_clock` mark), and the one thing a placed instant moves: a test that never reads it passes or fails the same at
every instant, so `./dev test-clocks` (tools/clock_matrix.py) reruns only the tests listed in
tests/clock_readers.txt, each at every instant as a parameter of its own (`--clock-instants`), all in one run. Every
test starts at its instant, or at PILLBOTTLE_TEST_CLOCK_START's, running in real time from there.

This plugin keeps that list honest. In every run it records which tests read the wall clock, in any thread, during
their setup, call or teardown, and the run fails when a test read it but is not listed, saying how to fix it;
`--record-clock-readers` rewrites the list from the run. Since the clock is placed per test, only a test and its
function-scoped fixtures may read it: a read while a module is imported (a constant made from the clock) or in a
fixture of wider scope would sit at another instant than the test's, and fails the run, naming where. Under
pytest-xdist each worker records its own tests and the controller judges the whole.
"""

import ast
import functools
import os
import sys
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from shared import instants
from tools.clock_matrix import CLOCK_ENV, INSTANTS, READERS_FILE, ROOT, Instant, listed_readers, write_readers

CLOCK_START = CLOCK_ENV
RECORD_OPTION = "--record-clock-readers"
INSTANTS_OPTION = "--clock-instants"
READERS_ONLY_OPTION = "--clock-readers-only"
OWN_CLOCK = "own_clock"  # the mark of a test that runs a clock of its own from a fixed instant
PLACED = "placed_instant"  # the fixture, and in the matrix the parameter, that says a test's instant
_OUTPUT_KEY = "clock_readers"
# A teardown report's user properties: the list entry that covers the test; a module that read the clock as it was
# imported, or a wider fixture that read it, which the test uses.
READS = "reads_wall_clock"
READS_AT_IMPORT = "reads_wall_clock_at_import"
READS_IN_FIXTURE = "reads_wall_clock_in_wider_fixture"


class PlacedClock:
    """The wall clock placed at `start`, running in real time from when the current test began."""

    def __init__(self, start: datetime) -> None:
        self.start = start
        self.began = time.monotonic()

    def __call__(self) -> datetime:
        return self.start + timedelta(seconds=time.monotonic() - self.began)


@dataclass
class Recorder:
    """Counts reads of the wall clock and says whose they were: a test's node id, or a module being imported."""

    clock: Callable[[], datetime]
    reads: int = 0
    owner: str | None = None  # the running test's node id, or "import:" and the module's node id
    readers: set[str] = field(default_factory=set)
    unowned: int = 0  # reads outside any test or import (plugin start-up, a thread left running between tests)
    fixtures: set[tuple[str, str]] = field(default_factory=set)  # (name, baseid) of wider fixtures that read it
    modules: set[str] = field(default_factory=set)  # files whose top-level code read it as they were imported
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self) -> datetime:
        with self._lock:
            self.reads += 1
            owner = self.owner
            if owner is not None and owner.startswith("import:") and threading.current_thread() is not _MAIN:
                owner = None  # a thread left running reads while a module is collected: not the module's read
            if owner is None:
                self.unowned += 1
            else:
                self.readers.add(owner)
                if owner.startswith("import:"):
                    self.modules.update(importing_files(sys._getframe(1)))
        return self.clock()

    def reads_within(self, owner: str | None) -> "_Owning":
        return _Owning(self, owner)


def importing_files(frame: FrameType | None) -> set[str]:
    """The files of the modules being imported in the stack from `frame` out (their top-level code runs)."""
    files = set()
    while frame is not None:
        if frame.f_code.co_name == "<module>":
            files.add(str(Path(frame.f_code.co_filename).resolve()))
        frame = frame.f_back
    return files


class _Owning:
    """While open, reads belong to `owner`; remembers whether any happened."""

    def __init__(self, recorder: Recorder, owner: str | None) -> None:
        self.recorder = recorder
        self.owner = owner
        self.read = False

    def __enter__(self) -> "_Owning":
        self.previous = self.recorder.owner
        self.before = self.recorder.reads
        self.recorder.owner = self.owner
        return self

    def __exit__(self, *exc: object) -> None:
        self.read = self.recorder.reads != self.before
        self.recorder.owner = self.previous


_recorder: Recorder | None = None
_MAIN = threading.main_thread()  # where pytest collects, importing the test modules
_placed: PlacedClock | None = None  # PILLBOTTLE_TEST_CLOCK_START's
_matrix: tuple[Instant, ...] = ()  # --clock-instants': every test runs at each


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        RECORD_OPTION,
        action="store_true",
        help="rewrite tests/clock_readers.txt from this run: the tests that read the wall clock (tests/wall_clock.py)",
    )
    parser.addoption(
        INSTANTS_OPTION,
        metavar="LABELS",
        help="run each test at these placed instants (a parameter of its own each): labels of tools/clock_matrix.py, "
        "comma-separated, or 'all'",
    )
    parser.addoption(
        READERS_ONLY_OPTION, action="store_true", help="run only the tests tests/clock_readers.txt lists (the matrix's)"
    )


def pytest_configure(config: pytest.Config) -> None:
    global _recorder, _placed, _matrix  # noqa: PLW0603 - one wall clock per process
    config.addinivalue_line(
        "markers",
        f"{OWN_CLOCK}(start): the app's clock runs in real time from `start` (an aware datetime) through the test, "
        "reading no wall clock: the placed instant cannot matter to it, and the clock matrix leaves it out",
    )
    text = os.environ.get(CLOCK_START)
    _matrix = matrix_instants(config.getoption(INSTANTS_OPTION))
    if text and _matrix:
        raise pytest.UsageError(f"{CLOCK_START} and {INSTANTS_OPTION} both place the clock: give one")
    if _matrix and config.getoption(RECORD_OPTION):
        raise pytest.UsageError(f"{RECORD_OPTION} records from a run on one clock: leave out {INSTANTS_OPTION}")
    if text:
        try:
            _placed = PlacedClock(instants.parse_instant(text))
        except ValueError as error:
            raise pytest.UsageError(f"{CLOCK_START}: {error}") from None
        instants._wall_clock = _placed
    _recorder = Recorder(instants._wall_clock)
    instants._wall_clock = _recorder
    if "MUTANT_UNDER_TEST" not in os.environ:  # a mutant that only makes a test read the clock is not killed by it
        config.pluginmanager.register(_Judge(config), "clock-readers-judge")


def matrix_instants(option: str | None) -> tuple[Instant, ...]:
    """The instants `--clock-instants` names ('all', or labels separated by commas); UsageError naming an unknown
    label and the known ones."""
    if not option:
        return ()
    if option == "all":
        return INSTANTS
    by_label = {i.label: i for i in INSTANTS}
    labels = [label.strip() for label in option.split(",") if label.strip()]
    unknown = [label for label in labels if label not in by_label]
    if unknown or not labels:
        raise pytest.UsageError(
            f"{INSTANTS_OPTION}: {', '.join(unknown) or 'no label'} is not an instant of the clock matrix; "
            f"known: all, {', '.join(by_label)}"
        )
    return tuple(by_label[label] for label in dict.fromkeys(labels))


def pytest_report_header(config: pytest.Config) -> str | None:
    if _matrix:
        return f"{INSTANTS_OPTION}: each test at {', '.join(i.label for i in _matrix)}"
    return None if _placed is None else f"{CLOCK_START}: each test starts at {instants.format_instant(_placed.start)}"


@pytest.fixture(autouse=True)
def placed_instant(request: pytest.FixtureRequest) -> Instant | None:
    """The instant of the clock matrix this test runs at (its last parameter, under `--clock-instants`); None
    otherwise. The clock itself is placed before the test's setup (pytest_runtest_protocol below)."""
    return getattr(request, "param", None)


@pytest.hookimpl(trylast=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Under `--clock-instants` every test is run once an instant; last, so that the instant ends the test's id:
    `test_x[secantus-year-end]`."""
    if _matrix and PLACED in metafunc.fixturenames:
        metafunc.parametrize(PLACED, _matrix, ids=[i.label for i in _matrix], indirect=True)


def instant_of(item: pytest.Item) -> Instant | None:
    """The matrix instant a test runs at, None outside the matrix."""
    callspec = getattr(item, "callspec", None)
    value = callspec.params.get(PLACED) if callspec is not None else None
    return value if isinstance(value, Instant) else None


def listed_id(item: pytest.Item) -> str:
    """The test's node id as tests/clock_readers.txt lists it: without the matrix instant's part, if it has one."""
    instant, nodeid = instant_of(item), item.nodeid
    if instant is None:
        return nodeid
    for ending, kept in ((f"[{instant.label}]", ""), (f"-{instant.label}]", "]")):
        if nodeid.endswith(ending):
            return nodeid[: -len(ending)] + kept
    return nodeid


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every `own_clock` mark is checked before any test runs; `--clock-readers-only` keeps the tests the list names
    (at each instant, under `--clock-instants`)."""
    for item in items:
        own_clock_start(item)
    if not config.getoption(READERS_ONLY_OPTION):
        return
    listed = set(listed_readers(config.rootpath / READERS_FILE.relative_to(ROOT)))
    kept = [item for item in items if listed_id(item) in listed]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if listed_id(item) not in listed])
        items[:] = kept


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, Any]:
    """A module whose import reads the clock (a module constant computed from it) reads it on behalf of every test
    in it, and so does a module that imports such a module of the project, directly or not: `from tests.tally_fleet
    import DAY` reads the clock only in the first test module imported that imports it, and every other one's tests
    use the same DAY."""
    if _recorder is None or not isinstance(collector, pytest.Module):
        return (yield)
    with _recorder.reads_within(f"import:{collector.nodeid}"):
        result = yield
    if _recorder.modules and _recorder.modules & project_imports(collector.path, collector.config.rootpath):
        _recorder.readers.add(f"import:{collector.nodeid}")
    return result


@functools.cache
def project_imports(path: Path, root: Path) -> frozenset[str]:
    """The file at `path` and every file of the project under `root` it imports, directly or through others (its
    import statements, read from the source: also those of modules already imported)."""
    found: set[str] = set()
    waiting = [path.resolve()]
    while waiting:
        current = waiting.pop()
        if str(current) in found:
            continue
        found.add(str(current))
        waiting.extend(imported_files(current, root))
    return frozenset(found)


@functools.cache
def imported_files(path: Path, root: Path) -> tuple[Path, ...]:
    """The project files under `root` that the import statements of the file at `path` name (a module, or for
    `from package import name`, the package and a submodule `name` if there is one)."""
    try:
        tree = ast.parse(path.read_text(), str(path))
    except (OSError, SyntaxError, ValueError):
        return ()
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
            names += [f"{node.module}.{alias.name}" for alias in node.names]
    files = []
    for name in names:
        base = root.joinpath(*name.split("."))
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                files.append(candidate.resolve())
    return tuple(files)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(
    fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
) -> Generator[None, Any, Any]:
    """A fixture wider than a test that reads the clock makes a reader of every test that uses it, not only of the
    test that happened to set it up."""
    if _recorder is None or fixturedef.scope == "function":
        return (yield)
    with _recorder.reads_within(_recorder.owner) as owning:
        result = yield
    if owning.read:
        _recorder.fixtures.add((fixturedef.argname, fixturedef.baseid))
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
    """Each test starts at its placed instant (the matrix's, or PILLBOTTLE_TEST_CLOCK_START's), or runs its own
    clock; its reads of the wall clock are its own."""
    instant = instant_of(item)
    if instant is not None and _recorder is not None:
        _recorder.clock = PlacedClock(instants.parse_instant(instant.at))
    elif _placed is not None:
        _placed.began = time.monotonic()
    own = own_clock_start(item)
    if own is not None:
        instants.set_clock(PlacedClock(own))
    try:
        if _recorder is None:
            return (yield)
        with _recorder.reads_within(item.nodeid):
            return (yield)
    finally:
        if own is not None:
            instants.set_clock(None)


def own_clock_start(item: pytest.Item) -> datetime | None:
    """Where the test's `own_clock` mark starts its clock; None without the mark. A mark without an aware datetime
    is a mistake in the test: a usage error naming it, as the run is collected (pytest_collection_modifyitems)."""
    mark = item.get_closest_marker(OWN_CLOCK)
    if mark is None:
        return None
    start = mark.args[0] if len(mark.args) == 1 and not mark.kwargs else None
    if not isinstance(start, datetime) or start.tzinfo is None:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{OWN_CLOCK} takes one aware datetime, the clock's start")
    return start


def clock_findings(recorder: Recorder, item: pytest.Item) -> list[tuple[str, str]]:
    """What the test's teardown report says of its clock (user properties): its entry in the list if it read the
    wall clock itself (the node id the list holds, without a matrix instant); the file of its module if the module,
    or a module of the project it imports, read it while being imported; each fixture wider than a test it uses that
    read it. The last two are mistakes under a clock placed per test."""
    found: list[tuple[str, str]] = []
    module = item.getparent(pytest.Module)
    if module is not None and f"import:{module.nodeid}" in recorder.readers:
        found.append((READS_AT_IMPORT, module.nodeid))
    uses = getattr(item, "fixturenames", ())
    found += [
        (READS_IN_FIXTURE, f"{name} (scope wider than a test, {baseid or 'the root'})")
        for name, baseid in sorted(recorder.fixtures)
        if name in uses and item.nodeid.startswith(baseid)
    ]
    if item.nodeid in recorder.readers:
        found.append((READS, listed_id(item)))
    return found


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    """The verdict rides on the test's teardown report (its user_properties), the last thing the test does: under
    pytest-xdist the report reaches the controller at once, so a worker that crashes later loses nothing of it."""
    report = yield
    if call.when == "teardown" and _recorder is not None:
        report.user_properties.extend(clock_findings(_recorder, item))
    return report


class _Judge:
    """Gathers what every process recorded and fails the run on a reader the list leaves out."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        # The list beside the suite that runs: this repository's, or a scratch project's in the plugin's own tests.
        self.listing = config.rootpath / READERS_FILE.relative_to(ROOT)
        self.readers: set[str] = set()
        self.at_import: set[str] = set()  # files whose import read the clock
        self.in_fixtures: set[str] = set()  # wider fixtures that read it
        self.ran: set[str] = set()  # tests that ran (not skipped), here or on a worker
        self.collected: set[str] = set()
        self.problems: list[str] = []

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """The tests: what the list's entries may name."""
        self.collected.update(listed_id(item) for item in session.items)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Every test's reports, this process's or (under pytest-xdist) a worker's as it sends them."""
        if report.when == "call" or (report.when == "setup" and report.failed):
            self.ran.add(report.nodeid)
        if report.when == "teardown":
            for name, value in report.user_properties:
                found = {READS: self.readers, READS_AT_IMPORT: self.at_import, READS_IN_FIXTURE: self.in_fixtures}
                if name in found:
                    found[name].add(str(value))

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """What a pytest-xdist worker collected (the controller collects nothing itself)."""
        output = getattr(node, "workeroutput", {}).get(_OUTPUT_KEY)
        if output:
            self.collected.update(output["collected"])

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        workeroutput = getattr(self.config, "workeroutput", None)
        if workeroutput is not None:  # an xdist worker: the controller judges
            workeroutput[_OUTPUT_KEY] = {"collected": sorted(self.collected)}
            return
        listed = listed_readers(self.listing)
        self._judge_wider_reads()
        if self.config.getoption(RECORD_OPTION):
            if exitstatus != pytest.ExitCode.INTERRUPTED:  # a run cut short would drop what it did not reach
                self._record(listed)
        elif (
            not _matrix
        ):  # the matrix runs listed tests, or the paths its caller named: the suite's run judges the list
            self._judge_list(listed)
        if self.problems and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _judge_wider_reads(self) -> None:
        """Reads the matrix cannot place: at a module's import, in a fixture shared by several tests."""
        if self.at_import:
            self.problems.append(
                f"{len(self.at_import)} file(s) read the wall clock while being imported (a module constant made "
                "from it, there or in a module of the project they import), but ./dev test-clocks places the clock "
                "for each test, so the constant would not be at the test's instant:\n"
                + "".join(f"  {nodeid}\n" for nodeid in sorted(self.at_import))
                + "Make the value in the test or in a function-scoped fixture, or from a fixed instant under a clock "
                f"of the test's own (@pytest.mark.{OWN_CLOCK}(start), docs/testing.md)."
            )
        if self.in_fixtures:
            self.problems.append(
                f"{len(self.in_fixtures)} fixture(s) wider than a test read the wall clock, but ./dev test-clocks "
                "places the clock for each test, so what they made would not be at the test's instant:\n"
                + "".join(f"  {fixture}\n" for fixture in sorted(self.in_fixtures))
                + "Make them function-scoped, or read no clock in them (docs/testing.md)."
            )

    def _judge_list(self, listed: list[str]) -> None:
        """Every reader listed; every listed test still in the suite (a whole run can tell)."""
        covered = set(listed)
        missing = sorted(entry for entry in self.readers if entry not in covered)
        if missing:
            self.problems.append(
                f"{len(missing)} test(s) read the wall clock but are not in tests/clock_readers.txt, so "
                "./dev test-clocks would not run them at its placed instants:\n"
                + "".join(f"  {nodeid}\n" for nodeid in missing)
                + "Add them to tests/clock_readers.txt (`./dev test --record-clock-readers` rewrites it from a whole "
                f"run), or give the test a clock of its own (@pytest.mark.{OWN_CLOCK}(start)) if the instant cannot "
                "matter to it (docs/testing.md)."
            )
        if self._whole_run():
            gone = sorted(set(listed) - self.collected)
            if gone:
                self.problems.append(
                    f"tests/clock_readers.txt lists {len(gone)} test(s) the suite no longer has, which "
                    "./dev test-clocks would fail to find:\n"
                    + "".join(f"  {nodeid}\n" for nodeid in gone)
                    + "Remove them, or rewrite the list: ./dev test --record-clock-readers."
                )

    def _record(self, listed: list[str]) -> None:
        """Readers found now, and listed ones this run did not get to (skipped, deselected) if they still exist."""
        kept = {
            nodeid
            for nodeid in listed
            if nodeid not in self.ran and (nodeid in self.collected or not self._whole_run())
        }
        write_readers(self.readers | kept, self.listing)

    def _whole_run(self) -> bool:
        """Whether this run collected the whole suite: no paths, -k, -m or deselection narrowed it."""
        option = self.config.option
        narrowed = bool(option.keyword or option.markexpr or getattr(option, "deselect", None))
        named = self.config.args_source == pytest.Config.ArgsSource.ARGS  # not testpaths, nor the folder it ran in
        return not named and not narrowed

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        for problem in self.problems:
            terminalreporter.section("clock readers", sep="=", red=True)
            terminalreporter.write(problem + "\n")
        if self.config.getoption(RECORD_OPTION) and getattr(self.config, "workeroutput", None) is None:
            terminalreporter.write_line(
                f"clock readers: {len(listed_readers(self.listing))} tests listed in {self.listing}"
            )
