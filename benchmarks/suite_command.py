"""Every benchmark in one run: ingestion, the notification checks, the report consumer, and what the app's work
costs on Cosmos DB in request units (benchmarks/costs.py, by the rules of tools/costs/rules.py), each beside
its same-run baseline (the seeds' approach) with the ratio; then the design-scale bill (benchmarks/design_scale.py)
from those costs. Prints the tables; a full run writes them, with the commit and the machine, to
benchmarks/RESULTS.md so results can be compared across commits, and its summary, scale-out table and
design-scale table into docs/benchmarks.md and docs/costs.md. A quick run writes nowhere unless given --output
(RESULTS.md and the docs hold the last full run's).

    ./dev bench [--quick] [--output PATH]
    ./dev bench --mongodb-uri "<Cosmos DB connection string>"   the model beside a real account's charges

Each benchmark says on stderr when it starts and ends, and every 10 seconds that it is still running; its tables
are printed as it ends. If one fails, the summary of those that finished is printed, and the error's one line
names the one that failed (exit 2; a bug keeps its traceback); nothing is written. The benchmarks' own store
clients wait as long as the app's settings allow (benchmarks/harness.py), so a loaded machine is slow, not down.
"""

# The command apart from the suite (benchmarks/suite.py): this module imports only the standard library, and the
# benchmarks (the app, the store, pymongo, pydantic: seconds of imports) once the arguments are parsed, so that
# `--help` and a usage error come at once.

import argparse
import sys
from pathlib import Path

QUICK_TAKES = "about 3 minutes on 2 idle cores, up to 9 when they are busy"  # measured; as docs/benchmarks.md says


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if any(arg.split("=")[0] == "--mongodb-uri" for arg in argv):
        from benchmarks import calibrate

        sys.exit(calibrate.main(argv))  # calibration on a real account (benchmarks/calibrate.py)
    parser = argparse.ArgumentParser(
        prog="./dev bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help=f"smaller fleets and streams ({QUICK_TAKES})")
    parser.add_argument(
        "--output",
        type=Path,
        help="where to write the results (default: benchmarks/RESULTS.md for a full run, nowhere for --quick)",
    )
    parser.add_argument(
        "--mongodb-uri",
        help="instead of the benchmarks, calibrate the cost model on an account (benchmarks/calibrate.py)",
    )
    args = parser.parse_args(argv)
    from benchmarks import suite

    output: Path | None = args.output if args.output is not None or args.quick else suite.RESULTS
    if output is not None and not output.parent.is_dir():
        parser.error(f"--output {output}: no directory {output.parent}")
    document, blocks = suite.run(args.quick)
    if output is None:
        print("\nquick run: nothing written (--output PATH to keep it)")
        return
    output.write_text(document)
    print(f"\nwritten to {output}")
    if not args.quick and output.resolve() == suite.RESULTS.resolve():
        suite.update_docs(blocks)
        print(
            f"summary and scale-out table written to {suite.SUMMARY_DOC}, design-scale table to {suite.TABLE_DOC}, its"
        )
        print(f"throughput to deploy to {suite.DEPLOYMENT_FILE}")


if __name__ == "__main__":
    main()
