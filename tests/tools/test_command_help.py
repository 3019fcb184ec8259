"""Help that only helps: `./dev COMMAND --help` and the `python -m` commands' `--help` print the command's usage and
do nothing else: `dev` installs nothing, and the command imports none of the libraries its run needs (those imports
took 1 to 2.5 s of CPU before argparse saw `--help`). Each help runs as a user meets it, in a fresh interpreter, and
what it imported is read from the interpreter's own log of its imports (`-X importtime`): the test does not depend
on how fast or busy the machine is."""

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from benchmarks import checks as checks_benchmark
from benchmarks import ingestion as ingestion_benchmark
from benchmarks import reports as reports_benchmark
from benchmarks import suite_command
from shared.reports import rebuild
from shared.store import setup_command
from tools import archive_history, lifecycle, local_settings, serve, simulate, store_server

ROOT = Path(__file__).resolve().parents[2]

# What a run imports and a usage must not: the store's driver, the settings' validation, the archive's columns, the
# charts, the Functions runtime and the Azure SDKs, the embedded stores.
HEAVY = frozenset(
    {
        "pymongo",
        "pydantic",
        "pydantic_settings",
        "pyarrow",
        "numpy",
        "matplotlib",
        "azure",
        "azure_functions_runtime",
        "secantus",
        "duckdb",
    }
)

COMMANDS: dict[str, Callable[[list[str] | None], Any]] = {
    "./dev simulate": simulate.main,
    "./dev lifecycle": lifecycle.main,
    "./dev serve": serve.main,
    "./dev local-settings": local_settings.main,
    "./dev store": store_server.main,
    "./dev archive": archive_history.main,
    "./dev setup-store": setup_command.main,
    "./dev bench": suite_command.main,
    "python -m benchmarks.ingestion": ingestion_benchmark.main,
    "python -m benchmarks.checks": checks_benchmark.main,
    "python -m benchmarks.reports": reports_benchmark.main,
    "python -m shared.reports.rebuild": rebuild.main,
}

WIDTH = "100"  # the terminal's columns, for argparse's wrapping: the same in the test and in the command


class ParsedArguments(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


def usage_of(command: Callable[[list[str] | None], Any], monkeypatch: pytest.MonkeyPatch) -> str:
    """What `--help` should print: the command's parser's help, the parser caught as parsing starts."""

    def catch(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        raise ParsedArguments(self)

    with monkeypatch.context() as patched:
        patched.setenv("COLUMNS", WIDTH)
        patched.setattr(argparse.ArgumentParser, "parse_args", catch)
        with pytest.raises(ParsedArguments) as caught:
            command([])
        return caught.value.parser.format_help()


def python_dev_runs(tmp_path: Path, command: str, *argv: str) -> list[list[str]]:
    """The Python command lines `./dev COMMAND ARGV` runs, run by a copy of the script beside the files it reads and
    a .venv whose requirements were never installed (no stamp: any other command would install them first), whose
    `python` only records its arguments."""
    for name in ("dev", "requirements.txt", "requirements-dev.txt", "pyproject.toml", "package.json"):
        shutil.copy2(ROOT / name, tmp_path / name)
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    python = tmp_path / ".venv" / "bin" / "python"
    python.write_text(f"#!/bin/sh\nprintf '%s\\037' \"$@\" >> '{tmp_path}/calls'\necho >> '{tmp_path}/calls'\n")
    python.chmod(0o755)
    done = subprocess.run(
        [tmp_path / "dev", command, *argv], check=False, capture_output=True, text=True, timeout=30, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # not a word of installing
    calls = tmp_path / "calls"
    return [line.rstrip("\x1f").split("\x1f") for line in calls.read_text().splitlines()] if calls.exists() else []


def run_with_import_log(python_argv: list[str]) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """`python PYTHON_ARGV` from the repository, as the command's user runs it; what it did, and the top-level
    packages it imported (read from `-X importtime`'s log on stderr)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *python_argv],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": WIDTH},
    )
    imported = {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    return done, imported


@pytest.mark.parametrize("prog", list(COMMANDS))
def test_a_commands_help_prints_its_usage_importing_none_of_what_its_run_needs(prog, monkeypatch, tmp_path):
    if prog.startswith("./dev "):
        [python_argv] = python_dev_runs(tmp_path, prog.removeprefix("./dev "), "--help")  # one run, no install
    else:
        python_argv = ["-m", prog.removeprefix("python -m "), "--help"]

    done, imported = run_with_import_log(python_argv)

    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == usage_of(COMMANDS[prog], monkeypatch)
    assert imported & HEAVY == set(), f"{prog} --help imported {sorted(imported & HEAVY)}"


def test_the_import_log_names_what_a_run_imports():
    """The test above cannot pass by reading nothing: the log of an interpreter importing the settings names
    pydantic."""
    done, imported = run_with_import_log(["-c", "import shared.settings"])

    assert done.returncode == 0, done.stderr[-2000:]
    assert {"shared", "pydantic", "pydantic_settings", "pymongo"} <= imported
