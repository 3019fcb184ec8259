"""How `./dev` starts a Python command: `python -m tools.command PROG MODULE [args]` imports MODULE and runs its
`main(args)` under run_command, so that Ctrl-C is one line and exit 130 even during the imports (the app and its
libraries take seconds to import), for every command, the ones whose main() does not say so itself included.

MODULE imports only what its parser needs, and main imports the libraries of the run once the arguments are parsed
(inside run_command too): `--help` and a usage error come at once (tests/tools/test_command_help.py). This module
imports nothing heavy either (shared.store.command_line imports pymongo and the settings only when opening a
store)."""

import importlib
import sys

from shared.store.command_line import run_command


def main(argv: list[str]) -> None:
    prog, module, *args = argv

    def body() -> None:
        status = importlib.import_module(module).main(args)
        if status:  # a main that returns its exit status
            raise SystemExit(status)

    run_command(prog, body)


if __name__ == "__main__":
    main(sys.argv[1:])
