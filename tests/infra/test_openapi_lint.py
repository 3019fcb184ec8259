"""openapi.yaml passes a well-known OpenAPI linter: Spectral (npm `@stoplight/spectral-cli`, pinned in package.json,
installed into node_modules by `npm ci`, which ./dev test and .ci/run do) with its recommended OpenAPI rules
(.spectral.yaml), failing on any error or warning.

A contract that breaks them breaks the tools clients use: an array schema without `items`, or a `$ref` with sibling
keywords (which OpenAPI 3.0 ignores), is dropped or misread by client generators (tests/infra/test_openapi_client.py).
Skipped, saying so, only where npm is absent; with npm present and Spectral not installed it fails, naming the fix."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SPECTRAL = ROOT / "node_modules" / ".bin" / "spectral"
RULESET = ROOT / ".spectral.yaml"

pytestmark = pytest.mark.skipif(
    shutil.which("npm") is None,
    reason="npm is not installed: Spectral, the OpenAPI linter of openapi.yaml, comes from npm (`npm ci`)",
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
