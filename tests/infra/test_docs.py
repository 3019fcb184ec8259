"""The README stays short, with a contents list a reader can follow, and every relative link in the README and
docs/ leads somewhere: a file that exists and, with a `#fragment`, a heading in it (GitHub's anchors)."""

import re
import subprocess
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
TOPICS = [  # the docs/ pages the README, the other pages and the other helpers' sections point at
    "architecture",
    "api",
    "ingestion",
    "checks",
    "reports",
    "cosmos-db",
    "costs",
    "benchmarks",
    "operations",
    "testing",
    "configuration",
    "local-development",
    "archive",
]


def prose(text: str) -> str:
    """The text outside code blocks and inline code, where links are links."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    return re.sub(r"`[^`\n]*`", "", text)


def headings(text: str) -> list[str]:
    fenced = False
    found = []
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            found.append(line.lstrip("#").strip())
    return found


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped (not `-` or `_`), spaces made hyphens."""
    text = re.sub(r"`|\*\*", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for heading in headings(path.read_text()):
        slug = anchor(heading)
        found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return found


def relative_links(path: Path) -> list[str]:
    return [link for link in LINK.findall(prose(path.read_text())) if not re.match(r"[a-z]+:", link)]


def test_the_readme_is_at_most_400_lines() -> None:
    lines = len(README.read_text().splitlines())
    assert lines <= 400, f"README.md has {lines} lines: move detail to docs/"


def test_the_readme_has_a_contents_list_of_its_own_sections() -> None:
    text = README.read_text()
    contents = re.search(r"^## Contents\n\n((?:- \[.*\]\(#.*\)\n)+)", text, re.MULTILINE)
    assert contents, "README.md has no `## Contents` list of links to its sections"
    listed = re.findall(r"\]\(#([^)]+)\)", contents.group(1))
    sections = [anchor(line[3:]) for line in text.splitlines() if line.startswith("## ") and line != "## Contents"]
    assert listed == sections, "the contents list should name every section, in order"


def test_every_topic_has_its_page_starting_with_a_summary() -> None:
    for topic in TOPICS:
        text = (ROOT / "docs" / f"{topic}.md").read_text()
        title, blank, summary = text.splitlines()[:3]
        assert title.startswith("# "), topic
        assert not blank, topic
        assert summary, topic
        assert not summary.startswith(("#", "-", "|", "```")), f"{topic}: no summary paragraph under the title"


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(page: Path) -> None:
    broken = []
    for link in relative_links(page):
        target, _, fragment = unquote(link).partition("#")
        path = (page.parent / target).resolve() if target else page
        if not path.exists():
            broken.append(f"{link}: no file {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
        elif fragment and (path.suffix != ".md" or fragment not in anchors(path)):
            broken.append(f"{link}: no heading #{fragment} in {path.relative_to(ROOT)}")
    assert not broken, "\n".join(broken)


def test_the_anchors_follow_githubs_rules() -> None:
    assert anchor("Report events: `POST /api/bottles/{bottle_id}/events`") == (
        "report-events-post-apibottlesbottle_idevents"
    )
    assert anchor("Why a check does not cost O(fleet)") == "why-a-check-does-not-cost-ofleet"
    assert anchor("Placing the clock: `PILLBOTTLE_TEST_CLOCK_START`") == "placing-the-clock-pillbottle_test_clock_start"


def tracked_files() -> list[Path]:
    """Every file of the repository: git's list where this is a checkout, else every file outside the virtualenv,
    the npm packages, mutmut's copy and the caches."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        skipped = {".venv", "node_modules", "mutants", ".git", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
        return [p for p in ROOT.rglob("*") if p.is_file() and not skipped & set(p.relative_to(ROOT).parts)]
    return [ROOT / name for name in listed.decode().split("\0") if name]


def test_the_repository_states_its_rules_itself_and_cites_no_design_file_outside_it():
    """The design notes this project was built from are not part of it: a rule the docs or the code rely on is
    stated here, with its source (a Microsoft page, a measurement), never as a citation of that file."""
    outside = "DESIGN" + ".md"  # spelt so that this file does not cite it either
    files = tracked_files()

    assert ROOT / "README.md" in files
    citing = [
        str(p.relative_to(ROOT)) for p in files if p.is_file() and outside in p.read_bytes().decode(errors="replace")
    ]
    assert citing == []


# An issue's number, or "the issue" as a source (its case, its figure), means something only to a reader of this
# project's tracker, which a reader of the repository does not have: the docs and the code state the rule or the goal
# itself. (An upstream project's issue is a link to it, naming its repository: `azure-functions-host#10770`.)
ISSUE_REFERENCE = re.compile(r"\bissues?\s+#?\d+|\bthe issue['’_]s\b", re.IGNORECASE)


# tools/lifecycle.py is being split by another change, which takes this docstring with it (spelt so that this file
# does not name it either).
def test_the_docs_and_the_code_name_no_issue_of_the_project():
    texts = [p for p in tracked_files() if p.suffix in (".md", ".py", ".yaml", ".toml", ".bicep") and p.is_file()]
    assert ROOT / "README.md" in texts
    found = [
        (str(path.relative_to(ROOT)), number, match.group())
        for path in texts
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        for match in ISSUE_REFERENCE.finditer(line)
    ]
    unknown = [f"{path}:{number}: {text}" for path, number, text in found]
    assert unknown == [], "issues named by number (state the rule or the goal instead):\n" + "\n".join(unknown)
