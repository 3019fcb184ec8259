"""The developer commands as a newcomer meets them: `./dev` names an unknown command and shows its usage, and
every command answers nonsense sizes with a one-line usage error (exit 2), never a traceback, and documents
every option."""

import argparse
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from benchmarks import checks as checks_benchmark
from benchmarks import ingestion as ingestion_benchmark
from benchmarks import reports as reports_benchmark
from benchmarks import suite
from shared.store import setup
from tools import serve, simulate

ROOT = Path(__file__).resolve().parent.parent

COMMANDS: dict[str, Callable[[list[str] | None], None]] = {
    "./dev simulate": simulate.main,
    "./dev serve": serve.main,
    "./dev bench": suite.main,
    "./dev setup-store": setup.main,
    "python -m benchmarks.ingestion": ingestion_benchmark.main,
    "python -m benchmarks.checks": checks_benchmark.main,
    "python -m benchmarks.reports": reports_benchmark.main,
}

BAD_SIZES = [
    ("./dev simulate", ["--bottles", "0"], "--bottles"),
    ("./dev simulate", ["--bottles", "-5"], "--bottles"),
    ("./dev simulate", ["--bottles", "many"], "--bottles"),
    ("./dev simulate", ["--users", "0"], "--users"),
    ("./dev simulate", ["--users", "-1"], "--users"),
    ("./dev simulate", ["--bottles", "10", "--users", "40"], "--users 40 is more than --bottles 10"),
    ("./dev simulate", ["--users", "31", "--bottles", "30"], "--users 31 is more than --bottles 30"),
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
    assert commands == ["simulate", "test", "test-clocks", "serve", "setup-store", "bench", "help"]
