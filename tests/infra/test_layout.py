"""The shape of the code: `shared/` is packages by job over a few common modules, jobs never reach into each
other, nothing imports in a cycle (developer tools included), the developer code's layers (tools/, benchmarks/,
tests/) import only downwards, and no module uses another's private names. The tests mirror the code: no test
file at the top of tests/, and each package of tests/ has its counterpart in the code (tests/integration/ aside)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("function_app.py", "functions", "shared", "tools", "benchmarks")

# What each package of `shared/` may import besides the common modules (shared/*.py). At the bottom, what every
# job may use and that uses no job: the telemetry, the request parsing (api) and the device's own rules (its key, its
# times, its heartbeat document). Above them the store, the dose rules and the registry entries; a job uses those,
# never another job.
ALLOWED: dict[str, set[str]] = {
    "telemetry": set(),
    "api": set(),
    "devices": set(),
    "store": {"devices", "telemetry"},
    "doses": set(),
    "bottles": {"store", "doses", "api", "devices"},
    "ingestion": {"store", "doses", "bottles", "api", "devices"},
    # The silent check reads and marks the heartbeat document, typed as the devices define it.
    "notifications": {"store", "doses", "devices", "telemetry"},
    # The change feeds' machinery, below all of their consumers: partitions, leases, layouts, sources, the hourly
    # passes, the dispatcher and the worker's claim/checkpoint loop, and the ports a consumer plugs in by.
    "feeds": {"store", "devices", "telemetry"},
    # The feeds' consumers: the archive (its sweeps and files) and the reports (the aggregation and the tally) each
    # plug into the feed machinery and never import each other; the tally hands the archive its bottle-hours through
    # the machinery's port (shared/feeds/hand_off.py).
    "archive": {"store", "devices", "feeds", "telemetry"},
    "reports": {"store", "devices", "telemetry", "feeds"},
    # What plugs the consumers in: the one package that knows both.
    "consumers": {"feeds", "reports", "archive"},
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files() -> list[Path]:
    files: list[Path] = []
    for source in SOURCES:
        path = ROOT / source
        files += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return files


MODULES = {module_name(path): path for path in source_files()}


def imports_of(path: Path) -> set[str]:
    """Every project module `path` imports, at any depth of the file (functions and TYPE_CHECKING included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name in MODULES}


GRAPH = {name: imports_of(path) - {name} for name, path in MODULES.items()}


def test_nothing_imports_in_a_cycle():
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[str]] = []

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for target in sorted(GRAPH[name]):
            if state.get(target) == 1:
                cycles.append([*path[path.index(target) :], target] if target in path else [name, target])
            elif target not in state:
                visit(target, [*path, target])
        state[name] = 2

    for name in sorted(GRAPH):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def test_the_developer_tools_are_not_imported_by_the_deployed_code():
    deployed = [m for m in GRAPH if m.split(".")[0] in ("function_app", "functions", "shared")]
    leaks = {m: sorted(t for t in GRAPH[m] if t.split(".")[0] in ("tools", "benchmarks")) for m in deployed}
    assert {m: t for m, t in leaks.items() if t} == {}


# The developer code's layers, lowest first: each may import the ones before it, never one after it. The cost
# model, the cost meter and the sort rule are shared by all three, so they live in tools/ (tools/costs/,
# tools/sort_audit.py).
LAYERS = ("tools", "benchmarks", "tests")


