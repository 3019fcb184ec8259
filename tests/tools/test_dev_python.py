"""`./dev` and PYTHON: unset, any `.venv` of Python 3.13 is kept; set, `.venv` is PYTHON's own (the same version
of the same installation, as the interpreter reports them) or is made anew with it, and a PYTHON that is not a
working 3.13 is refused, never passed over. Run on a copy of the script with fake interpreters, so that nothing is
installed: each fake answers `-c` as the real interpreter does with the version and installation it was given,
makes a `.venv` of itself for `-m venv`, and only records anything else."""

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
READ = ("dev", "requirements.txt", "requirements-dev.txt", "pyproject.toml", "package.json", "package-lock.json")

FAKE_PYTHON = """#!/bin/sh
echo "$0 $*" >> "{calls}"
case "$1" in
  -c) exec "{real}" -c "import sys; sys.version_info = {version}; sys.base_prefix = '{prefix}'
$2" ;;
  -m) case "$2" in
        venv) mkdir -p "$3/bin" && cp "$0" "$3/bin/python" ;;
        pip) echo "Collecting pymongo (from -r requirements-dev.txt)" ;;
      esac ;;
esac
"""


def fake_python(checkout: Path, path: str, version: tuple[int, int, int], prefix: str) -> Path:
    """An interpreter at `path` in the checkout that says it is Python `version` of the installation at `prefix`,
    recording its commands in the checkout's `calls`."""
    fake = checkout / path
    fake.parent.mkdir(parents=True, exist_ok=True)
    calls = checkout / "calls"
    fake.write_text(FAKE_PYTHON.format(calls=calls, real=sys.executable, version=(*version, "final", 0), prefix=prefix))
    fake.chmod(0o755)
    return fake


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """The script and the files it reads, with a .venv of Python 3.13.1 from /opt/a whose packages are
    installed (its requirements stamp is current)."""
    for name in READ:
        shutil.copy2(ROOT / name, tmp_path / name)
    fake_python(tmp_path, ".venv/bin/python", (3, 13, 1), "/opt/a")
    requirements = (tmp_path / "requirements.txt").read_bytes() + (tmp_path / "requirements-dev.txt").read_bytes()
    (tmp_path / ".venv" / ".requirements.sha256").write_text(hashlib.sha256(requirements).hexdigest() + "\n")
    return tmp_path


def run_dev(checkout: Path, python: Path | None) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """`./dev setup-store --uri mongodb://unreached` (a command that runs on .venv; its `--help` needs none) with
    PYTHON set to `python` (or unset); what it did and the commands the fake
    interpreters were given (each path in the checkout relative to it, as the script names .venv's)."""
    environ = {name: value for name, value in os.environ.items() if name != "PYTHON"}
    if python is not None:
        environ["PYTHON"] = str(python)
    done = subprocess.run(
        [checkout / "dev", "setup-store", "--uri", "mongodb://unreached"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env=environ,
    )
    calls = checkout / "calls"
    return done, [
        call.removeprefix(f"{checkout}/") for call in calls.read_text().splitlines()
    ] if calls.exists() else []


def ran_the_command_with_the_venv(calls: list[str]) -> None:
    assert (
        calls[-1]
        == ".venv/bin/python -m tools.command ./dev setup-store shared.store.setup_command --uri mongodb://unreached"
    )


def test_without_python_set_a_venv_of_python_3_13_is_kept(checkout):
    done, calls = run_dev(checkout, None)

    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert not [call for call in calls if " -m venv " in call or " -m pip " in call]
    ran_the_command_with_the_venv(calls)


def test_a_venv_of_another_interpreter_than_python_s_is_made_anew_with_it(checkout):
    """PYTHON=/path/to/python3.13 was ignored whenever a .venv of any 3.13 existed."""
    python = fake_python(checkout, "other/bin/python3.13", (3, 13, 5), "/opt/b")

    done, calls = run_dev(checkout, python)

    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == (
        f"./dev: .venv is Python 3.13.1 in /opt/a, PYTHON={python} is Python 3.13.5 in /opt/b: making it anew"
    )
    assert lines[1] == f"./dev: creating .venv with {python}"
    assert lines[2].startswith("./dev: installing requirements-dev.txt into .venv (first run: ~760 MB")
    assert f"{python.relative_to(checkout)} -m venv .venv" in calls
    [install] = [call for call in calls if " -m pip install " in call]
    assert install.startswith(".venv/bin/python -m pip install ")
    ran_the_command_with_the_venv(calls)
    identity = subprocess.run(
        [checkout / ".venv" / "bin" / "python", "-c", "import sys; print(sys.version_info[:3], sys.base_prefix)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert identity.stdout.strip() == "(3, 13, 5) /opt/b"  # the .venv is now PYTHON's


def test_a_venv_of_python_s_own_interpreter_is_kept(checkout):
    python = fake_python(checkout, "same/bin/python3.13", (3, 13, 1), "/opt/a")

    done, calls = run_dev(checkout, python)

    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert not [call for call in calls if " -m venv " in call or " -m pip " in call]
    ran_the_command_with_the_venv(calls)


@pytest.mark.parametrize(("version", "reported"), [((3, 12, 7), "Python 3.12.7 in /opt/c"), (None, "it does not run")])
def test_a_python_that_is_not_a_working_3_13_is_refused_and_the_venv_left_alone(checkout, version, reported):
    """It was passed over: the command ran on the .venv there was, or on another interpreter ./dev found."""
    if version is None:
        python = checkout / "broken" / "python3.13"
        python.parent.mkdir()
        python.write_text("#!/bin/sh\nexit 127\n")
        python.chmod(0o755)
    else:
        python = fake_python(checkout, "old/bin/python3.12", version, "/opt/c")

    done, calls = run_dev(checkout, python)

    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"./dev: PYTHON={python} is not a working Python 3.13 ({reported}).",
        "./dev: point PYTHON at a python3.13, or unset it to let ./dev find one.",
    ]
    assert not [call for call in calls if " -m " in call]
    assert (checkout / ".venv" / ".requirements.sha256").exists()
