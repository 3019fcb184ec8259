"""The wall clock in the tests (a pytest plugin, registered by tests/conftest.py): placed where
PILLBOTTLE_TEST_CLOCK_START says, and every read of it recorded, so that the clock matrix runs exactly the tests that
read it.

`shared.instants._wall_clock` is the one clock the app reads when a test has not set its own (`set_clock`), and the
one thing PILLBOTTLE_TEST_CLOCK_START moves: a test that never reads it passes or fails the same at every instant, so
`./dev test-clocks` (tools/clock_matrix.py) reruns only the tests listed in tests/clock_readers.txt. This plugin
keeps that list honest. In every run it records which tests read the wall clock, in any thread, during their setup,
call or teardown, through a fixture of wider scope they use, or while their module was imported, and the run fails
when a test read it but is not listed, saying how to fix it. `--record-clock-readers` rewrites the list from the run.
Under pytest-xdist each worker records its own tests and the controller judges the whole.
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
from tools.clock_matrix import CLOCK_ENV, READERS_FILE, ROOT, listed_readers, write_readers

CLOCK_START = CLOCK_ENV
RECORD_OPTION = "--record-clock-readers"
_OUTPUT_KEY = "clock_readers"
READS = "reads_wall_clock"  # a teardown report's user property: the list entry that covers the test


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
_placed: PlacedClock | None = None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        RECORD_OPTION,
        action="store_true",
        help="rewrite tests/clock_readers.txt from this run: the tests that read the wall clock (tests/wall_clock.py)",
    )


def pytest_configure(config: pytest.Config) -> None:
    global _recorder, _placed  # noqa: PLW0603 - one wall clock per process
    text = os.environ.get(CLOCK_START)
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


def pytest_report_header(config: pytest.Config) -> str | None:
    return None if _placed is None else f"{CLOCK_START}: each test starts at {instants.format_instant(_placed.start)}"


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
    if _placed is not None:
        _placed.began = time.monotonic()  # each test starts at the placed instant
    if _recorder is None:
        return (yield)
    with _recorder.reads_within(item.nodeid):
        return (yield)


def clock_entry(recorder: Recorder, item: pytest.Item) -> str | None:
    """The list's entry for a test that read the wall clock, None for one that did not: its node id if it read it
    itself or through a wider fixture it uses; its file if its module read it when imported, since then the module
    may make its tests from the clock (a parameter's id that is a date), and a test's id at one instant is not its
    id at another."""
    module = item.getparent(pytest.Module)
    if module is not None and f"import:{module.nodeid}" in recorder.readers:
        return module.nodeid
    uses = getattr(item, "fixturenames", ())
    uses_reader = any(name in uses and item.nodeid.startswith(baseid) for name, baseid in recorder.fixtures)
    return item.nodeid if item.nodeid in recorder.readers or uses_reader else None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    """The verdict rides on the test's teardown report (its user_properties), the last thing the test does: under
    pytest-xdist the report reaches the controller at once, so a worker that crashes later loses nothing of it."""
    report = yield
    if call.when == "teardown" and _recorder is not None:
        entry = clock_entry(_recorder, item)
        if entry is not None:
            report.user_properties.append((READS, entry))
    return report


class _Judge:
    """Gathers what every process recorded and fails the run on a reader the list leaves out."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        # The list beside the suite that runs: this repository's, or a scratch project's in the plugin's own tests.
        self.listing = config.rootpath / READERS_FILE.relative_to(ROOT)
        self.readers: set[str] = set()
        self.ran: set[str] = set()  # tests that ran (not skipped), here or on a worker
        self.collected: set[str] = set()
        self.problems: list[str] = []

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """The tests and their files: what the list's entries may name."""
        self.collected.update(item.nodeid for item in session.items)
        self.collected.update(item.nodeid.split("::")[0] for item in session.items)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Every test's reports, this process's or (under pytest-xdist) a worker's as it sends them."""
        if report.when == "call" or (report.when == "setup" and report.failed):
            self.ran.update((report.nodeid, report.nodeid.split("::")[0]))
        if report.when == "teardown":
            self.readers.update(str(value) for name, value in report.user_properties if name == READS)

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
        if self.config.getoption(RECORD_OPTION):
            if exitstatus != pytest.ExitCode.INTERRUPTED:  # a run cut short would drop what it did not reach
                self._record(listed)
            return
        covered = set(listed)
        missing = sorted(entry for entry in self.readers if not {entry, entry.split("::")[0]} & covered)
        if missing:
            self.problems.append(
                f"{len(missing)} test(s) or file(s) read the wall clock but are not in tests/clock_readers.txt, so "
                "./dev test-clocks would not run them at its placed instants:\n"
                + "".join(f"  {nodeid}\n" for nodeid in missing)
                + "Add them to tests/clock_readers.txt (`./dev test --record-clock-readers` rewrites it from a whole "
                "run), or let the test run a clock of its own (shared.instants.set_clock) if the instant cannot "
                "matter to it (docs/testing.md)."
            )
        if self._whole_run():
            gone = sorted(set(listed) - self.collected)
            if gone:
                self.problems.append(
                    f"tests/clock_readers.txt lists {len(gone)} test(s) or file(s) the suite no longer has, which "
                    "./dev test-clocks would fail to find:\n"
                    + "".join(f"  {nodeid}\n" for nodeid in gone)
                    + "Remove them, or rewrite the list: ./dev test --record-clock-readers."
                )
        if self.problems and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

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
