"""Write a benchmark run's `report.md` (Markdown tables, plots, notes) and `results.json`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from robotrl.bench.summary import sanitize


@dataclass
class Table:
    title: str
    headers: Sequence[str]
    rows: Sequence[Sequence[object]]


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub-flavoured Markdown table ("|" in cells escaped)."""

    def line(cells: Sequence[object]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(headers), line(["---"] * len(headers)), *(line(r) for r in rows)])


def write_report(
    out_dir: Path,
    title: str,
    tables: Sequence[Table],
    results: dict,
    *,
    plots: Sequence[str] = (),
    notes: Sequence[str] = (),
) -> None:
    """`out_dir/report.md` and `out_dir/results.json` (strict JSON: NaN becomes null)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    parts = [f"# {title}", ""]
    for table in tables:
        parts += [f"## {table.title}", "", markdown_table(table.headers, table.rows), ""]
    if notes:
        parts += ["## Notes", "", *(f"- {n}" for n in notes), ""]
    if plots:
        parts += ["## Plots", "", *(f"![{p}]({p})" for p in plots), ""]
    (out / "report.md").write_text("\n".join(parts))
    (out / "results.json").write_text(json.dumps(sanitize(results), indent=2, allow_nan=False))
