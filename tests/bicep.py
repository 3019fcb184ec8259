"""Reading infra/*.bicep in tests, without a Bicep compiler: pycep's parse tree, and the literal a value stands
for where it is one (a literal, or a param default / var value it names)."""

from functools import cache
from pathlib import Path
from typing import Any

from pycep import BicepParser
from pycep.models import BicepElement

ROOT = Path(__file__).resolve().parent.parent
INFRA = ROOT / "infra"

Tree = dict[str, Any]


class Expression:
    """A value only known at deployment (a reference to another resource, a function call, an interpolation)."""

    def __repr__(self) -> str:
        return "<expression>"


EXPRESSION = Expression()


@cache
def parse(relative: str) -> Tree:
    """The parse tree of infra/<relative>; fails the test if pycep cannot read it."""
    tree: Tree = dict(BicepParser().parse(file_path=INFRA / relative))
    return tree


def literal(tree: Tree, value: Any) -> Any:
    """`value` as plain data: literals as they are, a param or var name replaced by its default or value,
    objects and arrays resolved item by item; EXPRESSION where it depends on the deployment."""
    if isinstance(value, BicepElement):
        name = str(value)
        if name in tree.get("parameters", {}):
            return literal(tree, tree["parameters"][name]["default"])
        if name in tree.get("variables", {}):
            return literal(tree, tree["variables"][name]["value"])
        return EXPRESSION
    if isinstance(value, str):
        return EXPRESSION if "${" in value else value
    if isinstance(value, bool | int) or value is None:
        return value
    if isinstance(value, list):
        return [literal(tree, item) for item in value]
    if isinstance(value, dict) and not ({"operator", "function"} & value.keys()):
        return {str(key).strip("'"): literal(tree, item) for key, item in value.items()}
    if isinstance(value, dict) and isinstance(value.get("operator"), dict) and value["operator"]["type"] == "multiply":
        operands = [literal(tree, item) for item in value["operator"]["operands"].values()]
        if all(isinstance(item, int) and not isinstance(item, bool) for item in operands):
            return operands[0] * operands[1]
    return EXPRESSION


def evaluate(tree: Tree, value: Any, scope: dict[str, Any]) -> Any:
    """`value` computed for one deployment: `scope` gives the loop item and any parameter values passed (others
    take their defaults); a var is computed the same way; conditionals, `!`, `||`, `&&`, `==`, `!=`, `empty`,
    `contains`, `min`, `concat`, `c.x` and `x[y]` are evaluated, literals and objects as `literal` reads them.
    Anything else (a module's output, a resource's property) is EXPRESSION."""
    if isinstance(value, BicepElement) and str(value) in scope:
        return scope[str(value)]
    if isinstance(value, BicepElement) and str(value) in tree.get("variables", {}):
        return evaluate(tree, tree["variables"][str(value)]["value"], scope)
    if isinstance(value, dict) and "operator" in value and isinstance(value["operator"], dict):
        return _operator(tree, value, scope)
    if isinstance(value, dict) and "function" in value and isinstance(value["function"], dict):
        return _function(tree, value["function"]["type"], value["function"]["parameters"], scope)
    if isinstance(value, dict):
        return {str(key).strip("'"): evaluate(tree, item, scope) for key, item in value.items()}
    if isinstance(value, list):
        return [evaluate(tree, item, scope) for item in value]
    return literal(tree, value)


def _operator(tree: Tree, value: dict[str, Any], scope: dict[str, Any]) -> Any:
    kind, operands = value["operator"]["type"], value["operator"]["operands"]
    if kind == "conditional":
        branch = "true_value" if evaluate(tree, operands["condition"], scope) else "false_value"
        return evaluate(tree, operands[branch], scope)
    if kind == "not":
        return not evaluate(tree, operands["bool_value"], scope)
    if kind in ("or", "and"):
        left, right = (evaluate(tree, operands[key], scope) for key in ("operand_1", "operand_2"))
        return (left or right) if kind == "or" else (left and right)
    if kind in ("equals", "not_equals"):
        left, right = (evaluate(tree, operands[key], scope) for key in ("operand_1", "operand_2"))
        if EXPRESSION in (left, right):
            return EXPRESSION
        return (left == right) if kind == "equals" else (left != right)
    if kind in ("property_accessor", "index_accessor"):
        container = evaluate(tree, operands["operand_1"], scope)
        key = operands["operand_2"] if kind == "property_accessor" else evaluate(tree, operands["operand_2"], scope)
        return container[str(key)] if isinstance(container, dict) else EXPRESSION
    return literal(tree, value)


def _function(tree: Tree, kind: str, arguments: dict[str, Any], scope: dict[str, Any]) -> Any:
    values = [evaluate(tree, argument, scope) for argument in arguments.values()]
    if kind == "empty":
        return not values[0]
    if kind == "contains":
        return values[1] in values[0]
    if kind == "min":
        return min(values)
    if kind == "concat" and all(isinstance(item, list) for item in values):
        return [item for items in values for item in items]
    return EXPRESSION


def variable(relative: str, name: str) -> Any:
    """The raw parse tree of `var name` in infra/<relative>."""
    variables = parse(relative)["variables"]
    assert name in variables, f"infra/{relative} has no `var {name}`"
    return variables[name]["value"]


def module(relative: str, name: str) -> Tree:
    """`module name` of infra/<relative>: its name, params and dependsOn (inside its `if`, when it has one)."""
    modules = parse(relative)["modules"]
    assert name in modules, f"infra/{relative} has no module `{name}`"
    config: Tree = modules[name]["config"]
    return config["config"] if "condition" in config else config


def deploys(relative: str, name: str, scope: dict[str, Any]) -> bool:
    """Whether `module name` of infra/<relative> is deployed with these parameter values (its `if`, if any)."""
    config = parse(relative)["modules"][name]["config"]
    return "condition" not in config or bool(evaluate(parse(relative), config["condition"], scope))


def registry_modules(relative: str) -> dict[str, dict[str, Any]]:
    """The modules of infra/<relative> that come from the public Bicep registry (Azure Verified Modules), by name:
    their `path`, `tag` and the params passed."""
    return {
        name: {
            "path": declared["detail"]["path"],
            "tag": declared["detail"]["tag"],
            "params": module(relative, name)["params"],
        }
        for name, declared in parse(relative).get("modules", {}).items()
        if declared["type"] != "local"
    }


def resource(relative: str, name: str) -> Tree:
    resources = parse(relative)["resources"]
    assert name in resources, f"infra/{relative} has no resource `{name}`"
    found: Tree = resources[name]
    return found


def text(relative: str) -> str:
    return (INFRA / relative).read_text()
