"""The developer commands as a newcomer meets them: `./dev` names an unknown command and shows its usage, and
every command answers nonsense sizes with a one-line usage error (exit 2), never a traceback, and documents
every option."""

import argparse
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo.errors import ServerSelectionTimeoutError

from benchmarks import checks as checks_benchmark
from benchmarks import ingestion as ingestion_benchmark
from benchmarks import reports as reports_benchmark
from benchmarks import suite_command
from shared.reports import rebuild
from shared.settings import get_settings
from shared.store import setup_command
from shared.store.command_line import run_command
from tools import lifecycle, serve, simulate
from tools.lifecycle import run as lifecycle_run
from tools.simulate import in_process, over_http

ROOT = Path(__file__).resolve().parents[2]

COMMANDS: dict[str, Callable[[list[str] | None], int | None]] = {
    "./dev simulate": simulate.main,
    "./dev lifecycle": lifecycle.main,
    "./dev serve": serve.main,
    "./dev bench": suite_command.main,
    "./dev setup-store": setup_command.main,
    "python -m benchmarks.ingestion": ingestion_benchmark.main,
    "python -m benchmarks.checks": checks_benchmark.main,
    "python -m benchmarks.reports": reports_benchmark.main,
    "python -m shared.reports.rebuild": rebuild.main,
}

BAD_SIZES = [
    ("./dev simulate", ["--bottles", "0"], "--bottles"),
    ("./dev simulate", ["--bottles", "-5"], "--bottles"),
    ("./dev simulate", ["--bottles", "many"], "--bottles"),
    ("./dev simulate", ["--users", "0"], "--users"),
    ("./dev simulate", ["--users", "-1"], "--users"),
    ("./dev simulate", ["--bottles", "10", "--users", "40"], "--users 40 is more than --bottles 10"),
    ("./dev simulate", ["--users", "31", "--bottles", "30"], "--users 31 is more than --bottles 30"),
    ("./dev lifecycle", ["--days", "0"], "--days"),
    ("./dev lifecycle", ["--days", "1.5"], "--days"),
    ("./dev lifecycle", ["--workers", "2"], "--workers"),
    ("./dev lifecycle", ["--bottles", "1"], "--bottles"),
    ("./dev simulate", ["--days", "0"], "--days"),
    ("./dev simulate", ["--days", "-2"], "--days"),
    ("./dev simulate", ["--days", "nan"], "--days"),
    ("./dev simulate", ["--days", "inf"], "--days"),
    ("./dev simulate", ["--days", "1e10"], "--days"),
    ("./dev simulate", ["--minutes", "0"], "--minutes"),
    ("./dev simulate", ["--heartbeat-seconds", "-10"], "--heartbeat-seconds"),
    ("./dev serve", ["--port", "-1"], "--port"),
    ("./dev serve", ["--port", "65536"], "--port"),
    ("./dev bench", ["--output", "no/such/directory/RESULTS.md"], "--output"),
    ("python -m benchmarks.ingestion", ["--events", "0"], "--events"),
    ("python -m benchmarks.ingestion", ["--events", "100000"], "--events"),
    ("python -m benchmarks.ingestion", ["--bottles", "0"], "--bottles"),
    ("python -m benchmarks.ingestion", ["--fleets", "100,0"], "--fleets"),
    ("python -m benchmarks.ingestion", ["--fleets", "100,lots"], "--fleets"),
    ("python -m benchmarks.ingestion", ["--fleets", "1000000000"], "--fleets"),
    ("python -m benchmarks.ingestion", ["--steady", "0"], "--steady"),
    ("python -m benchmarks.checks", ["--sizes", "10000,-1"], "--sizes"),
    ("python -m benchmarks.checks", ["--sizes", "ten"], "--sizes"),
    ("python -m benchmarks.checks", ["--trouble", "0"], "--trouble"),
    ("python -m benchmarks.checks", ["--trouble", "0.5"], "--trouble"),
    ("python -m benchmarks.reports", ["--users", "0"], "--users"),
]


@pytest.mark.parametrize(("prog", "argv", "named"), BAD_SIZES)
def test_a_nonsense_size_is_a_one_line_usage_error(prog, argv, named, capsys):
    with pytest.raises(SystemExit) as exit_:
        COMMANDS[prog](argv)

    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert lines[0].startswith(f"usage: {prog} ")
    errors = [line for line in lines if "error" in line]
    assert errors == [lines[-1]], err
    assert lines[-1].startswith(f"{prog}: error: ")
    assert named in lines[-1]


