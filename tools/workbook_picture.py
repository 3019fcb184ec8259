"""docs/workbook.png: a wireframe of the workbook the infra deploys, drawn from its own layout (infra/workbook.json),
not a screenshot (no data; nothing here reaches Azure): each section a band, each item a box as wide as its
`customWidth`, titled as in the portal and naming what it charts (the app's metric, or Cosmos DB's) and how (a
time chart, tiles, a table). The PNG records the SHA-256 of the layout it was drawn from
(tests/infra/test_workbook.py fails when the two part).

    python -m tools.workbook_picture [--output docs/workbook.png]
"""

import argparse
import hashlib
import json
import re
import textwrap
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyBboxPatch

ROOT = Path(__file__).resolve().parent.parent
LAYOUT = ROOT / "infra" / "workbook.json"
PICTURE = ROOT / "docs" / "workbook.png"
HASH_KEY = "workbook-sha256"  # the PNG text chunk that holds the layout's hash
KINDS = {"timechart": "time chart", "tiles": "tiles", "table": "table", "barchart": "bar chart"}


def layout_hash(path: Path = LAYOUT) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def describe(item: dict[str, Any]) -> tuple[str, str]:
    """An item's title, and what it shows: its chart kind and the metrics it names."""
    content = item["content"]
    if item["type"] == 10:  # an Azure Monitor metrics item (Cosmos DB's platform metrics)
        names = [m["metric"].rsplit("-", 1)[-1] for m in content["metrics"]]
        filters = [f"{f['key']} {', '.join(f['values'])}" for f in content.get("filters", [])]
        what = "Cosmos DB metric: " + ", ".join(names) + (f" ({'; '.join(filters)})" if filters else "")
        return content["title"], what + ", by CollectionName"
    query = content["query"]
    names = sorted(set(re.findall(r"'(pillbottle\.[a-z0-9_.]+)'", query)))
    source = ", ".join(n.removeprefix("pillbottle.") for n in names) or "billable telemetry by table (_BilledSize)"
    return content["title"], f"{KINDS.get(content.get('visualization', ''), 'query')}: {source}"


def draw(layout: dict[str, Any], output: Path, digest: str) -> None:
    """The wireframe of `layout` into `output`, with `digest` in its metadata."""
    sections = [item for item in layout["items"] if item["type"] == 12]
    rows: list[tuple[str, list[list[dict[str, Any]]]]] = []
    for section in sections:
        lines: list[list[dict[str, Any]]] = [[]]
        width = 0
        for item in section["content"]["items"]:
            share = int(item.get("customWidth", "100"))
            if width + share > 100:
                lines.append([])
                width = 0
            lines[-1].append(item)
            width += share
        rows.append((section["content"]["title"], lines))
    box_height, band = 1.4, 0.45
    height = 1.2 + sum(band + len(lines) * (box_height + 0.15) for _, lines in rows)
    figure, axes = plt.subplots(figsize=(12, height * 0.62))
    axes.set_xlim(0, 100)
    axes.set_ylim(0, height)
    axes.axis("off")
    y = height - 0.2
    title = layout["items"][0]["content"]["json"].splitlines()[0].lstrip("# ")
    axes.text(0, y - 0.35, title, fontsize=13, weight="bold", va="center")
    axes.text(100, y - 0.35, "a wireframe of infra/workbook.json (no data)", fontsize=8, ha="right", color="0.4")
    y -= 0.9
    for name, lines in rows:
        axes.add_patch(FancyBboxPatch((0, y - band + 0.05), 100, band - 0.1, boxstyle="square,pad=0", color="#1f4e79"))
        axes.text(1, y - band / 2, name, color="white", fontsize=10, weight="bold", va="center")
        y -= band
        for line in lines:
            x = 0.0
            for item in line:
                share = int(item.get("customWidth", "100"))
                heading, what = describe(item)
                axes.add_patch(FancyBboxPatch((x + 0.4, y - box_height), share - 0.8, box_height - 0.05,
                                              boxstyle="round,pad=0,rounding_size=0.6", facecolor="#f3f6f9",
                                              edgecolor="#8aa4bf"))  # fmt: skip
                chars = int(share * 0.95)
                axes.text(x + 1.2, y - 0.15, "\n".join(textwrap.wrap(heading, chars)[:2]), fontsize=8, weight="bold",
                          va="top")  # fmt: skip
                axes.text(x + 1.2, y - 0.8, "\n".join(textwrap.wrap(what, int(chars * 1.1))[:2]), fontsize=7.5,
                          va="top", color="0.25")  # fmt: skip
                x += share
            y -= box_height + 0.15
    figure.savefig(output, dpi=110, bbox_inches="tight", metadata={HASH_KEY: digest})
    plt.close(figure)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.workbook_picture", description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=PICTURE)
    args = parser.parse_args(argv)
    draw(json.loads(LAYOUT.read_text()), args.output, layout_hash())
    print(f"written to {args.output}")


if __name__ == "__main__":
    main()
