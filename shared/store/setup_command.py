"""Create every collection and index the app needs (sharded through Cosmos' `customAction` on Cosmos DB), replacing
an index whose keys changed only once its successor is built; idempotent. And check what a deployment of infra/
would change. Why and how: docs/operations.md, "Changing an index's keys"; usage: docs/local-development.md.

    ./dev setup-store [--uri URI] [--database NAME]   # by default MONGODB_CONNECTION_STRING / MONGODB_DATABASE
    ./dev setup-store --backfill-buckets              # once, for data stored before documents carried `bucket`
    ./dev setup-store --check-deploy                  # before deploying infra/: would it change an index? (exit 1)
"""

# The command apart from the setup (shared/store/setup.py): this module imports only argparse and
# shared.store.command_line, and the setup (pymongo, the settings' pydantic: a second or more of imports) once the
# arguments are parsed, so that `--help` and a usage error come at once.

import argparse
from typing import TYPE_CHECKING, Any

from shared.store.command_line import add_store_arguments, command_line_database, run_command

if TYPE_CHECKING:
    from pymongo.database import Database


def main(argv: list[str] | None = None) -> None:
    run_command("./dev setup-store", lambda: _setup_store(argv))


def _setup_store(argv: list[str] | None) -> None:
    parser = argparse.ArgumentParser(
        prog="./dev setup-store", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_store_arguments(parser)
    parser.add_argument(
        "--backfill-buckets",
        action="store_true",
        help="also give documents stored before they carried `bucket` their bucket (scans each collection once)",
    )
    parser.add_argument(
        "--check-deploy",
        action="store_true",
        help="change nothing: say whether deploying infra/ would drop or build an index on this account (exit 1 if "
        "so: run the setup first, then deploy)",
    )
    args = parser.parse_args(argv)
    from shared.settings import get_settings  # noqa: PLC0415 - the setup, once the arguments are parsed
    from shared.store import cosmos  # noqa: PLC0415
    from shared.store.retries import RetryPolicy  # noqa: PLC0415
    from shared.store.setup import IndexBuildPending, backfill_buckets, ensure_store  # noqa: PLC0415

    with command_line_database(parser, args) as (db, uri):
        if args.check_deploy:
            _check_deploy(parser, db, on_cosmos=cosmos.is_cosmos_uri(uri))
            return
        try:
            lines = ensure_store(db, get_settings(), on_cosmos=cosmos.is_cosmos_uri(uri))
        except IndexBuildPending as pending:
            parser.exit(1, f"{parser.prog}: {pending}\n")
        for line in lines:
            print(line)
        if args.backfill_buckets:
            for name, count in backfill_buckets(db, RetryPolicy.from_settings(get_settings())).items():
                print(f"{name}: {count} documents given their bucket")


def _check_deploy(parser: argparse.ArgumentParser, db: "Database[Any]", *, on_cosmos: bool) -> None:
    """Print what a deployment of infra/ would do to the account's indexes; exit 1 if anything."""
    from shared.settings import get_settings  # noqa: PLC0415 - imported by _setup_store already
    from shared.store.setup import deploy_problems  # noqa: PLC0415

    problems = deploy_problems(db, get_settings(), on_cosmos=on_cosmos)
    if not on_cosmos:
        print("not a Cosmos DB account: compared with the indexes declared for any other MongoDB")
    for problem in problems:
        print(problem)
    if problems:
        parser.exit(
            1,
            f"{parser.prog}: refusing: deploying infra/ now would change the indexes above in place, failing the "
            f"sorts that need them until Cosmos DB has rebuilt them. Run `{parser.prog}` against this account first "
            "(it builds new keys beside the old and drops the old once built), then check again and deploy\n",
        )
    print("safe to deploy infra/: every collection has exactly the indexes it declares, built")


if __name__ == "__main__":
    main()
