"""The report: one self-contained HTML file (inline CSS, charts as inline SVG), or Markdown tables.

matplotlib draws the charts (their builders are in :mod:`dlbench.report.charts`): it is already
the plotting library of ``dlbench roofline``, it writes SVG with no JavaScript and no external
resources, and it runs headless (Agg). Text in the SVG is drawn as paths, so the file looks the
same without the fonts.

Every piece of text that comes from the user or the store (tags, model names, commands, paths)
goes through :func:`html.escape`, or in Markdown through
:func:`dlbench.report.table.md_escape`; builders here return strings and write no files.
"""

from __future__ import annotations

import html
import re
from typing import Any, Sequence

from dlbench import env as envmod
from dlbench.report import charts, tables
from dlbench.report.charts import Chart
from dlbench.report.charts.frameworks import framework_charts
from dlbench.report.charts.serve import serve_charts
from dlbench.report.table import Table, md_escape
from dlbench.report.tuned_tables import lever_tables
from dlbench.store import RunInfo
from dlbench.suites import canonical

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2em auto;
max-width:1200px;padding:0 1em;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:1em 0;font-size:.85em}
caption{text-align:left;font-weight:600;padding:.3em 0}
th,td{border:1px solid #ddd;padding:.25em .5em;vertical-align:top}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr:nth-child(even) td{background:#fafafa}
p.note{font-size:.8em;color:#555;margin:.2em 0}
figure{margin:1.5em 0}figure svg{max-width:100%;height:auto}
figcaption{font-size:.8em;color:#444}code{background:#f4f4f4;padding:0 .2em}
.scroll{overflow-x:auto}
"""

_NUMERIC = re.compile(r"^[-+]?[\d,]*\.?\d+(e[-+]?\d+)?%?( [a-z/]+)?( \(.*\))?$", re.I)


def esc(x: Any) -> str:
    """Escape any value for HTML text or a quoted attribute."""
    return html.escape("" if x is None else str(x), quote=True)


def table_html(t: Table) -> str:
    """A :class:`Table` as an HTML table with its title as caption and its notes below."""
    head = "".join(f"<th>{esc(c)}</th>" for c in t.columns)
    body = []
    for row in t.rows:
        cells = "".join(f'<td class="num">{esc(v)}</td>' if _NUMERIC.match(str(v)) else
                        f"<td>{esc(v)}</td>" for v in row)
        body.append(f"<tr>{cells}</tr>")
    notes = "".join(f'<p class="note">{esc(n)}</p>' for n in t.notes)
    return (f'<div class="scroll"><table><caption>{esc(t.title)}</caption><thead><tr>{head}'
            f'</tr></thead><tbody>{"".join(body)}</tbody></table>{notes}</div>')


# -- tables ---------------------------------------------------------------------------------------

def environment_tables(records: Sequence[Any]) -> list[Table]:
    """One table per distinct environment identity among the records."""
    seen: dict[str, tuple[dict, list[str]]] = {}
    for r in records:
        env = getattr(r, "env", None) or {}
        ident = envmod.identity(env)
        key = repr(sorted(ident.items(), key=lambda kv: kv[0]))
        if key not in seen:
            seen[key] = (env, [])
        if r.run_id and r.run_id not in seen[key][1]:
            seen[key][1].append(r.run_id)
    out = []
    for env, runs in seen.values():
        ident = envmod.identity(env)
        rows = [("device", envmod.device_label(env))]
        rows += [(k, envmod._show(v)) for k, v in ident.items()]
        rows += [("host", str(env.get("hostname") or "unknown")), ("runs", ", ".join(runs) or "-")]
        out.append(Table(f"Environment: {envmod.device_label(env)}", ("field", "value"),
                         tuple(rows)))
    return out


def run_table(runs: Sequence[RunInfo]) -> Table:
    # A store written before the suites' renaming holds their old names: show today's.
    rows = tuple((r.run_id, r.started_at or "-", r.status or "-", canonical(r.suite) or "-",
                  r.tag or "-", r.device or "-", r.command) for r in runs)
    return Table("Runs", ("run", "started", "status", "suite", "tag", "device", "command"), rows)


# -- charts ---------------------------------------------------------------------------------------

# The report's charts, in the order they appear. Each builder takes (records, commands by run id)
# and returns its charts, none where its data is absent (dlbench.report.charts says more). A
# record kind with charts of its own plugs its builder in here.
CHART_BUILDERS: tuple[charts.Builder, ...] = (
    charts.throughput_charts,
    charts.batch_charts,
    charts.memory_charts,
    charts.scaling_charts,
    charts.interconnect_charts,
    charts.strategy_charts,  # beside the scaling charts: the strategy table's memory and tok/s/GPU
    charts.mfu_charts,
    charts.roofline_charts,
    charts.published_charts,
    charts.telemetry_charts,
    charts.training_charts,
    charts.latency_charts,
    charts.decode_roofline_charts,
    serve_charts,
    framework_charts,
)


def all_charts(records: Sequence[Any], runs: Sequence[RunInfo]) -> list[Chart]:
    """Every chart whose data the records hold, in :data:`CHART_BUILDERS` order."""
    commands = {r.run_id: r.command for r in runs}
    return [c for build in CHART_BUILDERS for c in build(records, commands)]


def _figure(c: Chart, n: int) -> str:
    cmds = "; ".join(f"<code>{esc(x)}</code>" for x in c.commands) or "command not recorded"
    return (f"<figure>{charts.prefix_ids(c.svg, f'c{n}-')}<figcaption>{esc(c.title)}. "
            f"Data from: {cmds}</figcaption></figure>")


# -- documents ------------------------------------------------------------------------------------

def _device(records: Sequence[Any]) -> str:
    labels = list(dict.fromkeys(envmod.device_label(getattr(r, "env", None) or {})
                                for r in records))
    return " / ".join(labels) or "?"


def render_html(records: Sequence[Any], runs: Sequence[RunInfo], title: str = "dlbench report",
                source: str | None = None, generated_at: str | None = None) -> str:
    """The whole report as one HTML document (no external resources, no scripts)."""
    device = _device(records)
    parts = [f"<h1>{esc(title)}</h1>"]
    sub = [f"{len(records)} result(s) from {len(runs)} run(s)"]
    if source:
        sub.append(f"store: <code>{esc(source)}</code>")
    if generated_at:
        sub.append(f"written {esc(generated_at)}")
    parts.append(f'<p class="note">{" · ".join(sub)}</p>')
    parts.append("<h2>Environment</h2>")
    parts += [table_html(t) for t in environment_tables(records)] or ["<p>no results</p>"]
    if runs:
        parts.append(table_html(run_table(runs)))
    tbls = tables.tables_for(records, device) + lever_tables(records, runs)
    if tbls:
        parts.append("<h2>Tables</h2>")
        parts += [table_html(t) for t in tbls]
    drawn = all_charts(records, runs)
    if drawn:
        parts.append("<h2>Charts</h2>")
        parts += [_figure(c, n) for n, c in enumerate(drawn)]
    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title><style>{_CSS}</style></head>\n<body>\n{body}\n"
            f"</body></html>\n")


def render_markdown(records: Sequence[Any], runs: Sequence[RunInfo],
                    title: str = "dlbench report") -> str:
    """The report's tables as Markdown (for a README or an issue); no charts."""
    device = _device(records)
    tbls = environment_tables(records) + ([run_table(runs)] if runs else [])
    tbls += tables.tables_for(records, device) + lever_tables(records, runs)
    # md_escape and to_markdown: no link, image or HTML from the title or a stored string, and
    # a '|' in a cell (a command line) does not split it
    return f"# {md_escape(title)}\n\n" + "\n\n".join(t.to_markdown() for t in tbls) + "\n"
