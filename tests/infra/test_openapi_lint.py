"""openapi.yaml passes two well-known OpenAPI linters, each with its own recommended rules, failing on any error or
warning: Spectral (npm `@stoplight/spectral-cli`, rules in .spectral.yaml) and Redocly CLI (npm `@redocly/cli`, rules
in redocly.yaml). Both are pinned in package.json and installed into node_modules by `npm ci`, which ./dev test and
.ci/run do.

A contract that breaks them breaks the tools clients use: an array schema without `items`, or a `$ref` with sibling
keywords (which OpenAPI 3.0 ignores), is dropped or misread by client generators (tests/infra/test_openapi_client.py);
`nullable` beside no `type` is ignored by OpenAPI 3.0 validators, which then refuse the `null` the app sends.
Skipped, saying so, only where npm is absent; with npm present and a linter not installed it fails, naming the fix."""

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SPECTRAL = ROOT / "node_modules" / ".bin" / "spectral"
RULESET = ROOT / ".spectral.yaml"
REDOCLY = ROOT / "node_modules" / ".bin" / "redocly"
REDOCLY_CONFIG = ROOT / "redocly.yaml"

pytestmark = pytest.mark.skipif(
    shutil.which("npm") is None,
    reason="npm is not installed: Spectral and Redocly, the OpenAPI linters of openapi.yaml, come from npm (`npm ci`)",
)


def spectral_problems(document: Path, output: Path) -> list[dict[str, object]]:
    """Spectral's findings on `document` with the repository's ruleset, as its JSON report lists them."""
    assert SPECTRAL.exists(), "Spectral is not installed: run `npm ci` at the repository root (./dev test does)"
    lint = [str(SPECTRAL), "lint", str(document), "--ruleset", str(RULESET), "--fail-severity", "warn"]
    run = subprocess.run(
        [*lint, "--format", "json", "--output", str(output)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert output.exists(), f"Spectral wrote no report (exit {run.returncode}): {run.stdout}{run.stderr}"
    problems: list[dict[str, object]] = json.loads(output.read_text())
    assert (run.returncode == 0) == (not problems), (run.returncode, run.stdout, run.stderr)
    return problems


def test_the_ruleset_is_spectral_s_recommended_openapi_rules() -> None:
    assert RULESET.read_text().splitlines()[-1] == "extends: [[spectral:oas, recommended]]"


def test_openapi_yaml_has_no_error_or_warning_under_spectral_s_recommended_rules(tmp_path: Path) -> None:
    problems = spectral_problems(ROOT / "openapi.yaml", tmp_path / "spectral.json")
    found = [f"line {p['range']['start']['line'] + 1}: {p['code']}: {p['message']}" for p in problems]  # type: ignore[index]
    assert not found, "openapi.yaml fails Spectral's recommended rules:\n" + "\n".join(found)


def test_spectral_finds_what_it_is_there_to_find(tmp_path: Path) -> None:
    """The linter really runs the rules: an array without `items` and a `$ref` with a sibling are refused."""
    contract = yaml.safe_load((ROOT / "openapi.yaml").read_text())
    schemas = contract["components"]["schemas"]
    del schemas["InternalError"]["properties"]["details"]["items"]
    schemas["Notification"]["properties"]["created_at"]["description"] = "a sibling of its $ref"
    document = tmp_path / "openapi.yaml"
    document.write_text(yaml.safe_dump(contract, sort_keys=False))
    codes = {str(p["code"]) for p in spectral_problems(document, tmp_path / "spectral.json")}
    assert {"array-items", "no-$ref-siblings"} <= codes


def redocly_problems(document: Path) -> list[dict[str, Any]]:
    """Redocly's findings on `document` with the repository's redocly.yaml (its recommended rules), as its JSON
    report lists them (errors and warnings alike)."""
    assert REDOCLY.exists(), "Redocly CLI is not installed: run `npm ci` at the repository root (./dev test does)"
    run = subprocess.run(
        [str(REDOCLY), "lint", str(document), "--config", str(REDOCLY_CONFIG), "--format", "json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "REDOCLY_TELEMETRY": "off", "REDOCLY_SUPPRESS_UPDATE_NOTICE": "true"},
    )
    try:
        report = json.loads(run.stdout)
    except ValueError:
        raise AssertionError(
            f"Redocly wrote no JSON report (exit {run.returncode}): {run.stdout}{run.stderr}"
        ) from None
    problems: list[dict[str, Any]] = report["problems"]
    assert (run.returncode == 0) == (report["totals"]["errors"] == 0), (run.returncode, run.stderr)
    return problems


def test_redocly_s_config_is_its_recommended_rules_and_sends_no_usage_data() -> None:
    config = yaml.safe_load(REDOCLY_CONFIG.read_text())
    assert config == {"extends": ["recommended"], "telemetry": "off"}


def test_openapi_yaml_has_no_error_or_warning_under_redocly_s_recommended_rules() -> None:
    problems = redocly_problems(ROOT / "openapi.yaml")
    found = [
        f"line {p['location'][0]['start']['line']}: {p['ruleId']} ({p['severity']}): {p['message']}" for p in problems
    ]
    assert not found, "openapi.yaml fails Redocly's recommended rules:\n" + "\n".join(found)


def test_redocly_finds_what_it_is_there_to_find(tmp_path: Path) -> None:
    """The linter really runs the rules: `nullable` beside no `type` (which OpenAPI 3.0 ignores) is an error, an info
    without a license a warning."""
    contract = yaml.safe_load((ROOT / "openapi.yaml").read_text())
    status = contract["components"]["schemas"]["BottleStatus"]["properties"]["status"]["properties"]
    status["last_action"] = {"allOf": [{"$ref": "#/components/schemas/NullableAction"}], "nullable": True}
    del contract["info"]["license"]
    document = tmp_path / "openapi.yaml"
    document.write_text(yaml.safe_dump(contract, sort_keys=False))
    found = {(str(p["ruleId"]), str(p["severity"])) for p in redocly_problems(document)}
    assert {("nullable-type-sibling", "error"), ("info-license", "warn")} <= found
