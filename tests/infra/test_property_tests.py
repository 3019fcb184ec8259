"""The property tests hold on a loaded machine: a hypothesis test has no per-example deadline, since an example
that takes 200 ms on 2 busy cores (hypothesis' default deadline) is the machine's doing, not the code's."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"


def _called(decorator: ast.expr) -> str | None:
    """The name a decorator calls (`settings` of `@settings(...)` or `@hypothesis.settings(...)`), if it calls one."""
    if not isinstance(decorator, ast.Call):
        return None
    func = decorator.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _deadline_is_none(decorators: list[ast.expr]) -> bool:
    for decorator in decorators:
        if _called(decorator) == "settings":
            assert isinstance(decorator, ast.Call)
            for keyword in decorator.keywords:
                if keyword.arg == "deadline":
                    return isinstance(keyword.value, ast.Constant) and keyword.value.value is None
    return False


def property_tests() -> dict[str, bool]:
    """Every test function of tests/ that hypothesis runs (`@given`, or `@settings` for a generated one), by
    `tests/package/file.py::name`: whether its settings say `deadline=None`."""
    found: dict[str, bool] = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                called = {_called(d) for d in node.decorator_list}
                if called & {"given", "settings"}:
                    found[f"{path.relative_to(ROOT)}::{node.name}"] = _deadline_is_none(node.decorator_list)
    return found


def test_every_property_test_runs_without_a_deadline():
    tests = property_tests()

    assert (
        "tests/ingestion/test_heartbeat_ring.py::test_a_slot_is_counted_exactly_when_the_decoded_ring_has_its_bit"
        in tests
    )
    assert [name for name, no_deadline in tests.items() if not no_deadline] == []