class ParsedArguments(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


def parser_of(command: Callable[[list[str] | None], None], monkeypatch: pytest.MonkeyPatch) -> Any:
    """The ArgumentParser a command builds, caught as it starts parsing (so nothing runs)."""

    def catch(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        raise ParsedArguments(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", catch)
    with pytest.raises(ParsedArguments) as caught:
        command([])
    return caught.value.parser


@pytest.mark.parametrize("prog", sorted(COMMANDS))
def test_every_option_is_documented_and_the_usage_names_the_command(prog, monkeypatch):
    parser = parser_of(COMMANDS[prog], monkeypatch)

    assert parser.prog == prog
    undocumented = [action.dest for action in parser._actions if not action.help]
    assert undocumented == []


def synopsis_values(prog: str, description: str) -> list[tuple[str, str]]:
    """The `[--option VALUE]` pairs of the description's synopsis lines (those starting with the command), less
    the placeholders (URI, PATH: upper case)."""
    pairs = []
    for line in description.splitlines():
        if line.strip().startswith(prog + " "):
            pairs += [(o, v) for o, v in re.findall(r"\[(--[a-z-]+) ([^\]\s]+)\]", line) if not v.isupper()]
    return pairs


def shown(default: Any) -> str:
    return ",".join(map(str, default)) if isinstance(default, list | tuple) else f"{default}"


@pytest.mark.parametrize("prog", sorted(COMMANDS))
def test_the_synopsis_shows_each_option_s_default(prog, monkeypatch):
    """`./dev lifecycle --help` said `[--bottles 24]` in its synopsis and 16 as the default."""
    parser = parser_of(COMMANDS[prog], monkeypatch)
    defaults = {option: action.default for action in parser._actions for option in action.option_strings}

    for option, value in synopsis_values(prog, parser.description or ""):
        default = defaults[option]
        if default is None:  # worked out from other options (its help says how)
            continue
        same = float(value) == default if isinstance(default, float) else value == shown(default)
        assert same, f"{prog}: the synopsis shows [{option} {value}], the default is {default}"


def run_dev(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """The script alone in an empty directory: whatever it would install would show up there."""
    script = tmp_path / "dev"
    shutil.copy2(ROOT / "dev", script)
    return subprocess.run([script, *argv], check=False, capture_output=True, text=True, timeout=30)


def test_an_unknown_command_is_named_then_the_usage_shown_and_nothing_installed(tmp_path):
    done = run_dev(tmp_path, "bogus")

    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert lines[0] == "./dev: unknown command 'bogus'"
    assert any(line.strip().startswith("./dev simulate") for line in lines[1:])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dev"]


@pytest.mark.parametrize("argv", [[], ["help"], ["--help"]])
def test_help_prints_the_usage_and_succeeds(tmp_path, argv):
    done = run_dev(tmp_path, *argv)

    assert done.returncode == 0
    assert done.stderr == ""
    commands = [line.split()[1] for line in done.stdout.splitlines() if line.strip().startswith("./dev ")]
    assert commands == [
        "simulate",
        "lifecycle",
        "test",
        "test-clocks",
        "serve",
        "local-settings",
        "store",
        "archive",
        "setup-store",
        "bench",
        "mutate",
        "help",
    ]


@pytest.mark.parametrize("prog", sorted(prog for prog in COMMANDS if prog.startswith("./dev ")))
def test_a_commands_help_shows_it_run_the_way_its_usage_names_it(prog, monkeypatch):
    """`./dev setup-store --help` showed `python -m shared.store.setup` in its examples."""
    shown = parser_of(COMMANDS[prog], monkeypatch).format_help()

    examples = [line.strip() for line in shown.splitlines() if line.strip().startswith(("./dev ", "python -m "))]
    assert examples
    assert [line for line in examples if not line.startswith(f"{prog} ")] == []


def dev_with_a_recording_venv(tmp_path: Path) -> Path:
    """The script in a directory of its own with the files it reads (requirements, pyproject.toml, the npm lock
    file), no node_modules, and a .venv whose `python`, `mutmut`, `ruff` and `mypy` and an `npm` on PATH only write
    their command lines to `calls` (and pip's first line of output as pip would): what the script runs and installs,
    without running or installing anything. The script's path."""
    read = ("dev", "requirements.txt", "requirements-dev.txt", "pyproject.toml", "package.json", "package-lock.json")
    for name in read:
        shutil.copy2(ROOT / name, tmp_path / name)
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / "fakes").mkdir()
    recorder = (
        "#!/bin/sh\n"
        f'echo "$(basename "$0") $*" >> "{tmp_path}/calls"\n'
        'case "$*" in "-m pip install"*) echo "Collecting pymongo (from -r requirements-dev.txt)" ;; esac\n'
    )
    fakes = ("python", "mutmut", "ruff", "mypy")
    for fake in [*(tmp_path / ".venv/bin" / name for name in fakes), tmp_path / "fakes/npm"]:
        fake.write_text(recorder)
        fake.chmod(0o755)
    return tmp_path / "dev"


def run_recorded(script: Path, *argv: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """`script ARGV` with the recording npm first on PATH; what it did, and the commands it ran."""
    path = f"{script.parent / 'fakes'}:{os.environ['PATH']}"
    environ = {**os.environ, "PATH": path}
    environ.pop("PYTHON", None)  # another interpreter named there would have the script make the fake venv anew
    done = subprocess.run([script, *argv], check=False, capture_output=True, text=True, timeout=30, env=environ)
    calls = script.parent / "calls"
    return done, calls.read_text().splitlines() if calls.exists() else []


def test_the_first_run_shows_pips_progress_on_stderr(tmp_path):
    """The first `./dev` installed for minutes under `pip --quiet`, saying nothing."""
    done, calls = run_recorded(dev_with_a_recording_venv(tmp_path), "setup-store", "--check-deploy")

    [install] = [call for call in calls if call.startswith("python -m pip install")]
    assert not {"-q", "--quiet"} & set(install.split())
    assert "Collecting pymongo" in done.stderr
    assert "Collecting" not in done.stdout
    assert calls[-1] == "python -m tools.command ./dev setup-store shared.store.setup_command --check-deploy"


@pytest.mark.parametrize("argv", [["--help"], ["-h"], ["--only", "year-end", "--help"]])
def test_test_clocks_help_installs_no_node_modules(tmp_path, argv):
    done, calls = run_recorded(dev_with_a_recording_venv(tmp_path), "test-clocks", *argv)

    assert done.returncode == 0, done.stderr
    assert [call for call in calls if call.startswith("npm")] == []
    assert calls[-1] == f"python -m tools.clock_matrix {' '.join(argv)}"


@pytest.mark.parametrize("argv", [["--list"], ["--only", "year-end", "--list"]])
def test_test_clocks_list_installs_nothing(tmp_path, argv):
    done, calls = run_recorded(dev_with_a_recording_venv(tmp_path), "test-clocks", *argv)

    assert done.returncode == 0, done.stderr
    assert calls == [f"python -m tools.clock_matrix {' '.join(argv)}"]  # no pip, no npm


@pytest.mark.parametrize("argv", [["--help"], ["-h"], ["tests/reports", "--help"]])
def test_test_help_shows_the_usage_at_once_and_runs_nothing(tmp_path, argv):
    """`./dev test --help` ran ruff, the formatter check and mypy (~50 s), and installed, before pytest's help."""
    began = time.monotonic()
    done, calls = run_recorded(dev_with_a_recording_venv(tmp_path), "test", *argv)

    assert time.monotonic() - began < 5  # a shell script printing its usage; generous for a busy machine
    assert done.returncode == 0, done.stderr
    assert calls == []
    assert done.stdout.startswith("usage: ./dev test [PYTEST_ARGS ...]\n")
    assert "--record-clock-readers" in done.stdout
    assert ".venv/bin/python -m pytest --help" in done.stdout  # where pytest's own options are


def test_test_lints_then_runs_the_suite_on_a_worker_a_core(tmp_path):
    done, calls = run_recorded(dev_with_a_recording_venv(tmp_path), "test", "-x")

    assert done.returncode == 0, done.stderr
    ran = [call for call in calls if not call.startswith(("python -m pip", "python -c", "npm"))]  # the venv's checks
    assert ran == ["ruff check .", "ruff format --check .", "mypy .", "python -m pytest -n auto --dist worksteal -x"]


def test_test_clocks_installs_azurite_for_a_run(tmp_path):
    _, calls = run_recorded(dev_with_a_recording_venv(tmp_path), "test-clocks", "--only", "year-end", "--", "-h")

    assert "npm ci --no-audit --no-fund --loglevel=error" in calls


def mutation_cores() -> list[str]:
    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]["only_mutate"]
    return [path.removeprefix("shared/").removesuffix(".py").replace("/", ".") for path in listed]


@pytest.mark.parametrize("argv", [["--help"], ["-h"]])
def test_mutate_help_lists_the_cores_and_succeeds_running_nothing(tmp_path, argv):
    done, calls = run_recorded(dev_with_a_recording_venv(tmp_path), "mutate", *argv)

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: ./dev mutate [MODULE]\n")
    listed = [line.strip() for line in done.stdout.split("only_mutate), by its dotted path under shared/:")[1].split()]
    assert listed == mutation_cores()
    assert "reports.tally" in listed
    assert calls == []


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (
            ["nosuch.module"],
            "'nosuch.module' is not a core: MODULE is one of bottles.provisioning devices.heartbeat_document reports.",
        ),
        (["reports"], "'reports' is not a core"),
        (["shared.reports.tally"], "'shared.reports.tally' is not a core"),
        (["reports.tally", "reports.reading"], "one MODULE at most, not 2: reports.tally reports.reading"),
        (["--max-children", "8"], "one MODULE at most, not 2"),
        (["-x"], "no option -x (only -h, --help)"),
    ],
)
def test_mutate_refuses_what_is_not_one_core_before_running_anything(tmp_path, argv, problem):
    """`./dev mutate nosuch.module` started a run of every mutant: mutmut takes a name matching none for all."""
    done, calls = run_recorded(dev_with_a_recording_venv(tmp_path), "mutate", *argv)

    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines()[0] == "usage: ./dev mutate [MODULE]"
    assert done.stderr.splitlines()[1].startswith(f"./dev mutate: error: {problem}")
    assert len(done.stderr.splitlines()) == 2
    assert calls == []


@pytest.mark.parametrize(("argv", "mutants"), [(["reports.tally"], ["shared.reports.tally.*"]), ([], [])])
def test_mutate_runs_mutmut_on_a_core_or_on_all(tmp_path, argv, mutants):
    done, calls = run_recorded(dev_with_a_recording_venv(tmp_path), "mutate", *argv)

    assert done.returncode == 0, done.stderr
    assert calls[-1] == " ".join(["mutmut run --max-children 2", *mutants])


def test_mutate_traces_every_test_anew_once_the_code_or_the_tests_changed_since_the_record(tmp_path):
    """mutmut extends its record of which test reaches which function only by tests it has not seen: a test or a
    function changed since kept what it reached before, and a mutant its tests now kill was reported as surviving."""
    script = dev_with_a_recording_venv(tmp_path)
    record = tmp_path / "mutants" / "mutmut-stats.json"
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_one.py").write_text("def test_one():\n    pass\n")
    record.parent.mkdir()
    record.write_text("{}")

    run_recorded(script, "mutate", "reports.tally")  # a record of unknown age: made anew
    assert not record.exists()
    record.write_text("{}")  # as mutmut's run leaves it
    done, _ = run_recorded(script, "mutate", "reports.tally")  # nothing changed since
    assert done.returncode == 0, done.stderr
    assert record.exists()
    (tmp_path / "tests" / "test_one.py").write_text("def test_one():\n    assert True\n")
    done, calls = run_recorded(script, "mutate", "reports.tally")

    assert not record.exists()
    assert "tracing every test anew" in done.stderr
    assert calls[-1] == "mutmut run --max-children 2 shared.reports.tally.*"


# --- no tracebacks: what the user got wrong, in one line ------------------------------------------


@pytest.fixture
def quick_store_timeouts(monkeypatch):
    """An unreachable store is known in 0.2 s and not retried, instead of 3 s a try."""
    monkeypatch.setenv("STORE_SERVER_SELECTION_TIMEOUT_MS", "200")
    monkeypatch.setenv("STORE_MAX_RETRIES", "0")
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A loopback port bound but not listening: a connection to it is refused for as long as the test runs."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


@pytest.fixture
def ports(refused_port: int) -> Iterator[dict[str, int]]:
    """`refused` (see refused_port) and `in_use`, a port something else listens on."""
    with socket.create_server(("127.0.0.1", 0)) as listening:
        yield {"refused": refused_port, "in_use": listening.getsockname()[1]}


def one_line_error(command: Callable[[list[str] | None], None], argv: list[str], capsys: Any) -> str:
    """Run a command expecting it to fail with exit 2 and a single line on stderr; that line."""
    with pytest.raises(SystemExit) as exit_:
        command(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


REBUILD_RANGE = ["--all", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-02T00:00:00Z"]
NOT_A_URI = "not a MongoDB connection string as pymongo reads it:"

STORE_ERRORS = [
    (
        setup_command.main,
        ["--uri", "notauri"],
        f"./dev setup-store: error: --uri: {NOT_A_URI} Invalid URI scheme",
    ),
    (
        setup_command.main,
        ["--uri", "mongodb://"],
        "./dev setup-store: error: --uri: not a MongoDB connection string as pymongo reads it: "
        "Must provide at least one hostname or IP",
    ),
    (
        setup_command.main,
        ["--uri", "mongodb://h:99999/"],
        "./dev setup-store: error: --uri: not a MongoDB connection string as pymongo reads it: "
        "Port must be an integer between 0 and 65535",
    ),
    (
        setup_command.main,
        ["--uri", "mongodb://127.0.0.1:{refused}/"],
        "./dev setup-store: error: cannot reach the database of --uri: "
        "127.0.0.1:{refused}: [Errno 111] Connection refused",
    ),
    (
        setup_command.main,
        ["--uri", "mongodb://127.0.0.1:{refused}/", "--database", "a/b"],
        "./dev setup-store: error: --database 'a/b': database names cannot contain the character '/'",
    ),
    (
        rebuild.main,
        [*REBUILD_RANGE, "--uri", "mongodb://127.0.0.1:{refused}/"],
        "python -m shared.reports.rebuild: error: the database of --uri is unavailable: "
        "127.0.0.1:{refused}: [Errno 111] Connection refused",
    ),
    (
        rebuild.main,
        [*REBUILD_RANGE, "--uri", "mongodb://admin:s3cr:et@h/"],
        "python -m shared.reports.rebuild: error: --uri: not a MongoDB connection string as pymongo reads it: "
        "Username and password must be escaped according to RFC 3986, use urllib.parse.quote_plus",
    ),
    (
        simulate.main,
        ["--mongodb-uri", "notauri", "--bottles", "2", "--users", "1"],
        f"./dev simulate: error: --mongodb-uri: {NOT_A_URI} Invalid URI scheme",
    ),
    (
        simulate.main,
        ["--mongodb-uri", "mongodb://127.0.0.1:{refused}/", "--bottles", "2", "--users", "1"],
        "./dev simulate: error: cannot reach the database of --mongodb-uri: "
        "127.0.0.1:{refused}: [Errno 111] Connection refused",
    ),
    (
        simulate.main,
        ["--http", "http://127.0.0.1:{refused}", "--bottles", "2", "--users", "1"],
        "./dev simulate: error: --http http://127.0.0.1:{refused}: PUT /api/bottles/bottle-0000: Connection refused",
    ),
    (
        serve.main,
        ["--port", "{in_use}"],
        "./dev serve: error: cannot listen on 127.0.0.1:{in_use}: Address already in use "
        "(--port {in_use}: pick another, or 0 for any free one)",
    ),
    (
        serve.main,
        ["--port", "0", "--host", "no-such-host.invalid"],
        "./dev serve: error: --host no-such-host.invalid: ",
    ),
    (
        serve.main,
        ["--port", "0", "--mongodb-uri", "mongodb:///"],
        "./dev serve: error: --mongodb-uri: not a MongoDB connection string",
    ),
]


@pytest.mark.usefixtures("quick_store_timeouts")
@pytest.mark.parametrize(
    ("command", "argv", "expected"), STORE_ERRORS, ids=[f"{e.split(':')[0]} {' '.join(a)}" for _, a, e in STORE_ERRORS]
)
def test_an_unusable_store_address_or_port_is_one_line_naming_it(command, argv, expected, capsys, ports):
    line = one_line_error(command, [arg.format(**ports) for arg in argv], capsys)

    assert line.startswith(expected.format(**ports))


def test_a_data_dir_that_is_a_file_is_one_line_naming_it(tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.write_text("")

    line = one_line_error(serve.main, ["--port", "0", "--data-dir", str(taken)], capsys)

    assert line == f"./dev serve: error: --data-dir {taken}: not a directory"


@pytest.mark.usefixtures("quick_store_timeouts")
@pytest.mark.parametrize(
    ("address", "expected"),
    [
        (
            "127.0.0.1:{refused}/",
            "cannot reach the database of --uri: 127.0.0.1:{refused}: [Errno 111] Connection refused",
        ),
        ("127.0.0.1:99999/", f"--uri: {NOT_A_URI} Port must be an integer"),
        ("127.0.0.1/?tls=maybe", f"--uri: {NOT_A_URI} The value of tls must be 'true' or 'false'"),
    ],
)
def test_the_connection_string_is_never_printed(address, expected, capsys, refused_port):
    secret = f"mongodb://admin:s3cret-password@{address.format(refused=refused_port)}"
    line = one_line_error(setup_command.main, ["--uri", secret], capsys)

    assert "s3cret" not in line
    assert line.startswith(f"./dev setup-store: error: {expected.format(refused=refused_port)}")


BAD_VALUES = [
    ("./dev simulate", ["--http", "notaurl"], "--http: 'notaurl' is not an http:// or https:// URL"),
    ("./dev simulate", ["--http", "http://127.0.0.1:99999"], "--http"),
    ("./dev simulate", ["--http", "ftp://127.0.0.1/"], "--http"),
    ("./dev simulate", ["--chart", "{file}/chart.png"], "--chart: {file}/chart.png: {file} is not a directory"),
    ("./dev simulate", ["--chart", "{dir}"], "--chart: {dir} is a directory"),
    ("./dev simulate", ["--chart", "{dir}/none/chart.png"], "--chart: {dir}/none/chart.png: no directory {dir}/none"),
    ("./dev lifecycle", ["--chart", "{dir}/none/x.png"], "--chart: {dir}/none/x.png: no directory {dir}/none"),
    ("./dev lifecycle", ["--chart", "{file}/x.png"], "--chart: {file}/x.png: {file} is not a directory"),
]


@pytest.fixture
def no_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that starts fails the test at once (a value accepted by mistake must not start a long run)."""

    def ran(**_: Any) -> None:
        raise AssertionError("the run started")

    runs = ((in_process, "run_simulation"), (over_http, "run_over_http"), (lifecycle_run, "run_lifecycle"))
    for module, name in runs:  # where the commands import them from once their arguments are parsed
        monkeypatch.setattr(module, name, ran)


@pytest.mark.usefixtures("no_run")
@pytest.mark.parametrize(("prog", "argv", "named"), BAD_VALUES, ids=[" ".join(a) for _, a, _ in BAD_VALUES])
def test_a_bad_value_is_a_usage_error_before_anything_runs(prog, argv, named, capsys, tmp_path):
    (tmp_path / "file").write_text("")
    paths = {"file": tmp_path / "file", "dir": tmp_path}
    with pytest.raises(SystemExit) as exit_:
        COMMANDS[prog]([arg.format(**paths) for arg in argv])

    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(f"{prog}: error: argument {named.format(**paths)}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # refused before anything ran: nothing made


@pytest.mark.usefixtures("no_run")
@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere: no directory can refuse it")
@pytest.mark.parametrize("prog", ["./dev simulate", "./dev lifecycle"])
def test_a_chart_in_a_directory_that_cannot_be_written_is_refused_before_the_run(prog, capsys, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    with pytest.raises(SystemExit) as exit_:
        COMMANDS[prog](["--chart", str(locked / "x.png")])

    assert exit_.value.code == 2
    assert f"--chart: {locked / 'x.png'} cannot be written (permission denied)" in capsys.readouterr().err


# --- Ctrl-C -----------------------------------------------------------------------------------------


def start_dev(*argv: str) -> subprocess.Popen[str]:
    """`./dev COMMAND ...` in its own process group, as a terminal runs it (Ctrl-C reaches the whole group), with
    Ctrl-C's default action even when the suite itself was started in the background of a script: a shell without
    job control starts those with SIGINT ignored, and an ignored signal stays ignored across fork and exec (a
    handled one is reset to its default)."""
    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(
            [ROOT / "dev", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def interrupt(process: subprocess.Popen[str]) -> tuple[int, str]:
    """Ctrl-C to the process group; its exit status and stderr."""
    os.killpg(process.pid, signal.SIGINT)
    try:
        _, err = process.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise
    return process.returncode, err


@pytest.mark.integration
def test_ctrl_c_stops_the_server_in_one_line_with_exit_130():
    process = start_dev("serve", "--port", "0", "--no-timers")
    assert process.stderr is not None
    seen = []
    for line in process.stderr:  # until it serves (the embedded store's child process is running by then)
        seen.append(line)
        if "serving http://" in line or len(seen) > 50:
            break

    code, err = interrupt(process)

    assert code == 130, "".join(seen) + err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == "./dev serve: interrupted"


def test_ctrl_c_stops_a_simulation_waiting_on_a_server_in_one_line_with_exit_130():
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        silent.settimeout(30)
        process = start_dev("simulate", "--http", f"http://127.0.0.1:{silent.getsockname()[1]}")
        connection, _ = silent.accept()  # the simulation is waiting for its first answer
        with connection:
            code, err = interrupt(process)

    assert code == 130, err
    assert err.strip().splitlines() == ["./dev simulate: interrupted"]


def test_ctrl_c_handed_to_another_thread_still_stops_a_command_waiting_in_a_system_call(capsys):
    """The kernel gives a process's SIGINT to any one of its threads that does not block it (numpy's OpenBLAS
    pool in `./dev simulate --http`, say). The main thread, blocked in a socket read, is woken all the same:
    exit 130 at once, not when the read times out."""

    def wait_for_an_answer_that_never_comes() -> None:
        left, right = socket.socketpair()
        with left, right:
            left.settimeout(15)
            threading.Thread(target=ctrl_c_on_this_thread_in_a_moment).start()
            left.recv(1)

    with ctrl_c_default_action():
        started = time.monotonic()
        with pytest.raises(SystemExit) as stopped:
            run_command("./dev simulate", wait_for_an_answer_that_never_comes)
        waited = time.monotonic() - started

    assert stopped.value.code == 130
    assert waited < 5
    assert capsys.readouterr().err.strip() == "./dev simulate: interrupted"


def ctrl_c_on_this_thread_in_a_moment() -> None:
    time.sleep(0.3)  # the main thread is in its read by then
    signal.pthread_kill(threading.get_ident(), signal.SIGINT)


@contextlib.contextmanager
def ctrl_c_default_action() -> Iterator[None]:
    """Python's KeyboardInterrupt for SIGINT within the block, even where the suite runs with it ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize(
    ("prog", "argv"),
    [
        ("./dev setup-store", ["--uri", "mongodb://127.0.0.1:1/"]),
        ("python -m shared.reports.rebuild", [*REBUILD_RANGE, "--uri", "mongodb://127.0.0.1:1/"]),
        ("./dev simulate", ["--bottles", "2", "--users", "1"]),
        ("./dev serve", ["--port", "0"]),
    ],
)
def test_an_invalid_app_setting_is_one_line_naming_it(prog, argv, capsys, monkeypatch):
    monkeypatch.setenv("STORE_MAX_RETRIES", "many")
    get_settings.cache_clear()
    try:
        line = one_line_error(COMMANDS[prog], argv, capsys)
    finally:
        monkeypatch.delenv("STORE_MAX_RETRIES")
        get_settings.cache_clear()

    assert line.startswith(f"{prog}: error: invalid app settings: STORE_MAX_RETRIES: ")
    assert "many" not in line


def test_a_store_opened_without_naming_its_uri_is_one_line_too(capsys):
    """As `./dev bench --mongodb-uri` (the calibration) opens its own client."""

    def calibrate() -> None:
        raise ServerSelectionTimeoutError(
            "127.0.0.1:9: [Errno 111] Connection refused (configured timeouts: socketTimeoutMS: 20000.0ms), "
            "Timeout: 30s, Topology Description: <TopologyDescription ...>"
        )

    with pytest.raises(SystemExit) as exit_:
        run_command("./dev bench", calibrate)
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        "./dev bench: error: cannot reach the database: 127.0.0.1:9: [Errno 111] Connection refused\n"
    )


def test_a_file_that_cannot_be_written_is_one_line_and_a_bug_keeps_its_traceback(capsys):
    def write() -> None:
        raise PermissionError(13, "Permission denied", "benchmarks/RESULTS.md")

    def bug() -> None:
        raise ConnectionResetError(104, "Connection reset by peer")  # no file: not the user's to fix

    with pytest.raises(SystemExit) as exit_:
        run_command("./dev bench", write)
    assert exit_.value.code == 2
    assert capsys.readouterr().err == "./dev bench: error: benchmarks/RESULTS.md: Permission denied\n"
    with pytest.raises(ConnectionResetError):
        run_command("./dev bench", bug)