def climbing_imports(path: Path) -> list[str]:
    """`file:line imports module` for each import in `path` (at any depth: functions and TYPE_CHECKING included,
    relative ones resolved, importlib.import_module of a literal too) of a layer above the file's own."""
    relative = path.relative_to(ROOT)
    layer = LAYERS.index(relative.parts[0])
    package = module_name(path).split(".")[: -1 if path.name != "__init__.py" else None]
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.stmt | ast.expr):
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            names = [".".join([*base, *([node.module] if node.module else [])])]
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) in ("importlib.import_module", "import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names = [node.args[0].value]
        found += [
            f"{relative}:{node.lineno} imports {name}" for name in names if name.split(".")[0] in LAYERS[layer + 1 :]
        ]
    return found


def test_no_import_climbs_from_tools_to_benchmarks_or_tests_nor_from_benchmarks_to_tests():
    files = [path for layer in LAYERS[:-1] for path in sorted(ROOT.joinpath(layer).rglob("*.py"))]
    assert len(files) > 20, "expected the tools' and the benchmarks' modules"
    climbing = [line for path in files for line in climbing_imports(path)]
    assert climbing == [], "imports of a layer above:\n" + "\n".join(climbing)


# The Cosmos-faithful store charges every operation by the cost model through one adapter module, so that a change
# of the model (the honest bill) changes one module of the store.
COST_MODEL_ADAPTER = "tools.cosmos_store.charges"
COSTS = {m for m in MODULES if m.startswith("tools.costs.")}


def test_the_store_meets_the_cost_model_through_one_module():
    store = [m for m in GRAPH if m.startswith("tools.cosmos_store") and m != COST_MODEL_ADAPTER]
    assert {m: sorted(GRAPH[m] & COSTS) for m in store if GRAPH[m] & COSTS} == {}
    assert GRAPH[COST_MODEL_ADAPTER] & COSTS


def package_of(module: str) -> str | None:
    """The job package of a `shared` module, or None for a common module (shared/*.py)."""
    parts = module.split(".")
    return parts[1] if (parts[0] == "shared" and len(parts) > 2) or module in (f"shared.{p}" for p in ALLOWED) else None


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_job_package_imports_only_what_it_may(package):
    reached = {
        (module, target)
        for module in GRAPH
        if package_of(module) == package
        for target in GRAPH[module]
        if target.startswith("shared.") and package_of(target) not in (None, package, *ALLOWED[package])
    }
    assert reached == set()


def test_no_two_packages_of_shared_import_each_other():
    """The packages read bottom to top (docs/architecture.md draws them): no arrow runs both ways."""
    edges = {
        (package_of(module), package_of(target))
        for module in GRAPH
        for target in GRAPH[module]
        if module.startswith("shared.") and target.startswith("shared.")
    }
    edges = {(a, b) for a, b in edges if a is not None and b is not None and a != b}
    assert sorted((a, b) for a, b in edges if (b, a) in edges) == []
    assert not any((b, a) in {(x, y) for x in ALLOWED for y in ALLOWED[x]} for a in ALLOWED for b in ALLOWED[a])


def test_the_common_modules_import_no_job_package():
    common = [m for m in GRAPH if m.startswith("shared.") and package_of(m) is None]
    assert common, "expected common modules in shared/"
    reached = {(m, t) for m in common for t in GRAPH[m] if package_of(t) is not None}
    assert reached == set()


def test_every_package_says_what_it_owns():
    packages = list(ROOT.joinpath("shared").rglob("__init__.py"))  # a job's subpackages (checks/) included
    jobs = {p.parent.name for p in ROOT.joinpath("shared").glob("*/__init__.py")}
    assert jobs == set(ALLOWED)
    undocumented = [str(p.relative_to(ROOT)) for p in packages if not ast.get_docstring(ast.parse(p.read_text()))]
    assert undocumented == []


def test_the_common_modules_stay_few():
    common = sorted(p.name for p in ROOT.joinpath("shared").glob("*.py") if p.name != "__init__.py")
    # The errors, the instants and the settings every package uses, and the NCRONTAB parser the settings check every
    # schedule with at start-up (the local host fires its timers by it too).
    assert common == ["errors.py", "instants.py", "ncrontab.py", "settings.py"], f"does one belong to a job? {common}"


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_reach_ins(path: Path, modules: set[str]) -> list[tuple[str, int, str]]:
    """(file, line, module._name) for each private name of another of `modules` that `path` imports (`from m
    import _name`) or reads through a module it imported (`m._name`), at any depth of the file."""
    relative, own = str(path.relative_to(ROOT)), module_name(path)
    tree = ast.parse(path.read_text())
    aliases: dict[str, str] = {}  # a local name bound to one of `modules`
    found: list[tuple[str, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases |= {alias.asname: alias.name for alias in node.names if alias.asname and alias.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            aliases |= {
                alias.asname or alias.name: f"{node.module}.{alias.name}"
                for alias in node.names
                if f"{node.module}.{alias.name}" in modules
            }
            if node.module in modules and node.module != own:
                found += [(relative, node.lineno, f"{node.module}.{a.name}") for a in node.names if is_private(a.name)]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and is_private(node.attr):
            target = aliases.get(node.value.id)
            if target and target != own:
                found.append((relative, node.lineno, f"{target}.{node.attr}"))
    return sorted(found)


def lines(found: list[tuple[str, int, str]]) -> str:
    return "\n".join(f"{path}:{line} {name}" for path, line, name in found)


def test_no_module_reaches_into_another_modules_private_names():
    """What two modules share is public; a leading underscore means the module's own (the app, the tools and the
    benchmarks; a test may still patch a private function to inject a fault)."""
    found = [hit for path in source_files() for hit in private_reach_ins(path, set(MODULES))]
    assert found == [], "private names used outside their module:\n" + lines(found)


def test_the_tests_use_only_their_helpers_public_names():
    helpers = {module_name(p) for p in ROOT.joinpath("tests").rglob("*.py") if not p.name.startswith(("test_", "conf"))}
    found = [
        hit for path in sorted(ROOT.joinpath("tests").rglob("test_*.py")) for hit in private_reach_ins(path, helpers)
    ]
    assert found == [], "a test helper's private names used by a test:\n" + lines(found)


# The tests mirror the code: a package of tests/ per package of shared/ (tests/reports/ for shared/reports/) or per
# top-level folder (tests/tools/, tests/infra/), and tests/integration/, the home of the `integration` marker's
# tests, mirrored the same way inside (tests/integration/reports/). Only helpers (api.py, checking.py,
# conftest.py, ...) stay at the top of tests/ and of tests/integration/.
TESTS = ROOT / "tests"
INTEGRATION = "integration"


def counterpart(package: Path) -> Path:
    """The code a package of tests/ mirrors: shared/<name> for a job package, else the top-level folder <name>;
    a subpackage mirrors the same path under its parent's counterpart; tests/integration/<path> mirrors what
    tests/<path> does."""
    parts = package.relative_to(TESTS).parts
    first, *rest = parts[1:] if parts[0] == INTEGRATION else parts
    base = ROOT / "shared" / first if (ROOT / "shared" / first).is_dir() else ROOT / first
    return base.joinpath(*rest)


def test_no_test_file_sits_at_the_top_of_tests_or_of_its_integration_tests():
    loose = sorted(
        str(p.relative_to(TESTS)) for folder in (TESTS, TESTS / INTEGRATION) for p in folder.glob("test_*.py")
    )
    assert loose == [], f"move these into the package of tests/ that mirrors the code they test: {loose}"


def test_every_folder_of_tests_is_a_package_mirroring_the_code():
    folders = sorted(p for p in TESTS.rglob("*") if p.is_dir() and p.name != "__pycache__" and any(p.glob("*.py")))
    assert {p.name for p in folders} >= {"reports", "notifications", "ingestion", "store", "tools", INTEGRATION}
    not_packages = [str(p.relative_to(ROOT)) for p in folders if not (p / "__init__.py").is_file()]
    assert not_packages == [], "pytest imports tests by package path: add an __init__.py"
    mirrored = [p for p in folders if p.relative_to(TESTS).parts != (INTEGRATION,)]
    orphans = [str(p.relative_to(ROOT)) for p in mirrored if not counterpart(p).is_dir()]
    assert orphans == [], f"packages of tests/ with no counterpart in the code: {orphans}"
    assert f'"{INTEGRATION}: ' in ROOT.joinpath("pyproject.toml").read_text()  # tests/integration/'s marker
